package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
)

// tailStarts reports each start of the tailer.
type tailStarts struct {
	core.NopObserver
	started chan feed.Position
}

func (o tailStarts) TailStarted(at feed.Position) { o.started <- at }

// TestStartWithoutClients: Start runs the tailer with no connection, poll
// or readiness probe, once however often it is called, and Shutdown stops
// it (goleak checks that nothing outlives it); Start after Shutdown says
// the engine is draining.
func TestStartWithoutClients(t *testing.T) {
	obs := tailStarts{started: make(chan feed.Position, 4)}
	e, err := core.New(core.Config{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-obs.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tailer did not start")
	}
	// The tailer starts before the engine is ready (it then reads the
	// feed's epoch and keys): wait for that, without a client.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := core.AwaitReady(ctx, e); err != nil {
		t.Fatalf("not ready after the tailer started: %v", err)
	}
	if err := e.Ready(); err != nil {
		t.Errorf("Ready once ready: %v", err)
	}
	if n := e.Stats().TailStarts; n != 1 {
		t.Errorf("TailStarts = %d, want 1", n)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); !errors.Is(err, core.ErrDraining) {
		t.Errorf("Start after Shutdown: %v, want ErrDraining", err)
	}
}
