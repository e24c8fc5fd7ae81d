package memfeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

type harness struct{}

func (harness) New(t *testing.T, _ ...*feed.Schema) (feed.Feed, feed.Writer) {
	f := memfeed.New(memfeed.Options{})
	return f, f
}

func (harness) Prune(t *testing.T, f feed.Feed, through feed.Position) {
	f.(*memfeed.Feed).Prune(through)
}

func TestConformance(t *testing.T) { feedtest.Run(t, harness{}) }

var items = &feed.Schema{
	Name:    "items",
	Table:   "items",
	Columns: []protocol.Column{{Name: "id", Kind: protocol.KindString}, {Name: "tenant", Kind: protocol.KindString}},
	Keys:    []int{0},
	Scope:   []int{1},
}

func upsert(id, tenant string) feed.Mutation {
	return feed.Mutation{Schema: items, Op: feed.OpUpsert, Key: id, Scope: []string{tenant},
		Row: json.RawMessage(fmt.Sprintf(`{"id":%q,"tenant":%q}`, id, tenant))}
}

func mustApply(t testing.TB, f *memfeed.Feed, muts ...feed.Mutation) {
	t.Helper()
	if err := f.Apply(context.Background(), "", muts...); err != nil {
		t.Fatal(err)
	}
}

func keys(cs []feed.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Key
	}
	return out
}

func TestEpoch(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		e := memfeed.New(memfeed.Options{}).Epoch()
		if len(e) != 16 {
			t.Fatalf("epoch %q has %d characters, want 16", e, len(e))
		}
		for _, r := range e {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
				t.Fatalf("epoch %q has character %q", e, r)
			}
		}
		if seen[e] {
			t.Fatalf("epoch %q repeated", e)
		}
		seen[e] = true
	}
}

func TestMaxChanges(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{MaxChanges: 5})
	for i := range 8 {
		mustApply(t, f, upsert(fmt.Sprint("k", i), "t1"))
	}
	if got := f.Floor(); got != 3 {
		t.Fatalf("Floor = %d, want 3", got)
	}
	scope := feed.NewScope(items, nil)
	if _, err := f.Replay(ctx, feed.ReplayQuery{Scope: scope, After: 2, Until: 8, Limit: 10}); !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("Replay(after 2) = %v, want ErrCursorExpired", err)
	}
	if _, err := f.Tail(ctx, 2, 10); !errors.Is(err, feed.ErrCursorExpired) {
		t.Fatalf("Tail(after 2) = %v, want ErrCursorExpired", err)
	}
	cs, err := f.Replay(ctx, feed.ReplayQuery{Scope: scope, After: 3, Until: 8, Limit: 10})
	if err != nil || !slices.Equal(keys(cs), []string{"k3", "k4", "k5", "k6", "k7"}) {
		t.Fatalf("Replay(after 3) = %v, %v", keys(cs), err)
	}
	// One Apply larger than the limit keeps only the newest changes.
	mustApply(t, f, upsert("a", "t1"), upsert("b", "t1"), upsert("c", "t1"), upsert("d", "t1"), upsert("e", "t1"), upsert("f", "t1"), upsert("a", "t2"))
	if h, _ := f.Head(ctx); h != 16 || f.Floor() != 11 {
		t.Fatalf("Head %d Floor %d, want 16 and 11", h, f.Floor())
	}
	page, err := f.Snapshot(ctx, feed.SnapshotQuery{Scope: scope, Limit: 100})
	if err != nil || len(page.Rows) != 14 {
		t.Fatalf("Snapshot = %d rows, %v; want 14 (retention never drops current rows)", len(page.Rows), err)
	}
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	f.Prune(10) // nothing to prune: the floor stays at the head
	if f.Floor() != 0 {
		t.Fatalf("Floor = %d after pruning an empty feed", f.Floor())
	}
	mustApply(t, f, upsert("a", "t1"), upsert("b", "t1"))
	f.Prune(100) // clamped to the head
	if f.Floor() != 2 {
		t.Fatalf("Floor = %d, want 2", f.Floor())
	}
	f.Prune(1) // never moves back
	if f.Floor() != 2 {
		t.Fatalf("Floor moved back to %d", f.Floor())
	}

	// Pruning up to the cursor of a blocked tailer does not disturb it.
	mustApply(t, f, upsert("c", "t1"))
	done := make(chan error, 1)
	go func() {
		_, err := f.Tail(ctx, 4, 10) // waits: head is 3
		done <- err
	}()
	mustApply(t, f, upsert("d", "t1")) // head 4; the tailer may or may not wake for it
	f.Prune(4)                         // floor 4: after=4 is still fine
	mustApply(t, f, upsert("e", "t1")) // head 5: the tailer returns
	if err := <-done; err != nil {
		t.Fatalf("Tail at the floor: %v", err)
	}
	go func() {
		_, err := f.Tail(ctx, 5, 10)
		done <- err
	}()
	f.Prune(5)
	mustApply(t, f, upsert("f", "t1"))
	if err := <-done; err != nil {
		t.Fatalf("Tail at the floor: %v", err)
	}
}

func TestApplyValidation(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	mustApply(t, f, upsert("a", "t1"))
	good := upsert("b", "t1")
	bad := map[string]feed.Mutation{
		"nil schema":      {Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(`{}`)},
		"unnamed schema":  {Schema: &feed.Schema{Scope: []int{0}}, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(`{}`)},
		"bad op":          {Schema: items, Op: 3, Key: "x"},
		"no row":          {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}},
		"scope count":     {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t", "u"}, Row: json.RawMessage(`{}`)},
		"invalid JSON":    {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(`{`)},
		"not an object":   {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(` [1]`)},
		"null row":        {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(`null`)},
		"two JSON values": {Schema: items, Op: feed.OpUpsert, Key: "x", Scope: []string{"t"}, Row: json.RawMessage(`{} {}`)},
	}
	for name, m := range bad {
		err := f.Apply(ctx, "", good, m)
		if !errors.Is(err, feed.ErrInvalidMutation) {
			t.Errorf("%s: Apply = %v, want ErrInvalidMutation", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "mutation 2 of 2") {
			t.Errorf("%s: error %q does not say which mutation", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if h, _ := f.Head(ctx); h != 1 {
		t.Fatalf("invalid Applies moved Head to %d", h)
	}
	// Deletes ignore Scope and Row.
	if err := f.Apply(ctx, "", feed.Mutation{Schema: items, Op: feed.OpDelete, Key: "a", Scope: []string{"x", "y"}}); err != nil {
		t.Fatalf("delete with a stray scope: %v", err)
	}
	// A cancelled context writes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.Apply(cctx, "", good); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled context = %v", err)
	}
	if h, _ := f.Head(ctx); h != 2 {
		t.Fatalf("Head = %d, want 2", h)
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	mustApply(t, f, upsert("a", "t1"))
	if _, err := f.Tail(ctx, 0, 0); err == nil {
		t.Error("Tail with limit 0: no error")
	}
	if _, err := f.Replay(ctx, feed.ReplayQuery{Until: 1, Limit: 1}); err == nil {
		t.Error("Replay without a scope schema: no error")
	}
	if _, err := f.Snapshot(ctx, feed.SnapshotQuery{Limit: 1}); err == nil {
		t.Error("Snapshot without a scope schema: no error")
	}
}

// The feed keeps its own copies: callers may reuse buffers, and changes
// handed out do not alias the log's backing array.
func TestNoAliasing(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	m := upsert("a", "t1")
	mustApply(t, f, m, upsert("b", "t1"))
	m.Row[2], m.Scope[0] = 'X', "changed"

	cs, err := f.Tail(ctx, 0, 1)
	if err != nil || len(cs) != 1 {
		t.Fatalf("Tail = %d, %v", len(cs), err)
	}
	if string(cs[0].Row) != `{"id":"a","tenant":"t1"}` || cs[0].Scope[0] != "t1" {
		t.Fatalf("stored change follows the caller's buffers: %s %q", cs[0].Row, cs[0].Scope)
	}
	cs = append(cs, feed.Change{Key: "intruder"}) // must not write into the log
	cs[0].Key = "renamed"
	again, _ := f.Tail(ctx, 0, 10)
	if !slices.Equal(keys(again), []string{"a", "b"}) {
		t.Fatalf("log changed through a returned slice: %v", keys(again))
	}
}

func TestSnapshotOrder(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	var want []string
	for i := range 500 {
		k := fmt.Sprintf("%x", rng.Uint32())
		if i%5 == 0 {
			k = "Z" + k // bytewise: upper case sorts first
		}
		want = append(want, k)
		tenant := "t1"
		if i%3 == 0 {
			tenant = "t2"
		}
		if tenant == "t2" {
			want = want[:len(want)-1]
		}
		mustApply(t, f, upsert(k, tenant))
	}
	slices.Sort(want)
	scope := feed.NewScope(items, []feed.Cond{{Col: 0, Values: []string{"t1"}}})
	var got []string
	q := feed.SnapshotQuery{Scope: scope, Limit: 17}
	for {
		page, err := f.Snapshot(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if page.Pos != 500 {
			t.Fatalf("page Pos %d, want the head 500", page.Pos)
		}
		for _, c := range page.Rows {
			if c.Pos != page.Pos {
				t.Fatalf("row Pos %d, page Pos %d", c.Pos, page.Pos)
			}
		}
		got = append(got, keys(page.Rows)...)
		if len(page.Rows) < q.Limit {
			break
		}
		q.After, q.HasAfter = page.Rows[len(page.Rows)-1].Key, true
	}
	if !slices.Equal(got, want) {
		t.Fatalf("snapshot keys out of bytewise order or incomplete: %d keys, want %d", len(got), len(want))
	}
}

func BenchmarkApply(b *testing.B) {
	f := memfeed.New(memfeed.Options{MaxChanges: 100_000})
	muts := make([]feed.Mutation, 1000)
	for i := range muts {
		muts[i] = upsert(fmt.Sprint("k", i), fmt.Sprint("t", i%10))
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := f.Apply(ctx, "bench", muts[i%len(muts)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkReplay(b *testing.B) {
	f := memfeed.New(memfeed.Options{})
	for i := range 100_000 {
		mustApply(b, f, upsert(fmt.Sprint("k", i%5000), fmt.Sprint("t", i%10)))
	}
	scope := feed.NewScope(items, []feed.Cond{{Col: 0, Values: []string{"t3"}}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		// A page of 1000 changes of one tenant in ten, from the middle of the log.
		cs, err := f.Replay(ctx, feed.ReplayQuery{Scope: scope, After: 50_000, Until: 100_000, Limit: 1000})
		if err != nil || len(cs) != 1000 {
			b.Fatal(len(cs), err)
		}
	}
}

func BenchmarkSnapshotPage(b *testing.B) {
	f := memfeed.New(memfeed.Options{})
	for i := range 100_000 {
		mustApply(b, f, upsert(fmt.Sprint("k", i), fmt.Sprint("t", i%10)))
	}
	scope := feed.NewScope(items, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Snapshot(ctx, feed.SnapshotQuery{Scope: scope, Limit: 1000, After: "k5", HasAfter: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBroadcaster(t *testing.T) { feedtest.RunBroadcaster(t, memfeed.New(memfeed.Options{})) }

// TestTransactListedWritesHold: a transaction commits only the writes it
// listed. A row another commit moves between the listing and the commit
// would make its delete remove the row from a scope nobody checked: the
// commit fails with feed.ErrTransient instead, nothing is applied and the
// key is not recorded.
func TestTransactListedWritesHold(t *testing.T) {
	ctx := context.Background()
	f := memfeed.New(memfeed.Options{})
	if err := f.Apply(ctx, "", upsert("a", "t1")); err != nil {
		t.Fatal(err)
	}
	id := feed.MutationID{Principal: "p", Origin: "o", Key: "k", At: time.Now()}
	_, _, err := f.Transact(ctx, id, func(ctx context.Context, tx feed.Tx) ([]byte, error) {
		if err := tx.Apply(ctx, feed.Mutation{Schema: items, Op: feed.OpDelete, Key: "a"}); err != nil {
			return nil, err
		}
		w, err := tx.(feed.WriteLister).Written(ctx)
		if err != nil || len(w) != 1 || w[0].Scope[0] != "t1" {
			t.Fatalf("Written: %+v %v", w, err)
		}
		// Another writer moves the row meanwhile.
		return nil, f.Apply(ctx, "", upsert("a", "t2"))
	})
	if !errors.Is(err, feed.ErrTransient) {
		t.Fatalf("Transact: %v, want ErrTransient", err)
	}
	head, _ := f.Head(ctx)
	if head != 3 { // the first upsert, the move's delete and upsert
		t.Fatalf("head %d: the transaction's delete was applied", head)
	}
	ran := false
	if _, replayed, err := f.Transact(ctx, id, func(context.Context, feed.Tx) ([]byte, error) { ran = true; return nil, nil }); err != nil || replayed || !ran {
		t.Fatalf("the key was recorded: ran %v, replayed %v, %v", ran, replayed, err)
	}
}
