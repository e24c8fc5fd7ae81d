package memfeed_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
)

// TestLastChange: the last change of a key is its newest in the log: none
// for a key never written, the upsert into its new scope after a move, a
// delete after a delete, and none once pruned past it.
func TestLastChange(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	last := func(key string) (feed.Change, bool) {
		t.Helper()
		c, ok, err := f.LastChange(ctx, feed.KeyQuery{Schema: items, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return c, ok
	}
	if _, ok := last("a"); ok {
		t.Fatal("a key never written has a last change")
	}
	mustApply(t, f, upsert("a", "x"), upsert("b", "x"))
	mustApply(t, f, upsert("a", "y")) // a move: a delete in x, then an upsert in y
	if c, ok := last("a"); !ok || c.Op != feed.OpUpsert || !slices.Equal(c.Scope, []string{"y"}) || c.Pos != 4 {
		t.Fatalf("after the move: %v %+v", ok, c)
	}
	if c, ok := last("b"); !ok || c.Pos != 2 {
		t.Fatalf("b: %v %+v", ok, c)
	}
	mustApply(t, f, feed.Mutation{Schema: items, Op: feed.OpDelete, Key: "a"})
	if c, ok := last("a"); !ok || c.Op != feed.OpDelete || c.Pos != 5 {
		t.Fatalf("after the delete: %v %+v", ok, c)
	}
	f.Prune(5)
	if _, ok := last("a"); ok {
		t.Fatal("a pruned change is still found")
	}
	if _, _, err := f.LastChange(ctx, feed.KeyQuery{Key: "a"}); err == nil {
		t.Fatal("a query without a schema is not an error")
	}
}
