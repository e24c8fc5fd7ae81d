package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	routes "github.com/tidesync/tide/internal/transport"
)

// BenchmarkPollSnapshot pages a row-filtered scope of 1,000 rows (a fifth
// hidden) by polls on the in-memory feed, as a polling client catches up:
// every poll reads a page, encodes it and hands out a snapshot cursor, and
// the next one resumes from it. limit=1 is the worst case for cursors.
func BenchmarkPollSnapshot(b *testing.B) {
	e, err := core.New(core.Config{Logger: slog.New(slog.DiscardHandler), MaxPageSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	tbl, err := core.Register(e, core.Resource[ownTodo]{Table: "todos", Authorize: projects,
		Filter: func(p authz.Principal, r *ownTodo) bool { return !r.Private || r.Owner == p.ID }})
	if err != nil {
		b.Fatal(err)
	}
	var rows []ownTodo
	for i := range 1000 {
		rows = append(rows, ownTodo{ID: fmt.Sprintf("0190a1b2-c3d4-7e5f-8a9b-%012d", i), ProjectID: "p7", Owner: "bob", Private: i%5 == 0})
	}
	if err := tbl.Upsert(context.Background(), rows...); err != nil {
		b.Fatal(err)
	}
	p := alice("p7")
	conds := map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}
	for _, limit := range []int{1, 100} {
		b.Run(fmt.Sprint("limit=", limit), func(b *testing.B) {
			b.ReportAllocs()
			polls := 0
			for b.Loop() {
				cursor := ""
				for {
					out, err := routes.Of(e).Poll(context.Background(), p, "", protocol.PollRequest{V: 1, Resource: "todos", Conditions: conds, Cursor: cursor, Limit: limit})
					if err != nil {
						b.Fatal(err)
					}
					polls++
					var f struct {
						Cursor string `json:"cursor"`
						More   bool   `json:"more"`
					}
					if err := json.Unmarshal(out, &f); err != nil {
						b.Fatal(err)
					}
					if c, err := protocol.ParseCursor(f.Cursor); err != nil || !c.Snapshot || !f.More {
						break // the snapshot is over
					}
					cursor = f.Cursor
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(polls), "ns/poll")
		})
	}
}
