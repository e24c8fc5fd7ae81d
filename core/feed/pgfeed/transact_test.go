package pgfeed_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/internal/transport"
)

// TestTransactTransientFailure: a function whose transaction fails under
// it (here its connection is terminated, as when Postgres restarts)
// returns an error wrapping feed.ErrTransient and its own, records
// nothing, and the same mutation run again is applied (not replayed); a
// function's own errors, and an SQL error of its statement, do not wrap
// feed.ErrTransient. Through the engine, the first is answered with
// unavailable (resend), not mutator_error (the client would drop the
// write), and a resend is acknowledged.
func TestTransactTransientFailure(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exec2(t, pool, mDDL)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := core.New(core.Config{Feed: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = e.Shutdown(sctx)
	}()
	items, err := core.Register(e, core.Resource[mItem]{Table: "m_items", Name: "items", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	terminate := func(ctx context.Context, tx feed.Tx) ([]byte, error) {
		_, err := pgfeed.TxOf(tx).Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		return nil, err
	}
	put := func(id string) func(ctx context.Context, tx feed.Tx) ([]byte, error) {
		return func(ctx context.Context, tx feed.Tx) ([]byte, error) {
			_, err := pgfeed.TxOf(tx).Exec(ctx, "INSERT INTO m_items VALUES ($1, 'p', 1, 'u')", id)
			return []byte(`"ok"`), err
		}
	}
	id := feed.MutationID{Principal: "u", Origin: "o", Key: "k1", At: time.Now()}
	if _, _, err := f.Transact(ctx, id, terminate); !errors.Is(err, feed.ErrTransient) {
		t.Fatalf("terminated under the function: %v, want an error wrapping feed.ErrTransient", err)
	}
	if res, replayed, err := f.Transact(ctx, id, put("a")); err != nil || replayed || string(res) != `"ok"` {
		t.Fatalf("the same mutation again: %s, replayed %v, %v; want it applied", res, replayed, err)
	}
	own := errors.New("the function's own")
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, tx feed.Tx) ([]byte, error)
		want error
	}{
		{"own error", func(context.Context, feed.Tx) ([]byte, error) { return nil, own }, own},
		{"SQL error", func(ctx context.Context, tx feed.Tx) ([]byte, error) {
			_, err := pgfeed.TxOf(tx).Exec(ctx, "SELECT * FROM no_such_table")
			return nil, err
		}, nil},
	} {
		_, _, err := f.Transact(ctx, feed.MutationID{Principal: "u", Origin: "o", Key: tc.name, At: time.Now()}, tc.fn)
		if err == nil || errors.Is(err, feed.ErrTransient) || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want the function's error, not transient", tc.name, err)
		}
	}

	// Through the engine.
	var runs atomic.Int64
	if err := core.AddMutator(items, "put", core.Mutator[mArgs]{
		Authorize: func(context.Context, authz.Principal, mArgs) error { return nil },
		Run: func(ctx context.Context, tx *core.Tx, a mArgs) error {
			if runs.Add(1) == 1 {
				_, err := terminate(ctx, tx.Feed())
				return err
			}
			_, err := put(a.ID)(ctx, tx.Feed())
			return err
		},
	}); err != nil {
		t.Fatal(err)
	}
	p := authz.Principal{ID: "u"}
	m := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameMutate, Resource: "items", Name: "put", Key: "m1", Args: []byte(`{"id":"b"}`), At: time.Now().UnixMilli()}
	if _, perr := transport.Of(e).Mutate(ctx, p, "o", m); perr == nil || perr.Code != protocol.CodeUnavailable {
		t.Fatalf("mutator's connection terminated: %v, want %s", perr, protocol.CodeUnavailable)
	}
	if frame, perr := transport.Of(e).Mutate(ctx, p, "o", m); perr != nil {
		t.Fatalf("resent: %v (%s)", perr, frame)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM m_items WHERE id = 'b'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("row b: %d, %v; want it written once", n, err)
	}
}
