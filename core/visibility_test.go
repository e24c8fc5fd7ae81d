package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

type filtered struct {
	ID    string `tide:"id,pk"`
	Org   string `tide:"org,scope"`
	Owner string `tide:"owner"`
}

func change(t *testing.T, op feed.Op, row filtered, origin string) feed.Change {
	t.Helper()
	key, js, err := protocol.EncodeRow(row)
	if err != nil {
		t.Fatal(err)
	}
	return feed.Change{Pos: 1, Resource: "docs", Op: op, Key: key, Scope: []string{row.Org}, Row: js, Origin: origin}
}

// TestEntryForFanOutCost: without a filter, what a subscriber receives is the
// shared encoding, with no allocation; with one, the row is decoded once per
// change however many subscribers check it, and checking allocates nothing.
func TestEntryForFanOutCost(t *testing.T) {
	e := newTestEngine(t)
	plain, err := Register(e, Resource[filtered]{Name: "plain", Table: "plain", Authorize: authz.Allow})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	owned, err := Register(e, Resource[filtered]{Name: "docs", Table: "docs", Authorize: authz.Allow,
		Filter: func(p authz.Principal, r *filtered) bool { calls++; return r.Owner == p.ID }})
	if err != nil {
		t.Fatal(err)
	}
	decodes := 0
	decode := owned.res.filter.decode
	owned.res.filter.decode = func(row json.RawMessage) (any, error) { decodes++; return decode(row) }

	c := change(t, feed.OpUpsert, filtered{"d1", "o1", "u3"}, "dev-9")
	enc := encodeEntries(&c)
	p := authz.Principal{ID: "u1", Claims: map[string]any{"x": "y"}}
	if n := testing.AllocsPerRun(100, func() { plain.res.entryFor(p, c.Origin, &c, &enc) }); n != 0 {
		t.Fatalf("no filter: %v allocations per subscriber", n)
	}
	plain.res.entryFor(p, "dev-other", &c, &enc) // the entry without the origin, encoded once
	if n := testing.AllocsPerRun(100, func() { plain.res.entryFor(p, "dev-other", &c, &enc) }); n != 0 {
		t.Fatalf("no filter, another device: %v allocations per subscriber", n)
	}
	for i := 0; i < 100; i++ {
		got := owned.res.entryFor(authz.Principal{ID: fmt.Sprintf("u%d", i)}, c.Origin, &c, &enc)
		want := `{"op":"delete","key":"d1"}`
		if i == 3 {
			want = string(enc.upsert)
		}
		if string(got) != want {
			t.Fatalf("subscriber u%d got %s, want %s", i, got, want)
		}
	}
	if decodes != 1 || calls != 100 {
		t.Fatalf("%d decodes and %d filter calls for 100 subscribers", decodes, calls)
	}
	if n := testing.AllocsPerRun(100, func() { owned.res.entryFor(p, c.Origin, &c, &enc) }); n != 0 {
		t.Fatalf("with a filter: %v allocations per subscriber", n)
	}
}

// TestEntryForRules is the table of what a subscriber receives of a change
// under a row filter.
func TestEntryForRules(t *testing.T) {
	e := newTestEngine(t)
	tbl, err := Register(e, Resource[filtered]{Name: "docs", Table: "docs", Authorize: authz.Allow,
		Filter: func(p authz.Principal, r *filtered) bool {
			if r.Owner == "panic" {
				panic("filter bug")
			}
			return r.Owner == p.ID
		}})
	if err != nil {
		t.Fatal(err)
	}
	r := tbl.res
	me := authz.Principal{ID: "me"}
	mine, theirs := filtered{"d1", "o1", "me"}, filtered{"d1", "o1", "them"}
	for _, tt := range []struct {
		name     string
		c        feed.Change
		snapshot bool
		want     string
	}{
		{"visible upsert", change(t, feed.OpUpsert, mine, "dev"), false, `{"op":"upsert","key":"d1","row":{"id":"d1","org":"o1","owner":"me"},"origin":"dev"}`},
		{"hidden upsert: a delete without origin", change(t, feed.OpUpsert, theirs, "dev"), false, `{"op":"delete","key":"d1"}`},
		{"hidden snapshot row: nothing", change(t, feed.OpUpsert, theirs, ""), true, ``},
		{"visible snapshot row", change(t, feed.OpUpsert, mine, ""), true, `{"op":"upsert","key":"d1","row":{"id":"d1","org":"o1","owner":"me"}}`},
		{"delete of a visible row", change(t, feed.OpDelete, mine, "dev"), false, `{"op":"delete","key":"d1","origin":"dev"}`},
		{"delete of a hidden row: nothing", change(t, feed.OpDelete, theirs, "dev"), false, ``},
		{"delete without old row: a delete", feed.Change{Op: feed.OpDelete, Key: "d1", Origin: "dev"}, false, `{"op":"delete","key":"d1"}`},
		{"undecodable row: hidden", feed.Change{Op: feed.OpUpsert, Key: "d1", Row: json.RawMessage(`{"owner":7}`)}, false, `{"op":"delete","key":"d1"}`},
		{"filter panics: hidden", change(t, feed.OpUpsert, filtered{"d1", "o1", "panic"}, ""), false, `{"op":"delete","key":"d1"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, shared := range []bool{false, true} {
				var enc *entryBytes
				if shared {
					eb := encodeEntries(&tt.c)
					enc = &eb
				}
				if got := string(r.see(me, tt.c.Origin, &tt.c, enc, tt.snapshot)); got != tt.want {
					t.Fatalf("shared=%v: got %s, want %s", shared, got, tt.want)
				}
				// Another device of the principal gets the same entry
				// without the writer's origin.
				other := strings.Replace(tt.want, `,"origin":"`+tt.c.Origin+`"`, "", 1)
				if got := string(r.see(me, "dev-other", &tt.c, enc, tt.snapshot)); got != other {
					t.Fatalf("shared=%v, another device: got %s, want %s", shared, got, other)
				}
			}
		})
	}
}

// TestPreviousVersionColumns: a feed may record a row's previous version
// with only the columns the filter reads (Schema.PrevColumns). A hidden
// upsert then becomes a delete only for a subscriber who may have seen
// that version; a previous version lacking one of those columns, or not a
// JSON object, counts as seen by everyone (the delete goes to all it is
// hidden from), so the filter never decides on a value it was not given.
func TestPreviousVersionColumns(t *testing.T) {
	type doc struct {
		ID      string `tide:"id,pk"`
		Org     string `tide:"org,scope"`
		Owner   string `tide:"owner"`
		Private bool   `tide:"private"`
		Body    string `tide:"body"`
	}
	e := newTestEngine(t)
	filter := func(p authz.Principal, d *doc) bool { return !d.Private || d.Owner == p.ID }
	narrow, err := Register(e, Resource[doc]{Name: "narrow", Table: "narrow", Authorize: authz.Allow, Filter: filter, FilterColumns: []string{"private", "owner"}})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Register(e, Resource[doc]{Name: "whole", Table: "whole", Authorize: authz.Allow, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	if got := narrow.Schema().PrevColumns; fmt.Sprint(got) != "[2 3]" {
		t.Fatalf("narrow PrevColumns %v, want [2 3] (owner, private in declared order)", got)
	}
	if got := whole.Schema().PrevColumns; fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("whole PrevColumns %v, want every column", got)
	}
	const del = `{"op":"delete","key":"d1"}`
	// The new version is private to carol: hidden from alice.
	now := json.RawMessage(`{"id":"d1","org":"o1","owner":"carol","private":true,"body":"x"}`)
	cases := []struct {
		name string
		res  *Table[doc]
		prev json.RawMessage
		want string // what alice receives
	}{
		{"filter columns, was visible", narrow, json.RawMessage(`{"owner":"carol","private":false}`), del},
		{"filter columns, was hidden", narrow, json.RawMessage(`{"owner":"carol","private":true}`), ""},
		{"filter columns, was alice's", narrow, json.RawMessage(`{"owner":"alice","private":true}`), del},
		{"a filter column missing", narrow, json.RawMessage(`{"private":true}`), del},
		{"whole row, was hidden", whole, json.RawMessage(`{"id":"d1","org":"o1","owner":"carol","private":true,"body":"y"}`), ""},
		{"only filter columns where every column is read", whole, json.RawMessage(`{"owner":"carol","private":true}`), del},
		{"not an object", narrow, json.RawMessage(`[1]`), del},
		{"a column of the wrong type", narrow, json.RawMessage(`{"owner":"carol","private":"yes"}`), del},
		{"new in the scope", narrow, nil, ""},
	}
	for _, tc := range cases {
		c := feed.Change{Pos: 1, Resource: tc.res.Name(), Op: feed.OpUpsert, Key: "d1", Scope: []string{"o1"}, Row: now, PrevKnown: true, Prev: tc.prev}
		if got := string(tc.res.res.entryFor(authz.Principal{ID: "alice"}, "", &c, nil)); got != tc.want {
			t.Errorf("%s: alice got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestFilterColumnsRules: FilterColumns names existing columns once, and
// only with a Filter.
func TestFilterColumnsRules(t *testing.T) {
	e := newTestEngine(t)
	keep := func(authz.Principal, *filtered) bool { return true }
	for _, tc := range []struct {
		name string
		r    Resource[filtered]
		says string
	}{
		{"unknown column", Resource[filtered]{Table: "a", Filter: keep, FilterColumns: []string{"owner", "nope"}}, `"nope" is not a column`},
		{"twice", Resource[filtered]{Table: "b", Filter: keep, FilterColumns: []string{"owner", "owner"}}, `"owner" is listed twice`},
		{"without a filter", Resource[filtered]{Table: "c", FilterColumns: []string{"owner"}}, "FilterColumns without a Filter"},
	} {
		_, err := Register(e, tc.r)
		if !errors.Is(err, ErrInvalidResource) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v, want ErrInvalidResource saying %q", tc.name, err, tc.says)
		}
	}
}
