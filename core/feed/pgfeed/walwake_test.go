package pgfeed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/internal/testenv"
)

// With the sequencer's poll and the tail's poll an hour apart, a change
// reaches a tailer only if the WAL stream rang the sequencer: each write
// below is made while the sequencer waits for the stream, so it cannot be
// picked up by a look already under way.
func TestSequencerWakesOnWAL(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	for _, s := range feedtest.Schemas() {
		createTable(t, pool, s)
	}
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", SequencerInterval: time.Hour, PollInterval: time.Hour, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The sequencer's counters when it began a wait for the stream: from
	// then on only a wake-up can make it look (both polls are an hour
	// apart), though one may already be on its way (the WAL of its own
	// last step, say), and a look it starts may find a write made since.
	type wait struct{ steps, wakeups int64 }
	waiting := make(chan wait, 64)
	f.OnStreamWait(func() {
		st := f.SequencerStatus()
		select {
		case waiting <- wait{st.Steps, st.WALWakeups}:
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.Migrate(ctx, feedtest.Schemas()...); err != nil {
		t.Fatal(err)
	}
	at := head(t, f)
	f.StartSequencer()
	for i := range 5 {
		steps := f.SequencerStatus().Steps
		w := wait{steps: -1}
		for w.steps < steps {
			select {
			case w = <-waiting:
			case <-ctx.Done():
				t.Fatalf("write %d: the sequencer never waited for the WAL stream (status %+v)", i, f.SequencerStatus())
			}
		}
		insertItem(t, pool, fmt.Sprint("w", i), "t1", 1)
		got, err := f.Tail(ctx, at, 10)
		if err != nil {
			t.Fatalf("write %d: Tail: %v (status %+v)", i, err, f.SequencerStatus())
		}
		if len(got) != 1 || got[0].Key != fmt.Sprint("w", i) {
			t.Fatalf("write %d: tailed %+v", i, got)
		}
		at = got[0].Pos
		st := f.SequencerStatus()
		if !st.WALStream || st.WALWakeups <= w.wakeups {
			t.Fatalf("write %d: sequenced without a wake-up from the WAL stream: %+v", i, st)
		}
	}
}

// A role that may not replicate gets no WAL stream; its sequencer polls and
// every change still arrives.
func TestSequencerPollsWithoutReplicationRole(t *testing.T) {
	t.Parallel()
	admin, name := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	role := name + "_norepl"
	cfg := admin.Config().Copy()
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN NOREPLICATION NOSUPERUSER",
		"GRANT ALL ON SCHEMA " + name + " TO " + role,
		"GRANT CREATE ON DATABASE " + pgx.Identifier{cfg.ConnConfig.Database}.Sanitize() + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + role + " CASCADE", "DROP ROLE " + role} {
			if _, err := admin.Exec(context.Background(), sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	refused := make(chan struct{})
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	f.OnWALRefused(func() { close(refused) })
	for _, s := range feedtest.Schemas() {
		createTable(t, pool, s)
	}
	if err := f.Migrate(ctx, feedtest.Schemas()...); err != nil {
		t.Fatal(err)
	}
	at := head(t, f)
	f.StartSequencer()
	select {
	case <-refused:
	case <-ctx.Done():
		t.Fatalf("the WAL stream was not refused to a role without REPLICATION (status %+v)", f.SequencerStatus())
	}
	var got []feed.Change
	for i := range 3 {
		insertItem(t, pool, fmt.Sprint("p", i), "t1", 1)
		for len(got) <= i {
			cs, err := f.Tail(ctx, at, 10)
			if err != nil {
				t.Fatalf("Tail: %v", err)
			}
			got, at = append(got, cs...), cs[len(cs)-1].Pos
		}
	}
	// (The step's notification may wake the tailer before the sequencer
	// counts the step, so the counts of steps are not compared.)
	if st := f.SequencerStatus(); st.WALStream || st.WALWakeups != 0 {
		t.Fatalf("status %+v, want polling", st)
	}
}
