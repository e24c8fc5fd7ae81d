package pgfeed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// TestRevocations: published revocations reach every watcher in order,
// each once; a watcher started later gets them as stored ones; one stored
// while a watcher's connection is down arrives after it reconnects, and
// one stored without a notification (a lost NOTIFY) arrives by the poll.
func TestRevocations(t *testing.T) {
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	opts := pgfeed.Options{PollInterval: 200 * time.Millisecond}
	a, pool := newFeed(t, opts)
	b := migrated(t, pool, a.Schema()[:len(a.Schema())-len("_tide")], pgfeed.Options{Schema: a.Schema(), PollInterval: opts.PollInterval})

	type got struct {
		r       feed.Revocation
		initial bool
	}
	watch := func(f *pgfeed.Feed) chan got {
		ch := make(chan got, 16)
		if err := f.WatchRevocations(ctx, func(r feed.Revocation, initial bool) { ch <- got{r, initial} }); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	next := func(ch chan got, principal string, initial bool) feed.Revocation {
		t.Helper()
		select {
		case g := <-ch:
			if g.r.Principal != principal || g.initial != initial {
				t.Fatalf("got %+v (initial %v), want %s (initial %v)", g.r, g.initial, principal, initial)
			}
			return g.r
		case <-ctx.Done():
			t.Fatalf("no revocation of %s: %v", principal, ctx.Err())
			return feed.Revocation{}
		}
	}
	at := time.Unix(1_800_000_000, 123456789)
	publish := func(f *pgfeed.Feed, principal string) {
		t.Helper()
		if err := f.PublishRevocation(ctx, feed.Revocation{Kind: feed.RevokeAccess, Principal: principal, At: at, Node: "n1"}); err != nil {
			t.Fatal(err)
		}
	}

	onB := watch(b)
	publish(a, "alice")
	publish(a, "bob")
	r := next(onB, "alice", false)
	if r.Kind != feed.RevokeAccess || !r.At.Equal(at) || r.Node != "n1" || r.Seq == 0 {
		t.Fatalf("round trip changed the revocation: %+v", r)
	}
	if r2 := next(onB, "bob", false); r2.Seq <= r.Seq {
		t.Fatalf("seq %d after %d", r2.Seq, r.Seq)
	}
	late := watch(a)
	next(late, "alice", true)
	next(late, "bob", true)

	// The watcher's connection dies; what is stored meanwhile arrives.
	pid := b.RevocationWatcherPID()
	if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(pid)); err != nil {
		t.Fatal(err)
	}
	publish(a, "carol")
	next(onB, "carol", false)
	next(late, "carol", false)

	// Stored without NOTIFY: the poll finds it.
	if _, err := pool.Exec(ctx, "INSERT INTO "+a.RevocationsTable()+" (kind, principal, at_ns, node) VALUES (1, 'dave', 1, 'n2')"); err != nil {
		t.Fatal(err)
	}
	next(onB, "dave", false)
	next(late, "dave", false)
	select {
	case g := <-onB:
		t.Fatalf("delivered again: %+v", g)
	default:
	}
}

// TestWatchRevocationsBeforeMigrate: before Migrate, WatchRevocations
// fails with an error wrapping feed.ErrNotInstalled, so the engine's log
// tells the operator to run the migration instead of reporting a missing
// table.
func TestWatchRevocationsBeforeMigrate(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = f.WatchRevocations(ctx, func(feed.Revocation, bool) {})
	if !errors.Is(err, feed.ErrNotInstalled) || !strings.Contains(err.Error(), "call Migrate") {
		t.Fatalf("WatchRevocations before Migrate: %v, want an error wrapping feed.ErrNotInstalled that says to call Migrate", err)
	}
}
