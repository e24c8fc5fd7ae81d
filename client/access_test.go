package client

// Local data follows access: a scope refused for access loses its rows and
// cursor, in memory and in the store, at once; Retry brings it back on the
// same Subscription.

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// storedRecord reads s's record from the store file at path, as a new
// process would.
func storedRecord(t *testing.T, path string, s Scope) Record {
	t.Helper()
	fs, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := s.Digest()
	r, ok, err := fs.Load(context.Background(), d)
	if err != nil || !ok {
		t.Fatalf("no stored record of %s (%v)", s, err)
	}
	return r
}

// waitState waits until sub is in state want.
func waitState(ctx context.Context, t *testing.T, sub *Subscription, want SubState) {
	t.Helper()
	c, st := sub.c, sub.st
	for {
		c.mu.Lock()
		state, ch := st.state, st.stateCh
		c.mu.Unlock()
		if state == want {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s stayed %s, want %s", sub.Scope(), state, want)
		}
	}
}

// waitFailed waits until sub is refused and returns its error.
func waitFailed(ctx context.Context, t *testing.T, sub *Subscription) *protocol.Error {
	t.Helper()
	waitState(ctx, t, sub, SubFailed)
	err := sub.Wait(ctx)
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("Wait = %v in state %s, want a refusal", err, sub.State())
	}
	return pe
}

func TestRefusedScopeDropsItsDataAndRetryBringsItBack(t *testing.T) {
	ctx := testCtx(t)
	var allowed atomic.Bool
	allowed.Store(true)
	policy := func(context.Context, authz.Request) error {
		if !allowed.Load() {
			return authz.ErrForbidden
		}
		return nil
	}
	srv := newRealServerWith(t, core.Config{}, policy)
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "one"}, todo{ID: "t2", ProjectID: "p2", Title: "two"})
	path := filepath.Join(t.TempDir(), "store.json")
	store, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newTestClient(t, Config{URL: srv.url, Store: store})
	synced, err := c.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	handled, err := c.Subscribe(p2, rec)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	for _, s := range []*Subscription{synced, handled} {
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(synced.Rows()) != 1 || rec.mirror.Len() != 1 || len(storedRecord(t, path, p1).Rows) != 1 {
		t.Fatalf("before the refusal: rows %v, handler %v", synced.Rows(), rec.mirror.Rows())
	}

	// Access ends: the server ends both subscriptions with forbidden.
	allowed.Store(false)
	if _, err := srv.engine.Reauthorize(ctx, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Subscription{synced, handled} {
		if pe := waitFailed(ctx, t, s); pe.Code != protocol.CodeForbidden {
			t.Errorf("%s refused with %s, want forbidden", s.Scope(), pe.Code)
		}
	}
	if rows := synced.Rows(); len(rows) != 0 {
		t.Errorf("the refused synced scope still shows %v", rows)
	}
	if synced.Cursor() != "" {
		t.Errorf("the refused synced scope kept its cursor %q", synced.Cursor())
	}
	if rows := rec.mirror.Rows(); len(rows) != 0 {
		t.Errorf("the refused handler's scope was not reset: %v", rows)
	}
	for _, s := range []Scope{p1, p2} {
		r := storedRecord(t, path, s)
		if len(r.Rows) != 0 || r.Cursor != "" || r.State != StateFailed || r.Refusal != protocol.CodeForbidden {
			t.Errorf("stored record of %s after the refusal: %+v, want no rows, no cursor, failed forbidden", s, r)
		}
	}

	// Access returns; Retry resumes both on the same objects.
	allowed.Store(true)
	for _, s := range []*Subscription{synced, handled} {
		if err := s.Retry(); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatalf("after Retry, Wait = %v", err)
		}
		if s.Err() != nil {
			t.Errorf("Err after catching up = %v", s.Err())
		}
	}
	if rows := decodeRows(t, synced.Rows()); rows["t1"].Title != "one" || len(rows) != 1 {
		t.Errorf("after Retry the synced rows are %v", rows)
	}
	expectRows(ctx, t, &rec.mirror, map[string]todo{"t2": {ID: "t2", ProjectID: "p2", Title: "two"}})
	if r := storedRecord(t, path, p1); len(r.Rows) != 1 || r.State != StateLive || r.Cursor == "" || r.Refusal != "" {
		t.Errorf("stored record after Retry: %+v", r)
	}
}

// A connection-level refusal that Run does not retry (close 1008 with
// credentials the client cannot renew) drops every scope's data too.
func TestRevokedConnectionDropsEveryScopesData(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServerWith(t, core.Config{}, authz.Allow, middleware.WithPrincipal(headerPrincipal))
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "one"})
	path := filepath.Join(t.TempDir(), "store.json")
	store, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newTestClient(t, Config{URL: srv.url, Store: store, Header: http.Header{"X-User": {"u1"}}})
	sub, err := c.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, c)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sub.Rows()) != 1 {
		t.Fatalf("rows %v", sub.Rows())
	}
	srv.engine.Revoke("u1")
	var ce *CloseError
	if err := h.result(ctx, t); !errors.As(err, &ce) || ce.Code != protocol.ClosePolicy {
		t.Fatalf("Run = %v, want a CloseError 1008", err)
	}
	if rows := sub.Rows(); len(rows) != 0 {
		t.Errorf("rows kept after the connection was refused: %v", rows)
	}
	if pe := waitFailed(ctx, t, sub); pe.Code != protocol.CodeUnauthenticated {
		t.Errorf("refusal %v, want unauthenticated", pe)
	}
	if r := storedRecord(t, path, p1); len(r.Rows) != 0 || r.Cursor != "" || r.State != StateFailed {
		t.Errorf("stored record after the refusal: %+v", r)
	}
}

// TestSessionLostOnTheServer: the app's server-side sessions are lost (a
// restart, say) while the client is connected; after it reconnects, its
// subscription is refused as unauthenticated. A client that can renew its
// credentials (HeaderFunc) reports the refusal, reconnects with the
// renewed session and resumes, and Run goes on; one that cannot (a static
// cookie in Header) reports it and Run ends with an error wrapping
// ErrCredentialsRefused and the refusal, instead of running on with the
// scope failed.
func TestSessionLostOnTheServer(t *testing.T) {
	for _, renewable := range []bool{false, true} {
		t.Run(map[bool]string{false: "static cookie", true: "HeaderFunc"}[renewable], func(t *testing.T) {
			ctx := testCtx(t)
			// The app: a long-lived user cookie names the principal, a
			// session cookie must name a live server-side session.
			var mu sync.Mutex
			sessions := map[string]bool{"s1": true}
			cookie := "user=alice; session=s1"
			principal := func(r *http.Request) (authz.Principal, error) {
				p := authz.Principal{Claims: map[string]any{}}
				if c, err := r.Cookie("user"); err == nil {
					p.ID = c.Value
				}
				if c, err := r.Cookie("session"); err == nil {
					p.Claims["session"] = c.Value
				}
				return p, nil
			}
			policy := func(_ context.Context, req authz.Request) error {
				sid, _ := req.Principal.Claims["session"].(string)
				mu.Lock()
				defer mu.Unlock()
				if !sessions[sid] {
					return authz.ErrUnauthenticated
				}
				return nil
			}
			srv := newRealServerWith(t, core.Config{}, policy, middleware.WithPrincipal(principal))
			srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "one"})
			cfg := Config{URL: srv.url}
			if renewable {
				cfg.HeaderFunc = func(context.Context) (http.Header, error) {
					mu.Lock()
					defer mu.Unlock()
					return http.Header{"Cookie": {cookie}}, nil
				}
				cfg.OnEvent = func(e Event) {
					if e.Kind == EventServerError && e.Code == protocol.CodeUnauthenticated {
						// The app signs in again.
						mu.Lock()
						sessions["s2"], cookie = true, "user=alice; session=s2"
						mu.Unlock()
					}
				}
			} else {
				cfg.Header = http.Header{"Cookie": {cookie}}
			}
			c, events := newTestClient(t, cfg)
			sub, err := c.Sync(p1)
			if err != nil {
				t.Fatal(err)
			}
			h := start(t, c)
			if err := sub.Wait(ctx); err != nil {
				t.Fatal(err)
			}

			mu.Lock()
			clear(sessions)
			mu.Unlock()
			c.Reconnect()
			events.wait(ctx, t, "the refusal reported", func(es []Event) bool {
				for _, e := range es {
					if e.Kind == EventServerError && e.Code == protocol.CodeUnauthenticated && e.Scope.String() == p1.String() {
						return true
					}
				}
				return false
			})

			if renewable {
				// Reconnected with the renewed session: live again, Run on.
				events.wait(ctx, t, "a reconnect after the refusal", func(es []Event) bool {
					for _, e := range es {
						if e.Kind == EventDisconnected && e.Err != nil && strings.Contains(e.Err.Error(), "reconnecting with fresh credentials") {
							return true
						}
					}
					return false
				})
				waitState(ctx, t, sub, SubLive)
				if rows := sub.Rows(); len(rows) != 1 {
					t.Errorf("rows after the renewed session: %v", rows)
				}
				select {
				case err := <-h.done:
					t.Fatalf("Run returned %v; want it running", err)
				default:
				}
				return
			}
			err = h.result(ctx, t)
			var pe *protocol.Error
			if !errors.Is(err, ErrCredentialsRefused) || !errors.As(err, &pe) || pe.Code != protocol.CodeUnauthenticated {
				t.Fatalf("Run = %v, want an error wrapping ErrCredentialsRefused and the unauthenticated refusal", err)
			}
			last := events.all()[len(events.all())-1]
			if last.Kind != EventDisconnected || !errors.Is(last.Err, ErrCredentialsRefused) {
				t.Errorf("the last event is %s, want disconnected with the error Run returned", last)
			}
			if pe := waitFailed(ctx, t, sub); pe.Code != protocol.CodeUnauthenticated {
				t.Errorf("the scope's refusal %v, want unauthenticated", pe)
			}
			if rows := sub.Rows(); len(rows) != 0 {
				t.Errorf("the refused scope kept its rows: %v", rows)
			}
		})
	}
}
