package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/tidesync/tide/core/protocol"
)

// The store's own facts (Meta): the device's origin, the principal its data
// belongs to, and the server's frame limit. They live in the store beside
// the records and the queue because each of them is what makes the stored
// data safe to use again: the queue is resent under the origin it was first
// sent under (or the server could not tell a resend from a new mutation),
// the rows and the queue are another principal's business when the server
// says the caller is someone else, and a mutation is refused at Mutate if
// its frame could never be sent.

// defaultMaxFrameBytes is the frame limit Mutate assumes before any
// welcome: the server's default (core.Config.MaxFrameBytes).
const defaultMaxFrameBytes = 65536

// ErrOtherPrincipal is returned by Run (wrapped; test it with errors.Is)
// when the server's welcome names another principal than the one the
// store belongs to (Meta.Principal): the client stops before it subscribes
// anything or sends any queued mutation, so one principal's queue is never
// sent under another's session and its rows are never extended with
// another's. Open another store for the new principal (one per user, say),
// or remove the old store's file to start over.
var ErrOtherPrincipal = errors.New("client: the store belongs to another principal")

// loadMeta reads the store's Meta at New and settles the client's origin:
// Config.Origin, else the stored one, else a new random one, saved.
func (c *Client) loadMeta(ctx context.Context) error {
	if c.mstore == nil {
		if c.cfg.Origin == "" {
			c.cfg.Origin = newOrigin()
		}
		return nil
	}
	m, err := c.mstore.LoadMeta(ctx)
	if err != nil {
		return fmt.Errorf("client: load the store's meta: %w", err)
	}
	if c.cfg.Origin == "" {
		c.cfg.Origin = m.Origin
	}
	if c.cfg.Origin == "" {
		c.cfg.Origin = newOrigin()
	}
	if m.Origin == "" {
		// Saved before anything is queued: a mutation made by this client
		// is resent by the next under the same origin.
		m.Origin = c.cfg.Origin
		if err := c.mstore.SaveMeta(ctx, m); err != nil {
			return fmt.Errorf("client: save the store's origin: %w", err)
		}
	}
	c.meta = m
	return nil
}

func newOrigin() string { return "go-" + rand.Text() }

// frameLimit returns the largest frame the server accepts, as the last
// welcome (possibly of an earlier process) announced it.
func (c *Client) frameLimit() int {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	if c.meta.MaxFrameBytes > 0 {
		return c.meta.MaxFrameBytes
	}
	return defaultMaxFrameBytes
}

// welcomed checks a welcome against the store: it binds an unbound store to
// the welcome's principal, refuses (ErrOtherPrincipal) a welcome of another
// principal than the store's, and remembers the frame limit.
func (c *Client) welcomed(ctx context.Context, f protocol.ServerFrame) error {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	m := c.meta
	if m.Bound && m.Principal != f.Principal {
		return fmt.Errorf("%w: it holds the data of %s, and the server says this connection is %s",
			ErrOtherPrincipal, principalName(m.Principal), principalName(f.Principal))
	}
	m.Bound, m.Principal = true, f.Principal
	if f.Limits != nil && f.Limits.MaxFrameBytes > 0 {
		m.MaxFrameBytes = f.Limits.MaxFrameBytes
	}
	if m == c.meta {
		return nil
	}
	if c.mstore != nil {
		if err := c.mstore.SaveMeta(context.WithoutCancel(ctx), m); err != nil {
			return fmt.Errorf("client: save the store's meta: %w", err)
		}
	}
	c.meta = m
	return nil
}

func principalName(id string) string {
	if id == "" {
		return "the anonymous caller"
	}
	return fmt.Sprintf("principal %q", id)
}
