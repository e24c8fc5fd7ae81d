package pgfeed_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/feedtest"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
)

// mixedCols are the columns of TestSnapshotRowsMatchChanges: every column
// type a snapshot renders itself, and some it reads as the capture's own
// expression, nullable and not, with names of several lengths (jsonb
// orders keys by length first).
var mixedCols = []struct {
	name, typ string
	kind      protocol.Kind
	gen       func(r *rand.Rand) string // a value as Postgres text input
}{
	{"id", "text PRIMARY KEY", protocol.KindString, nil},
	{"t", "text", protocol.KindString, randText},
	{"vc", "varchar(40)", protocol.KindString, func(r *rand.Rand) string { return truncRunes(randText(r), 40) }},
	{"i2", "smallint", protocol.KindInt, func(r *rand.Rand) string { return strconv.Itoa(r.IntN(65536) - 32768) }},
	{"i4", "integer", protocol.KindInt, func(r *rand.Rand) string { return strconv.FormatInt(int64(int32(r.Uint32())), 10) }},
	{"big", "bigint", protocol.KindInt, randInt64},
	{"ok", "boolean", protocol.KindBool, func(r *rand.Rand) string { return strconv.FormatBool(r.IntN(2) == 0) }},
	{"f4", "real", protocol.KindFloat, randFloat},
	{"f8", "double precision", protocol.KindFloat, randFloat},
	{"num", "numeric", protocol.KindFloat, func(r *rand.Rand) string {
		return strconv.FormatInt(r.Int64N(1e12)-5e11, 10) + "." + strconv.Itoa(r.IntN(1000))
	}},
	{"at", "timestamptz", protocol.KindTime, randTime},
	{"naive", "timestamp", protocol.KindTime, randTime},
	{"day", "date", protocol.KindTime, func(r *rand.Rand) string { return strings.Fields(randTime(r))[0] }},
	{"blob", "bytea", protocol.KindBytes, func(r *rand.Rand) string {
		b := make([]byte, r.IntN(120))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return `\x` + hex.EncodeToString(b)
	}},
	{"doc", "jsonb", protocol.KindJSON, randJSON},
	{"rawdoc", "json", protocol.KindJSON, randJSON},
	{"uid", "uuid", protocol.KindString, func(r *rand.Rand) string {
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return hex.EncodeToString(b[:])
	}},
	{"tags", "text[]", protocol.KindJSON, func(r *rand.Rand) string {
		tags := make([]string, r.IntN(4))
		for i := range tags {
			tags[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(randText(r)) + `"`
		}
		return "{" + strings.Join(tags, ",") + "}"
	}},
	{"code", "char(6)", protocol.KindString, func(r *rand.Rand) string { return truncRunes(randText(r), 6) }},
	{"mood", "mixed_mood", protocol.KindString, func(r *rand.Rand) string { return []string{"happy", "sad \"quoted\""}[r.IntN(2)] }},
	{"u64", "numeric(20,0)", protocol.KindUint, func(r *rand.Rand) string { return strconv.FormatUint(r.Uint64(), 10) }},
	{"a_much_longer_column_name", "bigint", protocol.KindInt, randInt64},
}

func truncRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}

// randText is text of every kind of character a JSON string must escape or
// carry: quotes, backslashes, control characters, non-ASCII, separators.
func randText(r *rand.Rand) string {
	pieces := []string{"a", "Z", " ", ", ", ": ", `"`, `\`, "\n", "\t", "\r", "\b", "\f", "\x01", "\x1f", "\x7f", "é", "€", "😀", "\u2028", "/", "<", "{", "}", "[", "0"}
	var b strings.Builder
	for range r.IntN(12) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randInt64(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return strconv.FormatInt(math.MaxInt64, 10)
	case 1:
		return strconv.FormatInt(math.MinInt64, 10)
	}
	return strconv.FormatInt(r.Int64()-r.Int64(), 10)
}

func randFloat(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return "NaN"
	case 1:
		return "Infinity"
	case 2:
		return "-0"
	case 3:
		return strconv.FormatFloat(r.NormFloat64()*1e-9, 'g', -1, 64)
	case 4:
		return strconv.FormatFloat(r.NormFloat64()*1e20, 'g', -1, 64)
	}
	return strconv.FormatFloat(r.NormFloat64()*1000, 'g', -1, 64)
}

func randTime(r *rand.Rand) string {
	if r.IntN(15) == 0 {
		return "infinity"
	}
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d+%02d", 1900+r.IntN(200), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e6), r.IntN(12))
}

func randJSON(r *rand.Rand) string {
	var gen func(depth int) any
	gen = func(depth int) any {
		switch k := r.IntN(7); {
		case k == 0 || depth > 2:
			return randText(r)
		case k == 1:
			return r.NormFloat64() * 1e6
		case k == 2:
			return r.IntN(2) == 0
		case k == 3:
			return nil
		case k == 4:
			a := make([]any, r.IntN(4))
			for i := range a {
				a[i] = gen(depth + 1)
			}
			return a
		default:
			m := map[string]any{}
			for range r.IntN(4) {
				m[randText(r)] = gen(depth + 1)
			}
			return m
		}
	}
	b, err := json.Marshal(gen(0))
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestSnapshotRowsMatchChanges: for random rows of every column type, a
// snapshot (page by page, and streamed) renders each row byte for byte as
// the change log's newest change of it does, and that is the compact form
// of what Postgres's jsonb renders (encoding/json.Compact of the text).
func TestSnapshotRowsMatchChanges(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(seedOf(t), 1))
	pool, name := testenv.PostgresSchema(t)
	ctx := testCtx(t)
	schema := &feed.Schema{Name: "mixed", Table: "mixed", Keys: []int{0}}
	var defs []string
	for _, c := range mixedCols {
		schema.Columns = append(schema.Columns, protocol.Column{Name: c.name, Kind: c.kind, Nullable: c.gen != nil})
		defs = append(defs, c.name+" "+c.typ)
	}
	exec2(t, pool, `CREATE TYPE mixed_mood AS ENUM ('happy', 'sad "quoted"')`)
	exec2(t, pool, "CREATE TABLE mixed ("+strings.Join(defs, ", ")+")")
	f := migrated(t, pool, name, pgfeed.Options{}, schema)

	const rows = 300
	for i := range rows {
		args := []any{fmt.Sprintf("r%03d", i)}
		ps := []string{"$1"}
		for _, c := range mixedCols[1:] {
			var v any // NULL
			if rng.IntN(6) > 0 {
				v = c.gen(rng)
			}
			args = append(args, v)
			ps = append(ps, "$"+strconv.Itoa(len(args))+"::text::"+c.typ)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO mixed VALUES ("+strings.Join(ps, ", ")+")", args...); err != nil {
			t.Fatalf("insert %v: %v", args, err)
		}
		if i%3 == 0 { // and some rows changed again, so the newest change is not the first
			if _, err := pool.Exec(ctx, "UPDATE mixed SET t = $2 WHERE id = $1", args[0], randText(rng)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sc := feed.NewScope(schema, nil)
	latest := map[string]feed.Change{}
	for _, c := range replayAll(t, f, sc, 0, head(t, f)) {
		latest[c.Key] = c
	}
	// The change log's rows are jsonb's text, compacted.
	raw, err := pool.Query(ctx, "SELECT key, data::text FROM "+f.LogSQL()+" ORDER BY pos")
	if err != nil {
		t.Fatal(err)
	}
	text := map[string]string{}
	for raw.Next() {
		var k, d string
		if err := raw.Scan(&k, &d); err != nil {
			t.Fatal(err)
		}
		text[k] = d
	}
	if raw.Err() != nil {
		t.Fatal(raw.Err())
	}
	for k, c := range latest {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(text[k])); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.Row, want.Bytes()) {
			t.Fatalf("row %s: replayed %s, jsonb compacted %s", k, c.Row, want.Bytes())
		}
	}

	check := func(what string, got feedtest.Rows) {
		t.Helper()
		if len(got) != rows {
			t.Fatalf("%s: %d rows, want %d", what, len(got), rows)
		}
		for id, r := range got {
			if c := latest[id.Key]; !bytes.Equal(r.Row, c.Row) {
				t.Fatalf("%s: row %s:\nsnapshot %s\nchange   %s", what, id.Key, r.Row, c.Row)
			}
		}
	}
	for _, limit := range []int{7, 1000} {
		got := feedtest.Rows{}
		q := feed.SnapshotQuery{Scope: sc, Limit: limit}
		for {
			pg, err := f.Snapshot(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			checkSpans(t, schema, pg)
			for _, r := range pg.Rows {
				got[feedtest.RowID{Resource: r.Resource, Key: r.Key}] = r
			}
			if len(pg.Rows) < limit {
				break
			}
			q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
		}
		check(fmt.Sprintf("Snapshot by %d", limit), got)
		// Every other page is released once read, the others kept as they
		// came: a kept page must not change, and a released one's arrays
		// hold later pages.
		got = feedtest.Rows{}
		q = feed.SnapshotQuery{Scope: sc, Limit: limit}
		type keptPage struct {
			pg   feed.SnapshotPage
			rows []feed.Change // a copy of its rows when it came
		}
		var kept []keptPage
		released := map[*feed.Change]bool{}
		reused, n := 0, 0
		for pages := 0; ; pages++ {
			if pages > rows {
				t.Fatal("SnapshotPages does not end")
			}
			last := false
			err := f.SnapshotPages(ctx, q, func(pg feed.SnapshotPage) error {
				checkSpans(t, schema, pg)
				for _, r := range pg.Rows {
					got[feedtest.RowID{Resource: r.Resource, Key: r.Key}] = r
				}
				if len(pg.Rows) > 0 {
					q.After, q.HasAfter = pg.Rows[len(pg.Rows)-1].Key, true
				}
				last = len(pg.Rows) < limit
				if cap(pg.Rows) == 0 {
					return nil
				}
				first := &pg.Rows[:1][0]
				if released[first] {
					reused++
				}
				if n++; pg.Release == nil || n%2 == 0 {
					kept = append(kept, keptPage{pg, slices.Clone(pg.Rows)})
					return nil
				}
				released[first] = true
				pg.Release()
				pg.Release() // a second call does nothing
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if last {
				break
			}
		}
		check(fmt.Sprintf("SnapshotPages by %d", limit), got)
		for _, k := range kept {
			checkSpans(t, schema, k.pg)
			for i := range k.rows {
				if c := k.pg.Rows[i]; c.Key != k.rows[i].Key || !bytes.Equal(c.Row, k.rows[i].Row) {
					t.Fatalf("SnapshotPages by %d: a page kept unreleased changed: row %d is %s, was %s", limit, i, c.Key, k.rows[i].Key)
				}
			}
		}
		if len(released) > 2 && reused == 0 {
			t.Fatalf("SnapshotPages by %d: %d pages released, none of their arrays held a later page", limit, len(released))
		}
	}
}

// checkSpans verifies a snapshot page's spans: one per column and row,
// each locating exactly the value the row's JSON holds for its column's
// key, and Verbatim only for a string whose content is its value.
func checkSpans(t *testing.T, s *feed.Schema, pg feed.SnapshotPage) {
	t.Helper()
	n := len(s.Columns)
	if len(pg.Spans) != n*len(pg.Rows) {
		t.Fatalf("%d spans for %d rows of %d columns", len(pg.Spans), len(pg.Rows), n)
	}
	for i, r := range pg.Rows {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(r.Row, &obj); err != nil {
			t.Fatal(err)
		}
		for j, col := range s.Columns {
			sp := pg.Spans[i*n+j]
			if got, want := string(r.Row[sp.Start:sp.End]), string(obj[col.Name]); got != want {
				t.Fatalf("row %s, column %s: span %+v holds %q, the row's value is %q", r.Key, col.Name, sp, got, want)
			}
			if sp.Verbatim {
				var str string
				if err := json.Unmarshal(r.Row[sp.Start:sp.End], &str); err != nil || str != string(r.Row[sp.Start+1:sp.End-1]) {
					t.Fatalf("row %s, column %s: verbatim span %+v holds %s, which decodes to %q (%v)", r.Key, col.Name, sp, r.Row[sp.Start:sp.End], str, err)
				}
			}
		}
	}
}

// seedOf returns the seed of a randomized test: feedtest.SeedEnv if set,
// else a random one, logged so a failure can be reproduced.
func seedOf(t *testing.T) uint64 {
	if v := os.Getenv(feedtest.SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", feedtest.SeedEnv, v, err)
		}
		return n
	}
	n := rand.Uint64() >> 1
	t.Logf("seed %d (set %s=%d to reproduce)", n, feedtest.SeedEnv, n)
	return n
}
