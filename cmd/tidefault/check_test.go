package main

import (
	"encoding/json"
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

// fileWith builds a store file with one synced record per tenant.
func fileWith(t *testing.T, recs map[string][]item, queued ...string) storeFile {
	t.Helper()
	var f storeFile
	for tenant, rows := range recs {
		cond, _ := json.Marshal(tenant)
		r := storeRecord{Digest: "d-" + tenant, Resource: "items", Conditions: map[string]json.RawMessage{"tenant": cond}, Cursor: "1.e.1", Copy: true, Rows: map[string]json.RawMessage{}}
		for _, it := range rows {
			b, err := json.Marshal(it)
			if err != nil {
				t.Fatal(err)
			}
			r.Rows[it.ID] = b
		}
		f.Records = append(f.Records, r)
	}
	for _, k := range queued {
		f.Queue.Mutations = append(f.Queue.Mutations, storeMutation{k})
	}
	return f
}

// TestCompare: each kind of divergence between a client's store file and
// the database is counted as what it is, and a faithful copy counts
// nothing.
func TestCompare(t *testing.T) {
	pub := item{ID: "s-1", Tenant: "t0", Vis: visAll, N: 2, Writer: "sql"}
	mine := item{ID: "s-2", Tenant: "t0", Vis: "u0", N: 1, Writer: "sql"}
	theirs := item{ID: "s-3", Tenant: "t0", Vis: "u9", N: 1, Writer: "sql"}
	other := item{ID: "s-4", Tenant: "t1", Vis: visAll, N: 1, Writer: "sql"}
	mut := item{ID: "m-u0-1", Tenant: "t0", Vis: visAll, N: 1, Writer: "mut"}
	counter := item{ID: "c-t0", Tenant: "t0", Vis: visAll, N: 1, Writer: "counter"}
	db := func(items ...item) dbState {
		d := dbState{Items: map[string]item{}, Applied: map[string]int{"u0-1": 1}, Counters: map[string]int64{"t0": 1}, KeysByTenant: map[string]int{"t0": 1}}
		for _, it := range items {
			d.Items[it.ID] = it
		}
		return d
	}
	base := db(pub, mine, theirs, other, mut, counter)
	faithful := map[string][]item{"t0": {pub, mine, mut, counter}, "t1": {}}
	view := func(f storeFile) clientView {
		return clientView{User: "u0", Allowed: []string{"t0", "t2"}, Scopes: []string{"t0", "t1"}, Issued: []string{"u0-1"}, File: f}
	}
	stale := pub
	stale.N = 1
	moved := other
	moved.Tenant = "t0"
	twice := base
	twice.Applied = map[string]int{"u0-1": 2}
	counterAhead := base
	counterAhead.Counters = map[string]int64{"t0": 2}
	for _, tc := range []struct {
		name string
		db   dbState
		file map[string][]item
		want counts
	}{
		{"faithful", base, faithful, counts{}},
		{"missing row", base, map[string][]item{"t0": {mine, mut, counter}, "t1": {}}, counts{Lost: 1, Unconverged: 1}},
		{"stale row", base, map[string][]item{"t0": {stale, mine, mut, counter}, "t1": {}}, counts{Lost: 1, Unconverged: 1}},
		{"another user's row", base, map[string][]item{"t0": {pub, mine, theirs, mut, counter}, "t1": {}}, counts{Leaked: 1, Unconverged: 1}},
		{"a row moved away, kept", db(pub, mine, theirs, other, mut, counter), map[string][]item{"t0": {pub, mine, moved, mut, counter}, "t1": {}}, counts{Leaked: 1, Unconverged: 1}},
		{"a refused scope's rows", base, map[string][]item{"t0": {pub, mine, mut, counter}, "t1": {other}}, counts{Leaked: 1, Unconverged: 1}},
		{"a deleted row kept", db(mine, theirs, other, mut, counter), faithful, counts{Ghost: 1, Unconverged: 1}},
		{"applied twice", twice, faithful, counts{Twice: 1}},
		{"counter ahead", counterAhead, faithful, counts{Twice: 1}},
		{"mutation lost", func() dbState {
			d := db(pub, mine, theirs, other, mut, counter)
			d.Applied = map[string]int{}
			d.KeysByTenant = map[string]int{"t0": 1}
			return d
		}(), faithful, counts{Lost: 1, Unconverged: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := compare(tc.db, []clientView{view(fileWith(t, tc.file))}, func(string) {})
			got.Clients, got.Rows, got.Mutations = 0, 0, 0
			if got != tc.want {
				t.Errorf("counts %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("queued and rejected", func(t *testing.T) {
		d := base
		d.Applied = map[string]int{"u0-1": 1}
		v := view(fileWith(t, faithful, "u0-2"))
		v.Issued = []string{"u0-1", "u0-2", "u0-3"}
		v.Rejected = map[string]string{"u0-3": "forbidden"}
		got := compare(d, []clientView{v}, func(string) {})
		if got.Pending != 1 || got.Rejected != 1 || got.Lost != 0 || got.Unconverged != 1 {
			t.Errorf("counts %+v", got)
		}
	})
}

// TestCursorMonitor: cursors that go back are counted, resets start the
// scope over, and each scope of each client is followed on its own.
func TestCursorMonitor(t *testing.T) {
	c := func(pos uint64) string { return protocol.Cursor{Epoch: "e1", Pos: pos}.String() }
	snap := func(pos, seq uint64) string {
		return protocol.Cursor{Epoch: "e1", Pos: pos, Snapshot: true, Seq: seq, Sealed: "opaque"}.String()
	}
	for _, tc := range []struct {
		name  string
		saves []string
		want  int
	}{
		{"forward", []string{snap(5, 1), snap(5, 2), c(5), c(7), c(7), c(9)}, 0},
		{"earlier position", []string{c(5), c(4)}, 1},
		{"snapshot after change at the same position", []string{c(5), snap(5, 1)}, 1},
		{"reset, then a fresh snapshot", []string{c(9), "", snap(3, 1), c(3)}, 0},
		{"another epoch", []string{c(5), protocol.Cursor{Epoch: "e2", Pos: 9}.String()}, 1},
		{"malformed", []string{c(5), "nonsense"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newCursorMonitor()
			for _, s := range tc.saves {
				m.saw("u0", "digest-a", s)
				m.saw("u1", "digest-a", c(1)) // another client's scope never interferes
			}
			if got, _, _, _ := m.result(); got != tc.want {
				t.Errorf("regressed %d, want %d", got, tc.want)
			}
		})
	}
}
