package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The store keeps one record per scope the app follows; the records are
// the list of followed scopes. A scope is followed from Sync or Subscribe
// until Unsubscribe (its record is kept, marked unsubscribed, for a later
// Subscribe to resume from) or Forget (its record is deleted). A client
// started again on the same store resumes every followed scope on its own
// (Run calls Resume), from its stored cursor, so only what it missed is
// replayed.

// ErrNoList is returned by Followed and Resume when the Config.Store
// cannot list its records (it is not a RecordLister).
var ErrNoList = errors.New("client: the store cannot list its records")

// Followed returns the scopes the store records as followed: declared with
// Sync or Subscribe, by this process or an earlier one on the same store,
// and neither unsubscribed nor forgotten. Records that do not describe a
// valid scope are skipped. The order is the scopes' String order.
func (c *Client) Followed(ctx context.Context) ([]Scope, error) {
	recs, err := c.followed(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Scope, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.scope)
	}
	return out, nil
}

type followedRecord struct {
	Record
	scope Scope
}

func (c *Client) followed(ctx context.Context) ([]followedRecord, error) {
	l, ok := c.store.(RecordLister)
	if !ok {
		return nil, ErrNoList
	}
	recs, err := l.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: list the store's records: %w", err)
	}
	var out []followedRecord
	for _, r := range recs {
		if r.State == StateUnsubscribed {
			continue
		}
		s, err := scopeOf(r)
		if err != nil {
			c.log.Warn("tide client: a stored record does not describe a scope; skipped", "digest", r.Digest, "err", err)
			continue
		}
		out = append(out, followedRecord{r, s})
	}
	slices.SortFunc(out, func(a, b followedRecord) int { return strings.Compare(a.scope.String(), b.scope.String()) })
	return out, nil
}

// Resume subscribes every followed scope (see Followed) the app has not
// declared in this process: a scope opened with Sync is synced again, from
// its stored rows and cursor; one opened with Subscribe gets the Handler
// that Config.Handler makes for it, and is left alone when Config.Handler
// is nil. It returns the subscriptions it made. Run calls it once when it
// starts, unless Config.NoResume is set; calling it again is harmless.
func (c *Client) Resume(ctx context.Context) ([]*Subscription, error) {
	recs, err := c.followed(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Subscription
	var errs []error
	for _, r := range recs {
		c.mu.Lock()
		_, held := c.scopes[r.Digest]
		c.mu.Unlock()
		if held {
			continue
		}
		var h Handler
		if !r.Synced {
			if c.cfg.Handler == nil {
				continue
			}
			if h = c.cfg.Handler(r.scope); h == nil {
				continue
			}
		}
		sub, err := c.subscribe(r.scope, h)
		switch {
		case errors.Is(err, ErrDuplicateScope):
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, sub)
		}
	}
	return out, errors.Join(errs...)
}

// Subscriptions returns the subscriptions the client holds, in the order
// they were declared (resumed ones included).
func (c *Client) Subscriptions() []*Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	sts := make([]*scopeState, 0, len(c.scopes))
	for _, st := range c.scopes {
		sts = append(sts, st)
	}
	slices.SortFunc(sts, func(a, b *scopeState) int { return int(a.seq) - int(b.seq) })
	out := make([]*Subscription, len(sts))
	for i, st := range sts {
		out[i] = &Subscription{c: c, st: st}
	}
	return out
}

// Forget stops following s for good: it is unsubscribed if the client
// holds it, and its record (cursor and rows) is deleted from the store, so
// no later start resumes it and a later Subscribe starts from a snapshot.
// Forgetting a scope that is not followed is not an error.
func (c *Client) Forget(ctx context.Context, s Scope) error {
	n, err := s.normalize()
	if err != nil {
		return err
	}
	c.mu.Lock()
	st := c.scopes[n.digest]
	c.mu.Unlock()
	if st != nil {
		if err := (&Subscription{c: c, st: st}).Unsubscribe(); err != nil {
			return err
		}
	}
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	if err := c.store.Delete(ctx, n.digest); err != nil {
		return fmt.Errorf("client: Forget %s: %w", s, err)
	}
	return nil
}
