package client

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

func entry(op, key, row string) protocol.Entry {
	e := protocol.Entry{Op: op, Key: key}
	if row != "" {
		e.Row = json.RawMessage(row)
	}
	return e
}

func TestTestRowsApply(t *testing.T) {
	var m testRows // zero value
	ctx := context.Background()
	_ = m.Apply(ctx, Batch{Entries: []protocol.Entry{
		entry("upsert", "a", `{"id":"a","v":1}`),
		entry("upsert", "b", `{"id":"b"}`),
		entry("upsert", "a", `{"id":"a","v":2}`),
		entry("delete", "missing", ""),
	}})
	if m.Len() != 2 || string(m.Rows()["a"]) != `{"id":"a","v":2}` {
		t.Fatalf("rows = %v", m.Rows())
	}
	rows := m.Rows()
	delete(rows, "a")
	if m.Len() != 2 {
		t.Fatal("Rows did not return a copy")
	}
	_ = m.Apply(ctx, Batch{Entries: []protocol.Entry{entry("delete", "b", "")}})
	if _, ok := m.Rows()["b"]; ok || m.Len() != 1 {
		t.Fatalf("delete not applied: %v", m.Rows())
	}
	_ = m.Apply(ctx, Batch{Reset: true, Entries: []protocol.Entry{entry("upsert", "c", `{"id":"c"}`)}})
	if got := m.Rows(); len(got) != 1 || got["c"] == nil {
		t.Fatalf("reset did not clear before applying: %v", got)
	}
}

func TestTestRowsWait(t *testing.T) {
	m := newTestRows()
	ctx := testCtx(t)
	done := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		done <- m.Wait(ctx, func(rows map[string]json.RawMessage) bool { return len(rows) == 2 })
	}()
	<-waiting
	_ = m.Apply(ctx, Batch{Entries: []protocol.Entry{entry("upsert", "a", `{}`)}})
	_ = m.Apply(ctx, Batch{Entries: []protocol.Entry{entry("upsert", "b", `{}`)}})
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}

	// A predicate that already holds returns at once; one that never holds
	// returns the context's error.
	if err := m.Wait(ctx, func(rows map[string]json.RawMessage) bool { return true }); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Wait(cctx, func(map[string]json.RawMessage) bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context = %v", err)
	}
}
