package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// betweenPagesFeed is an in-memory feed that runs hook once, right after it
// has read the first page of a snapshot of pages of limit rows: what the
// hook writes commits while the later pages are still to be read.
type betweenPagesFeed struct {
	*memfeed.Feed
	limit int
	hook  *func()
}

func (f betweenPagesFeed) Snapshot(ctx context.Context, q feed.SnapshotQuery) (feed.SnapshotPage, error) {
	pg, err := f.Feed.Snapshot(ctx, q)
	if h := *f.hook; err == nil && h != nil && q.Limit == f.limit && !q.HasAfter {
		*f.hook = nil
		h()
	}
	return pg, err
}

// TestPagedSnapshotConvergesAtCaughtUp: a snapshot in pages of two rows of
// a scope of two values (an "in" condition), with rows updated, deleted,
// moved out of the scope and created after its first page was read, reads
// its later pages at a newer position than the first: they hold the row
// written last while the copy still holds rows deleted since. The replay
// that follows from the first page's position brings the copy to the
// scope's current rows, exactly, by caught-up. A client that judged its
// copy complete by the row written last, before caught-up, would keep the
// stale rows.
func TestPagedSnapshotConvergesAtCaughtUp(t *testing.T) {
	var hook func()
	s := newServer(t, core.Config{Feed: betweenPagesFeed{Feed: memfeed.New(memfeed.Options{}), limit: 2, hook: &hook}})
	ctx := context.Background()
	put := func(rows ...todo) {
		t.Helper()
		for _, r := range rows {
			if err := s.todos.Upsert(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(todo{ID: "a0", ProjectID: "p7", Title: "old"}, todo{ID: "a1", ProjectID: "p8"}, todo{ID: "a2", ProjectID: "p7"},
		todo{ID: "a3", ProjectID: "p8", Title: "old"}, todo{ID: "a4", ProjectID: "p7"}, todo{ID: "a5", ProjectID: "p8"})
	hook = func() {
		// a0 and a1 were read in the first page: the replay brings them.
		put(todo{ID: "a0", ProjectID: "p7", Title: "new"})
		if err := s.todos.Delete(ctx, todo{ID: "a1"}); err != nil {
			t.Error(err)
		}
		// a2 leaves the scope (a delete), a3 is read new in a later page,
		// zz is written last.
		put(todo{ID: "a2", ProjectID: "p9"}, todo{ID: "a3", ProjectID: "p8", Title: "new"}, todo{ID: "zz", ProjectID: "p8"})
	}

	c := s.dial(t, "alice", "p7", "p8")
	c.hello()
	c.Send(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameSubscribe, ID: "s", Resource: "todos", Limit: 2,
		Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`{"in":["p7","p8"]}`)}})
	rows := map[string]todo{}
	var atLast map[string]todo // the copy when the row written last arrived
	for pages := 0; ; pages++ {
		if pages == 100 {
			t.Fatal("no caught-up after 100 frames")
		}
		f := c.Next()
		if f.ID != "s" {
			t.Fatalf("unexpected frame %+v", f)
		}
		if f.Type == protocol.FrameCaughtUp {
			break
		}
		if f.Type != protocol.FrameChanges {
			t.Fatalf("unexpected frame %+v", f)
		}
		for _, en := range f.Entries {
			if en.Op == "delete" {
				delete(rows, en.Key)
				continue
			}
			var w struct {
				ID        string `json:"id"`
				ProjectID string `json:"project_id"`
				Title     string `json:"title"`
				Done      bool   `json:"done"`
			}
			if err := json.Unmarshal(en.Row, &w); err != nil {
				t.Fatal(err)
			}
			rows[en.Key] = todo(w)
		}
		if _, ok := rows["zz"]; ok && atLast == nil {
			atLast = maps.Clone(rows)
		}
	}
	want := map[string]todo{
		"a0": {ID: "a0", ProjectID: "p7", Title: "new"}, "a3": {ID: "a3", ProjectID: "p8", Title: "new"},
		"a4": {ID: "a4", ProjectID: "p7"}, "a5": {ID: "a5", ProjectID: "p8"}, "zz": {ID: "zz", ProjectID: "p8"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("at caught-up the copy holds %v, want %v", rows, want)
	}
	// The case this test is about: the row written last came in a
	// snapshot page, before the replay made the copy whole.
	if fmt.Sprint(atLast) == fmt.Sprint(want) {
		t.Fatalf("the copy was already whole when the row written last arrived (%v): the snapshot did not span the writes", atLast)
	}
}
