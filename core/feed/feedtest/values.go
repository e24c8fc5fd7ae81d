package feedtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Values is the suite's resource of value kinds, "values" in table
// "feedtest_values": a column of every kind beyond the plain scalars, each
// nullable. ValuesSQL creates its table in Postgres.
//
// It must not be modified.
var Values = &feed.Schema{
	Name:  "values",
	Table: "feedtest_values",
	Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindString},
		{Name: "tenant", Kind: protocol.KindString},
		{Name: "amount", Kind: protocol.KindDecimal, Nullable: true},
		{Name: "price", Kind: protocol.KindDecimal, Nullable: true},
		{Name: "tags", Kind: protocol.KindArray | protocol.KindString},
		{Name: "counts", Kind: protocol.KindArray | protocol.KindInt},
		{Name: "ratios", Kind: protocol.KindArray | protocol.KindFloat},
		{Name: "flags", Kind: protocol.KindArray | protocol.KindBool},
		{Name: "times", Kind: protocol.KindArray | protocol.KindTime},
		{Name: "amounts", Kind: protocol.KindArray | protocol.KindDecimal},
		{Name: "mood", Kind: protocol.KindString, Nullable: true},
		{Name: "moods", Kind: protocol.KindArray | protocol.KindString},
		{Name: "uid", Kind: protocol.KindString, Nullable: true},
		{Name: "addr", Kind: protocol.KindString, Nullable: true},
		{Name: "net", Kind: protocol.KindText, Nullable: true},
		{Name: "span", Kind: protocol.KindString, Nullable: true},
		{Name: "at", Kind: protocol.KindTime, Nullable: true},
		{Name: "label", Kind: protocol.KindString, Nullable: true},
	},
	Keys:  []int{0},
	Scope: []int{1},
}

// ValuesSQL are the Postgres statements that create Values's types and
// table in the current schema, for a harness of a Postgres-backed feed.
var ValuesSQL = []string{
	`CREATE TYPE feedtest_mood AS ENUM ('happy', 'sad "quoted"', 'a,b {c}')`,
	`CREATE DOMAIN feedtest_label AS varchar(40)`,
	`CREATE DOMAIN feedtest_money AS numeric(12,2)`,
	`CREATE TABLE feedtest_values (id text PRIMARY KEY, tenant text NOT NULL, amount numeric, price feedtest_money,
  tags text[], counts bigint[], ratios double precision[], flags boolean[], times timestamptz[], amounts numeric[],
  mood feedtest_mood, moods feedtest_mood[], uid uuid, addr inet, net cidr, span interval, at timestamptz,
  label feedtest_label)`,
}

// valueRows are rows of Values in their wire form, each value as
// docs/protocol.md says a feed renders it: what the suite writes is what it
// must read back, byte for byte once keys are ordered.
var valueRows = []string{
	`{"id":"v1","tenant":"t1","amount":"90071992547409931.30","price":"12.30",` +
		`"tags":["a","",null,"q\"uote","é,{}","NULL"],"counts":[9223372036854775807,-9223372036854775808,null,0],` +
		`"ratios":[0.1,-2.5,1234.5678],"flags":[true,false,null],` +
		`"times":["2026-12-02T14:30:00.123456Z",null,"1999-12-31T23:59:59.000001Z"],` +
		`"amounts":["0.1","-0.000001","NaN","Infinity","-Infinity",null,"100"],` +
		`"mood":"sad \"quoted\"","moods":["happy","a,b {c}"],"uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",` +
		`"addr":"192.168.0.1","net":"10.0.0.0/8","span":"1 year 2 mons 3 days 04:05:06.789","at":"2026-12-02T14:30:00.000001Z",` +
		`"label":"hé"}`,
	`{"id":"v2","tenant":"t1","amount":null,"price":null,"tags":null,"counts":null,"ratios":null,"flags":null,` +
		`"times":null,"amounts":null,"mood":null,"moods":null,"uid":null,"addr":null,"net":null,"span":null,"at":null,"label":null}`,
	`{"id":"v3","tenant":"t2","amount":"0","price":"0.00","tags":[],"counts":[],"ratios":[],"flags":[],` +
		`"times":[],"amounts":[],"mood":"happy","moods":[],"uid":"00000000-0000-0000-0000-000000000000",` +
		`"addr":"2001:db8::1/64","net":"2001:db8::/32","span":"-00:00:00.000001","at":"0001-01-01T00:00:00.000000Z","label":""}`,
}

// ValueChanges returns upserts of rows of Values, one of every kind's
// edge values (extremes, NULL elements, empty arrays, NULL columns), in
// their wire form, without positions: for a transport to carry.
func ValueChanges() []feed.Change {
	out := make([]feed.Change, len(valueRows))
	for i, r := range valueRows {
		out[i] = valueChange(r, feed.OpUpsert)
	}
	return out
}

func valueChange(row string, op feed.Op) feed.Change {
	var head struct{ ID, Tenant string }
	if err := json.Unmarshal([]byte(row), &head); err != nil {
		panic(err) // the rows above are valid
	}
	return feed.Change{Resource: Values.Name, Op: op, Key: head.ID, Scope: []string{head.Tenant}, Row: json.RawMessage(row)}
}

func valueMutation(row string) feed.Mutation {
	c := valueChange(row, feed.OpUpsert)
	return feed.Mutation{Schema: Values, Op: feed.OpUpsert, Key: c.Key, Scope: c.Scope, Row: c.Row}
}

// SameRow reports whether two JSON rows hold the same values exactly:
// numbers compared as their text (so 12.30 is not 12.3, and integers beyond
// 2^53 are not rounded), strings byte for byte; key order and whitespace
// aside.
func SameRow(a, b json.RawMessage) bool {
	x, err1 := exactJSON(a)
	y, err2 := exactJSON(b)
	return err1 == nil && err2 == nil && reflect.DeepEqual(x, y)
}

func exactJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

// testValueKinds: rows of every value kind written through the feed's
// writer come back from its change log (Tail and Replay) and its snapshot
// exactly as written: decimals keep their digits and scale, arrays their
// NULL elements and emptiness, times their microseconds, uuid, inet, cidr,
// interval, enum and domain values their Postgres text.
func (s *suite) testValueKinds(t *testing.T) {
	if !s.serial {
		t.Parallel()
	}
	e := s.setupWith(t, Values)
	var muts []feed.Mutation
	var want []feed.Change
	for _, r := range valueRows {
		muts = append(muts, valueMutation(r))
		want = append(want, valueChange(r, feed.OpUpsert))
	}
	h0 := e.head()
	e.apply("dev-1", muts...)
	h1 := e.head()
	checkExact(t, "Tail", e.tail(h0, h1), want)
	checkExact(t, "Replay(values)", e.replay(feed.NewScope(Values, nil), h0, h1, 100, nil), want)
	checkExact(t, "Replay(values?tenant=t2)", e.replay(feed.NewScope(Values, []feed.Cond{{Col: 0, Values: []string{"t2"}}}), h0, h1, 100, nil), want[2:])
	for _, limit := range []int{1, 100} {
		rows, _, _ := e.snapshot(feed.NewScope(Values, nil), limit, nil)
		if len(rows) != len(want) {
			t.Fatalf("Snapshot by %d: %d rows, want %d", limit, len(rows), len(want))
		}
		for _, w := range want {
			got, ok := rows[RowID{Values.Name, w.Key}]
			if !ok || !SameRow(got.Row, w.Row) {
				t.Fatalf("Snapshot by %d: row %s is\n%s\nwant\n%s", limit, w.Key, got.Row, w.Row)
			}
		}
	}

	// An update of one value, then a delete, whose tombstone carries the
	// row as it was.
	upd := strings.Replace(valueRows[0], `"amount":"90071992547409931.30"`, `"amount":"90071992547409931.31"`, 1)
	e.apply("", valueMutation(upd))
	h2 := e.head()
	checkExact(t, "Tail after an update", e.tail(h1, h2), []feed.Change{valueChange(upd, feed.OpUpsert)})
	e.apply("", feed.Mutation{Schema: Values, Op: feed.OpDelete, Key: "v1"})
	h3 := e.head()
	checkExact(t, "Tail after a delete", e.tail(h2, h3), []feed.Change{valueChange(upd, feed.OpDelete)})
}

// checkExact is checkChanges with rows compared by SameRow, origins aside.
func checkExact(t *testing.T, what string, got, want []feed.Change) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d changes, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Resource != w.Resource || g.Op != w.Op || g.Key != w.Key || strings.Join(g.Scope, "\x00") != strings.Join(w.Scope, "\x00") {
			t.Fatalf("%s: change %d is %s, want %s", what, i, fmtChange(g), fmtChange(w))
		}
		if !SameRow(g.Row, w.Row) {
			t.Fatalf("%s: change %d (%s) row\n%s\nwant\n%s", what, i, g.Key, g.Row, w.Row)
		}
	}
}
