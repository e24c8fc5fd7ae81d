package core_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
)

// manualClock is a core.Clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// recordCounter is a slog.Handler keeping the records of level Error.
type recordCounter struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *recordCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordCounter) WithGroup(string) slog.Handler      { return h }

// unmigratedRevocations is a feed whose revocations cannot be read, as
// before the migration created their table.
type unmigratedRevocations struct {
	*memfeed.Feed
	calls int // guarded by the engine: one watcher loop calls it
}

func (f *unmigratedRevocations) WatchRevocations(context.Context, func(feed.Revocation, bool)) error {
	f.calls++
	return fmt.Errorf("pgfeed: read revocations: %w: schema \"tide\" lacks tide's tables", feed.ErrNotInstalled)
}

// TestRetryLogOncePerMinute: a feed operation that keeps failing (the
// revocations, before the migration) is retried every time, but logged at
// most once per minute of the engine's clock, each time saying to run the
// migration and how many failures went unlogged since.
func TestRetryLogOncePerMinute(t *testing.T) {
	const failures = 400
	clock := &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clock.Now()
	logs := &recordCounter{}
	f := &unmigratedRevocations{Feed: memfeed.New(memfeed.Options{})}
	e, err := core.New(core.Config{Feed: f, Clock: clock, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	waits := 0
	core.SetRetrySleep(e, func(_ context.Context, d time.Duration) bool {
		// Only the revocation watcher retries: the memory feed's head is
		// always there.
		clock.advance(d)
		waits++
		if waits == failures {
			close(done)
			return false // ends the loop, as a cancelled ctx would
		}
		return true
	})
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the revocation watcher retried %d times, want %d", waits, failures)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.calls != failures {
		t.Errorf("WatchRevocations was called %d times, want %d: every failure is retried", f.calls, failures)
	}
	elapsed := clock.Now().Sub(start)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var got []slog.Record
	for _, r := range logs.records {
		if strings.Contains(r.Message, "revocations") {
			got = append(got, r)
		}
	}
	// At most once a minute; and, over several minutes, more than once.
	if max := 1 + int(elapsed/time.Minute); len(got) > max || len(got) < 2 {
		t.Errorf("%d failures over %v were logged %d times, want 2 to %d", failures, elapsed, len(got), max)
	}
	unlogged := 0
	for _, r := range got {
		if !strings.Contains(r.Message, "Migrate") || !strings.Contains(r.Message, "tide.Open") {
			t.Errorf("the record does not say to run the migration: %q", r.Message)
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "not_logged_since" {
				unlogged += int(a.Value.Int64())
			}
			return true
		})
	}
	// The last failures may not have been logged yet.
	if unlogged+len(got) > failures || unlogged == 0 {
		t.Errorf("the records count %d unlogged failures, with %d logged of %d", unlogged, len(got), failures)
	}
}
