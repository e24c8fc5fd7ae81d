package pgfeed_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide"
	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// TestOpenSequencesWithoutClients: a node set up with tide.Open gives
// synced commits their positions while no client is connected, so every
// round of writes is sequenced instead of waiting for the first subscriber.
// No Head, snapshot or subscription runs in the test: each of those would
// sequence the changes itself.
func TestOpenSequencesWithoutClients(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	if _, err := pool.Exec(ctx, "CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL, done boolean NOT NULL DEFAULT false)"); err != nil {
		t.Fatal(err)
	}
	app, err := tide.Open(ctx, pool, tide.Config{Feed: pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)}}, func(e *core.Engine) error {
		_, err := core.Register(e, core.Resource[Todo]{Table: "todos", Authorize: authz.Authenticated})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	writeRoundsUnattended(ctx, t, pool, app.Feed, "todos")
	if n := app.Engine.Stats().Connections; n != 0 {
		t.Errorf("%d connections; the test opens none", n)
	}
}

// TestStartSequencerWithoutTail: at the feed level, StartSequencer alone
// (no Tail, no Head) gives positions to synced rows as they are written.
func TestStartSequencerWithoutTail(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, todoSchema)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	f.StartSequencer()
	writeRoundsUnattended(ctx, t, pool, f, todoSchema.Table)
}

// writeRoundsUnattended writes rounds of single-row transactions into
// table (a synced table with columns id, project_id and title) from
// several writers, and after
// each round waits, on the sequencer's notifications, until no change
// waits for a position and the change log holds every row written so far
// with one. It fails if
// that takes longer than the test's context allows.
func writeRoundsUnattended(ctx context.Context, t *testing.T, pool *pgxpool.Pool, f *pgfeed.Feed, table string) {
	t.Helper()
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{f.Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = listener.Exec(context.Background(), "UNLISTEN *") }()

	insert := "INSERT INTO " + pgx.Identifier{table}.Sanitize() + " (id, project_id, title) VALUES ($1, 'p1', 'x')"
	const rounds, writers, perWriter = 4, 4, 50
	var written int64
	for r := range rounds {
		insertConcurrently(ctx, t, pool, writers, perWriter, insert, func(w, i int) string { return fmt.Sprintf("r%d-w%d-%d", r, w, i) })
		written += writers * perWriter
		pending, logged := waitDrained(ctx, t, listener.Conn(), f, written)
		if pending != 0 || logged != written {
			t.Fatalf("round %d: %d rows written and no client connected: changes still without a position (%d), %d with one", r, written, pending, logged)
		}
	}
}

// todoSchema is the feed's view of the todos table of TestOpenSequencesWithoutClients.
var todoSchema = &feed.Schema{
	Name:  "todos",
	Table: "todos",
	Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindString},
		{Name: "project_id", Kind: protocol.KindString},
		{Name: "title", Kind: protocol.KindString},
	},
	Keys:  []int{0},
	Scope: []int{1},
}

// waitDrained waits until every committed change has a position and the change log holds
// want changes, looking again after each of the sequencer's notifications
// (and after a quiet second, should one be missed), until ctx ends. It
// returns the last counts it read.
func waitDrained(ctx context.Context, t *testing.T, conn *pgx.Conn, f *pgfeed.Feed, want int64) (pending, logged int64) {
	t.Helper()
	for ctx.Err() == nil {
		err := conn.QueryRow(ctx, "SELECT ("+f.PendingSQL()+"), (SELECT count(*) FROM "+f.LogSQL()+")").Scan(&pending, &logged)
		if err != nil {
			t.Fatal(err)
		}
		if pending == 0 && logged >= want {
			return pending, logged
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = conn.WaitForNotification(wctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	return pending, logged
}
