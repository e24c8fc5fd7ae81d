package memfeed

import (
	"context"
	"errors"

	"github.com/tidesync/tide/core/feed"
)

var _ feed.LastChanger = (*Feed)(nil)

// LastChange returns the newest retained change of q.Key in q.Schema's
// resource, reading the log from its head down; ok is false if the log
// holds none.
func (f *Feed) LastChange(ctx context.Context, q feed.KeyQuery) (feed.Change, bool, error) {
	if err := ctx.Err(); err != nil {
		return feed.Change{}, false, err
	}
	if q.Schema == nil {
		return feed.Change{}, false, errors.New("memfeed: LastChange query has no schema")
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i := len(f.log) - 1; i >= 0; i-- {
		if c := &f.log[i]; c.Resource == q.Schema.Name && c.Key == q.Key {
			return *c, true, nil
		}
	}
	return feed.Change{}, false, nil
}
