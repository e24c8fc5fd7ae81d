package feedtest

import (
	"encoding/json"
	"strconv"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Items is the suite's main resource, "items" in table "feedtest_items":
//
//	id     text   primary key
//	tenant text   scope column 0
//	grp    bigint scope column 1
//	title  text
//	n      bigint
//	done   boolean
//	note   text   NULL allowed
//
// A harness for a database-backed feed creates the table from it. It must not
// be modified.
var Items = &feed.Schema{
	Name:  "items",
	Table: "feedtest_items",
	Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindString},
		{Name: "tenant", Kind: protocol.KindString},
		{Name: "grp", Kind: protocol.KindInt},
		{Name: "title", Kind: protocol.KindString},
		{Name: "n", Kind: protocol.KindInt},
		{Name: "done", Kind: protocol.KindBool},
		{Name: "note", Kind: protocol.KindString, Nullable: true},
	},
	Keys:  []int{0},
	Scope: []int{1, 2},
}

// Notes is the suite's second resource, "notes" in table "feedtest_notes",
// with an integer primary key and one scope column:
//
//	id     bigint primary key
//	tenant text   scope column 0
//	body   text
//
// It shares scope values with Items, so the suite can check that a scope never
// picks up another resource's changes. It must not be modified.
var Notes = &feed.Schema{
	Name:  "notes",
	Table: "feedtest_notes",
	Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindInt},
		{Name: "tenant", Kind: protocol.KindString},
		{Name: "body", Kind: protocol.KindString},
	},
	Keys:  []int{0},
	Scope: []int{1},
}

// Schemas returns every resource of the suite, for a harness that creates
// tables up front.
func Schemas() []*feed.Schema { return []*feed.Schema{Items, Notes} }

// item is one row of Items.
type item struct {
	ID     string  `json:"id"`
	Tenant string  `json:"tenant"`
	Grp    int64   `json:"grp"`
	Title  string  `json:"title"`
	N      int64   `json:"n"`
	Done   bool    `json:"done"`
	Note   *string `json:"note"`
}

func (it item) scope() []string {
	return []string{it.Tenant, strconv.FormatInt(it.Grp, 10)}
}

func (it item) row() json.RawMessage {
	b, err := json.Marshal(it)
	if err != nil {
		panic(err) // cannot happen for this type
	}
	return b
}

func (it item) upsert() feed.Mutation {
	return feed.Mutation{Schema: Items, Op: feed.OpUpsert, Key: it.ID, Scope: it.scope(), Row: it.row()}
}

// change is the change an upsert of it produces (without Pos and Origin).
func (it item) change(op feed.Op) feed.Change {
	return feed.Change{Resource: Items.Name, Op: op, Key: it.ID, Scope: it.scope(), Row: it.row()}
}

func delItem(id string) feed.Mutation {
	return feed.Mutation{Schema: Items, Op: feed.OpDelete, Key: id}
}

// note is one row of Notes.
type note struct {
	ID     int64  `json:"id"`
	Tenant string `json:"tenant"`
	Body   string `json:"body"`
}

func (n note) key() string { return strconv.FormatInt(n.ID, 10) }

func (n note) row() json.RawMessage {
	b, err := json.Marshal(n)
	if err != nil {
		panic(err)
	}
	return b
}

func (n note) upsert() feed.Mutation {
	return feed.Mutation{Schema: Notes, Op: feed.OpUpsert, Key: n.key(), Scope: []string{n.Tenant}, Row: n.row()}
}

func (n note) change(op feed.Op) feed.Change {
	return feed.Change{Resource: Notes.Name, Op: op, Key: n.key(), Scope: []string{n.Tenant}, Row: n.row()}
}

func delNote(id int64) feed.Mutation {
	return feed.Mutation{Schema: Notes, Op: feed.OpDelete, Key: strconv.FormatInt(id, 10)}
}

func strp(s string) *string { return &s }

// Scopes used by the suite.

func itemScope(conds ...feed.Cond) feed.Scope { return feed.NewScope(Items, conds) }

func tenantIs(vals ...string) feed.Cond { return feed.Cond{Col: 0, Values: vals} }

func grpIs(vals ...int64) feed.Cond {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = strconv.FormatInt(v, 10)
	}
	return feed.Cond{Col: 1, Values: s}
}
