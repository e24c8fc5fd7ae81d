package feedtest

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Members is the suite's resource with a composite primary key, "members"
// in table "feedtest_members":
//
//	user_id  text    primary key part 1
//	board_id bigint  primary key part 2, scope column 0
//	role     text
//
// Its keys are protocol.EncodeKey(user_id, board_id): ["u1","7"]. A
// harness for a database-backed feed creates the table from it when the
// suite asks for it (Harness.New). It must not be modified.
var Members = &feed.Schema{
	Name:  "members",
	Table: "feedtest_members",
	Columns: []protocol.Column{
		{Name: "user_id", Kind: protocol.KindString},
		{Name: "board_id", Kind: protocol.KindInt},
		{Name: "role", Kind: protocol.KindString},
	},
	Keys:  []int{0, 1},
	Scope: []int{1},
}

// member is one row of Members.
type member struct {
	UserID  string `json:"user_id"`
	BoardID int64  `json:"board_id"`
	Role    string `json:"role"`
}

func (m member) key() string {
	return protocol.EncodeKey(m.UserID, strconv.FormatInt(m.BoardID, 10))
}

func (m member) scope() []string { return []string{strconv.FormatInt(m.BoardID, 10)} }

func (m member) row() json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func (m member) upsert() feed.Mutation {
	return feed.Mutation{Schema: Members, Op: feed.OpUpsert, Key: m.key(), Scope: m.scope(), Row: m.row()}
}

func (m member) del() feed.Mutation {
	return feed.Mutation{Schema: Members, Op: feed.OpDelete, Key: m.key()}
}

func (m member) change(op feed.Op) feed.Change {
	return feed.Change{Resource: Members.Name, Op: op, Key: m.key(), Scope: m.scope(), Row: m.row()}
}

func boardIs(vals ...int64) feed.Cond {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = strconv.FormatInt(v, 10)
	}
	return feed.Cond{Col: 0, Values: s}
}

// collidingMembers are rows whose keys would collide under a naive
// separator-joined encoding ("a:b"+":"+"1" and "a"+":"+"b:1"), or hold the
// characters the key text escapes, unicode, or nothing at all.
func collidingMembers() []member {
	return []member{
		{UserID: "a:b", BoardID: 1, Role: "r1"},
		{UserID: "a", BoardID: 1, Role: "r2"},
		{UserID: "a,1", BoardID: 1, Role: "r3"},
		{UserID: `a","1`, BoardID: 1, Role: "r4"},
		{UserID: `["a",1]`, BoardID: 1, Role: "r5"},
		{UserID: "", BoardID: 1, Role: "r6"},
		{UserID: "", BoardID: 2, Role: "r7"},
		{UserID: `\`, BoardID: 2, Role: "r8"},
		{UserID: `"`, BoardID: 2, Role: "r9"},
		{UserID: "ü😀/<>&\u2028", BoardID: 2, Role: "r10"},
		{UserID: "\x01\n\t\x1f\x7f", BoardID: -3, Role: "r11"},
		{UserID: "a", BoardID: 9223372036854775807, Role: "r12"},
	}
}

// testCompositeKeys: a resource keyed by several columns captures,
// replays, snapshots (paged by its key) and deletes rows by the canonical
// text of their keys, and keys that a separator would confuse stay apart.
func (s *suite) testCompositeKeys(t *testing.T) {
	if !s.serial {
		t.Parallel()
	}
	e := s.setupWith(t, Members)
	ms := collidingMembers()
	seen := map[string]bool{}
	var ups []feed.Mutation
	for _, m := range ms {
		if seen[m.key()] {
			t.Fatalf("two members share the key text %q", m.key())
		}
		seen[m.key()] = true
		ups = append(ups, m.upsert())
	}
	e.apply("dev-1", ups...)
	h1 := e.head()
	all := feed.NewScope(Members, nil)
	var want []feed.Change
	for _, m := range ms {
		want = append(want, m.change(feed.OpUpsert))
	}
	got := e.replay(all, 0, h1, 100, nil)
	for i := range got {
		got[i].Origin = ""
	}
	checkChanges(t, "Replay(members) after the inserts", got, want)

	// Snapshots page by the key, totally: every page size sees each row once.
	for _, limit := range []int{1, 2, 3, 5, 100} {
		rows, _, _ := e.snapshot(all, limit, nil)
		if d := Diff(Fold(nil, want), rows); d != "" {
			t.Fatalf("Snapshot(members, limit %d): %s", limit, d)
		}
		rows, _, _ = e.snapshot(feed.NewScope(Members, []feed.Cond{boardIs(1)}), limit, nil)
		var one []feed.Change
		for _, m := range ms {
			if m.BoardID == 1 {
				one = append(one, m.change(feed.OpUpsert))
			}
		}
		if d := Diff(Fold(nil, one), rows); d != "" {
			t.Fatalf("Snapshot(members of board 1, limit %d): %s", limit, d)
		}
	}

	// An update of a non-key column is an upsert of the same key.
	up := ms[0]
	up.Role = "owner"
	e.apply("dev-2", up.upsert())
	h2 := e.head()
	checkChanges(t, "update", e.replay(all, h1, h2, 100, nil), withOrigin("dev-2", up.change(feed.OpUpsert)))

	// A delete by composite key removes that row only, and carries its
	// scope and its last row.
	e.apply("dev-3", up.del(), member{UserID: "a", BoardID: 2}.del())
	h3 := e.head()
	checkChanges(t, "delete", e.replay(all, h2, h3, 100, nil), withOrigin("dev-3", up.change(feed.OpDelete)))
	rows, _, _ := e.snapshot(all, 4, nil)
	final := Fold(Fold(nil, want), []feed.Change{up.change(feed.OpDelete)})
	if d := Diff(final, rows); d != "" {
		t.Fatalf("Snapshot after the delete: %s", d)
	}

	// A key that is not a composite key's canonical text is refused, and
	// nothing is written.
	for _, bad := range []string{"a:b", `["a:b", "1"]`, `["a:b"]`, `["a:b","1","x"]`, `["\u0061","1"]`, ""} {
		for _, m := range []feed.Mutation{
			{Schema: Members, Op: feed.OpDelete, Key: bad},
			{Schema: Members, Op: feed.OpUpsert, Key: bad, Scope: []string{"1"}, Row: ms[1].row()},
		} {
			err := e.w.Apply(e.ctx, "", m)
			if !errors.Is(err, feed.ErrInvalidMutation) {
				t.Fatalf("Apply(%v of key %q) = %v, want ErrInvalidMutation", m.Op, bad, err)
			}
		}
	}
	if h := e.head(); h != h3 {
		t.Fatalf("refused mutations moved the head from %d to %d", h3, h)
	}
}
