package pgfeed_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// wideKey is a resource keyed by four columns of every keyable kind.
var wideKey = &feed.Schema{
	Name:  "widekey",
	Table: "widekey",
	Columns: []protocol.Column{
		{Name: "a", Kind: protocol.KindString},
		{Name: "n", Kind: protocol.KindInt},
		{Name: "b", Kind: protocol.KindString},
		{Name: "f", Kind: protocol.KindBool},
		{Name: "s", Kind: protocol.KindString},
		{Name: "v", Kind: protocol.KindString},
	},
	Keys:  []int{0, 1, 2, 3},
	Scope: []int{4},
}

// randomPart returns a string of the characters a key text escapes or
// that a separator-based encoding would confuse, unicode, and sometimes
// nothing.
func randomPart(r *rand.Rand) string {
	alphabet := []string{"a", "b", `"`, `\`, ":", ",", "[", "]", " ", "/", "ü", "😀", "\u2028", "\x01", "\n", "\t", "\b", "\f", "\r", "\x1f", "\x7f", `\u0041`}
	var sb strings.Builder
	for range r.IntN(6) {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return sb.String()
}

// TestCompositeKeyTextIsEncodeKey: the key text the capture trigger and the
// snapshot render in SQL is byte for byte protocol.EncodeKey of the key
// columns' canonical texts, for random parts full of quotes, backslashes,
// separators, unicode and control characters; a change of a key column
// is a delete of the old key and an upsert of the new one.
func TestCompositeKeyTextIsEncodeKey(t *testing.T) {
	t.Parallel()
	f, pool := newFeed(t, pgfeed.Options{}, wideKey)
	ctx := testCtx(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	type row struct {
		a    string
		n    int64
		b    string
		f    bool
		s, v string
	}
	key := func(w row) string {
		return protocol.EncodeKey(w.a, strconv.FormatInt(w.n, 10), w.b, strconv.FormatBool(w.f))
	}
	want := map[string]row{}
	for i := range 300 {
		w := row{a: randomPart(r), n: r.Int64N(5) - 2, b: randomPart(r), f: r.IntN(2) == 0, s: "s" + strconv.Itoa(r.IntN(3)), v: strconv.Itoa(i)}
		if i%50 == 0 {
			w.n = -1 << 63
		}
		if _, dup := want[key(w)]; dup {
			continue
		}
		want[key(w)] = w
		if _, err := pool.Exec(ctx, "INSERT INTO widekey (a, n, b, f, s, v) VALUES ($1, $2, $3, $4, $5, $6)", w.a, w.n, w.b, w.f, w.s, w.v); err != nil {
			t.Fatal(err)
		}
	}
	sc := feed.NewScope(wideKey, nil)
	h1 := head(t, f)
	cs := replayAll(t, f, sc, 0, h1)
	if len(cs) != len(want) {
		t.Fatalf("%d changes for %d inserted rows", len(cs), len(want))
	}
	for _, c := range cs {
		w, ok := want[c.Key]
		if !ok {
			t.Fatalf("the capture's key %q is not EncodeKey of any inserted row's key", c.Key)
		}
		if got, _ := protocol.DecodeRow[struct {
			V string `tide:"v"`
			A string `tide:"a,pk"`
		}](c.Row); got.V != w.v {
			t.Fatalf("key %q carries row %s, want v=%s", c.Key, c.Row, w.v)
		}
	}
	for _, limit := range []int{1, 7, 1000} {
		snap := snapshotAll(t, f, sc, limit)
		keys := map[string]bool{}
		for _, c := range snap {
			if _, ok := want[c.Key]; !ok || keys[c.Key] {
				t.Fatalf("snapshot (limit %d): key %q is unknown or seen twice", limit, c.Key)
			}
			keys[c.Key] = true
		}
		if len(keys) != len(want) {
			t.Fatalf("snapshot (limit %d): %d rows, want %d", limit, len(keys), len(want))
		}
	}

	// Moves: a key part, then a scope column, then both.
	var some row
	for _, w := range want {
		some = w
		break
	}
	moved := some
	moved.b += "|moved"
	if _, err := pool.Exec(ctx, "UPDATE widekey SET b = $5 WHERE a = $1 AND n = $2 AND b = $3 AND f = $4", some.a, some.n, some.b, some.f, moved.b); err != nil {
		t.Fatal(err)
	}
	h2 := head(t, f)
	cs = replayAll(t, f, sc, h1, h2)
	if len(cs) != 2 || cs[0].Op != feed.OpDelete || cs[0].Key != key(some) || cs[1].Op != feed.OpUpsert || cs[1].Key != key(moved) {
		t.Fatalf("a key part's change gave %v, want a delete of %q and an upsert of %q", cs, key(some), key(moved))
	}
	if _, err := pool.Exec(ctx, "UPDATE widekey SET s = 'elsewhere' WHERE a = $1 AND n = $2 AND b = $3 AND f = $4", moved.a, moved.n, moved.b, moved.f); err != nil {
		t.Fatal(err)
	}
	h3 := head(t, f)
	cs = replayAll(t, f, sc, h2, h3)
	if len(cs) != 2 || cs[0].Op != feed.OpDelete || cs[0].Key != key(moved) || cs[1].Key != key(moved) || !slices.Equal(cs[1].Scope, []string{"elsewhere"}) {
		t.Fatalf("a scope change gave %v, want a delete and an upsert of %q", cs, key(moved))
	}

	// Apply deletes and upserts by the key's parts.
	moved.s, moved.v = "s0", "applied"
	up := feed.Mutation{Schema: wideKey, Op: feed.OpUpsert, Key: key(moved), Scope: []string{moved.s},
		Row: []byte(`{"a":` + strconv.Quote(moved.a) + `,"n":` + strconv.FormatInt(moved.n, 10) + `,"b":` + strconv.Quote(moved.b) + `,"f":` + strconv.FormatBool(moved.f) + `,"s":"s0","v":"applied"}`)}
	if !strings.ContainsAny(moved.a+moved.b, "\x01\x1f\x7f\b\f") { // strconv.Quote's escapes are JSON's for the rest
		if err := f.Apply(ctx, "", up); err != nil {
			t.Fatal(err)
		}
		var v string
		if err := pool.QueryRow(ctx, "SELECT v FROM widekey WHERE a = $1 AND n = $2 AND b = $3 AND f = $4", moved.a, moved.n, moved.b, moved.f).Scan(&v); err != nil || v != "applied" {
			t.Fatalf("Apply upsert: v = %q, %v", v, err)
		}
	}
	if err := f.Apply(ctx, "", feed.Mutation{Schema: wideKey, Op: feed.OpDelete, Key: key(moved)}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM widekey").Scan(&n); err != nil || n != len(want)-1 {
		t.Fatalf("after Apply's delete: %d rows, want %d (%v)", n, len(want)-1, err)
	}
}

// TestMigrateChecksCompositeKey: the columns tagged pk must be, together
// and alone, the table's primary key or a unique index, in any order.
func TestMigrateChecksCompositeKey(t *testing.T) {
	t.Parallel()
	pool, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	type Member struct {
		UserID  string `tide:"user_id,pk"`
		BoardID int64  `tide:"board_id,pk,scope"`
		Role    string `tide:"role"`
	}
	for i, c := range []struct {
		ddl  string
		want string
	}{
		{"user_id text, board_id int8, role text, PRIMARY KEY (user_id, board_id)", ""},
		{"user_id text, board_id int8, role text, PRIMARY KEY (board_id, user_id)", ""},
		{"id serial PRIMARY KEY, user_id text NOT NULL, board_id int8 NOT NULL, role text, UNIQUE (board_id, user_id)", ""},
		{"user_id text PRIMARY KEY, board_id int8, role text", "the key columns user_id, board_id (tagged pk) are neither"},
		{"user_id text, board_id int8, role text, PRIMARY KEY (user_id, board_id, role)", "the key columns user_id, board_id"},
		{"user_id text, board_id int8, role text", "the key columns user_id, board_id"},
		{"user_id text NOT NULL, board_id int8 NOT NULL, role text", "the key columns user_id, board_id"}, // partial index below
	} {
		table := "members_" + strconv.Itoa(i)
		if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" ("+c.ddl+")"); err != nil {
			t.Fatal(err)
		}
		if i == 6 {
			if _, err := pool.Exec(ctx, "CREATE UNIQUE INDEX ON "+table+" (user_id, board_id) WHERE role <> ''"); err != nil {
				t.Fatal(err)
			}
		}
		e, err := core.New(core.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := core.Register(e, core.Resource[Member]{Table: table}); err != nil {
			t.Fatal(err)
		}
		f, err := pgfeed.New(pool, pgfeed.Options{Schema: name + "_tide", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		err = f.Migrate(ctx, e.Schemas()...)
		f.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Migrate refused a fitting declaration: %v", c.ddl, err)
		case c.want == "":
		case !errors.Is(err, pgfeed.ErrMismatch) || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: Migrate = %v, want ErrMismatch saying %q", c.ddl, err, c.want)
		}
	}
}
