package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// maxColumnPolicies is how many column policies a resource may have: a
// principal's hidden columns are a bit set of one word.
const maxColumnPolicies = 64

// columnPolicies are a resource's authz.ColumnPolicy values with the row
// type erased. A principal's view of a row is the set of policed columns
// it may not see (hidden), a bit per policy: subscribers with the same set
// share one encoding of each change (entryBytes.trimmed).
type columnPolicies struct {
	dec    *rowDecoder // shared with the row filter, if any: one decode per change
	rules  []columnRule
	col    map[string]int // column name → index in Schema.Columns
	rule   []int          // index in Schema.Columns → index in rules, or -1
	panics atomic.Int64
}

// columnRule is one column's policy.
type columnRule struct {
	name    string
	visible func(p authz.Principal, row any) bool
}

// policedColumns checks a resource's column policies against its schema
// and returns the indexes in Columns of the policed columns, in declared
// order.
func policedColumns[T any](s *feed.Schema, policies map[string]authz.ColumnPolicy[T]) ([]int, error) {
	if len(policies) == 0 {
		return nil, nil
	}
	if len(policies) > maxColumnPolicies {
		return nil, fmt.Errorf("%d policies; at most %d", len(policies), maxColumnPolicies)
	}
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	slices.Sort(names) // the first wrong name is the same every time
	var out []int
	for _, n := range names {
		i := slices.IndexFunc(s.Columns, func(c protocol.Column) bool { return c.Name == n })
		switch {
		case i < 0:
			return nil, fmt.Errorf("%q is not a column", n)
		case isKeyColumn(s, i):
			return nil, fmt.Errorf("%q is the primary key, which every subscriber receives", n)
		case slices.Contains(s.Scope, i):
			return nil, fmt.Errorf("%q is a scope column, which every subscriber receives", n)
		case policies[n] == nil:
			return nil, fmt.Errorf("the policy of %q is nil", n)
		}
		out = append(out, i)
	}
	slices.Sort(out)
	return out, nil
}

// isKeyColumn reports whether column i is the primary key or a part of it.
func isKeyColumn(s *feed.Schema, i int) bool { return slices.Contains(s.Keys, i) }

func newColumnPolicies[T any](s *feed.Schema, dec *rowDecoder, policed []int, policies map[string]authz.ColumnPolicy[T]) *columnPolicies {
	cp := &columnPolicies{dec: dec, col: make(map[string]int, len(s.Columns)), rule: make([]int, len(s.Columns))}
	for i, c := range s.Columns {
		cp.col[c.Name] = i
		cp.rule[i] = -1
	}
	for _, i := range policed {
		f := policies[s.Columns[i].Name]
		cp.rule[i] = len(cp.rules)
		cp.rules = append(cp.rules, columnRule{name: s.Columns[i].Name, visible: func(p authz.Principal, row any) bool { return f(p, row.(*T)) }})
	}
	return cp
}

// hidden returns the policed columns p may not see of row, a bit per
// rule. A row that did not decode (nil) hides every one.
func (cp *columnPolicies) hidden(p authz.Principal, row any) uint64 {
	var m uint64
	for i := range cp.rules {
		if row == nil || !cp.call(i, p, row) {
			m |= 1 << i
		}
	}
	return m
}

// call runs rule i; a panic hides the column (and is logged, sparsely).
func (cp *columnPolicies) call(i int, p authz.Principal, row any) (ok bool) {
	defer func() {
		if x := recover(); x != nil {
			ok = false
			if n := cp.panics.Add(1); n&(n-1) == 0 {
				cp.dec.log.Error("tide: a column policy panicked; the column is hidden", "column", cp.rules[i].name, "panic", x, "count", n)
			}
		}
	}()
	return cp.rules[i].visible(p, row)
}

// shown returns the entry of an upsert whose row p may see (the row filter
// let it through), trimmed to the columns p may see: nil when the feed
// recorded the previous version and no column p may see changed, since p
// already holds the row as it is.
func (r *resource) shown(p authz.Principal, origin string, c *feed.Change, enc *entryBytes, snapshot bool) []byte {
	if r.cols == nil {
		return enc.entry(c, origin)
	}
	v := &enc.view
	hidden := r.cols.hidden(p, r.cols.dec.row(c, v))
	if !snapshot && c.PrevKnown && r.unchanged(p, c, v, hidden) {
		return nil
	}
	if hidden == 0 {
		return enc.entry(c, origin)
	}
	return enc.trimmed(c, origin, hidden, r.cols)
}

// unchanged reports whether p holds the change's row as p would receive
// it (with hidden columns left out): p saw the previous version (the row
// filter let it through), with the same columns hidden, and every column
// p may see is unchanged. Anything unknown (no previous version, one that
// does not decode, a row that does not split) is a change.
func (r *resource) unchanged(p authz.Principal, c *feed.Change, v *rowView, hidden uint64) bool {
	if len(c.Prev) == 0 {
		return false // an insert: new to p
	}
	prev := r.cols.dec.prev(c, v)
	if prev == nil {
		return false
	}
	if r.filter != nil && !r.filter.call(p, prev) {
		return false // p did not see the previous version
	}
	if r.cols.hidden(p, prev) != hidden {
		return false
	}
	d := r.cols.diffOf(c, v)
	return d.known && !d.other && d.policed&^hidden == 0
}

// columnDiff says which columns an upsert changed from its previous
// version, computed once per change.
type columnDiff struct {
	known   bool   // both rows split into columns
	other   bool   // a column without a policy (or an unknown member) changed
	policed uint64 // the policed columns that changed, a bit per rule
}

// diffOf returns the change's columnDiff, computing it on first use.
func (cp *columnPolicies) diffOf(c *feed.Change, v *rowView) *columnDiff {
	if v.diff != nil {
		return v.diff
	}
	d := &columnDiff{}
	v.diff = d
	now, ok1 := splitObject(c.Row)
	before, ok2 := splitObject(c.Prev)
	if !ok1 || !ok2 {
		return d
	}
	d.known = true
	vals := make([][]byte, 2*len(cp.rule))
	for k, ms := range [][]objMember{now, before} {
		src := c.Row
		if k == 1 {
			src = c.Prev
		}
		for _, m := range ms {
			i, ok := cp.col[string(m.name)]
			if !ok || vals[2*i+k] != nil {
				d.other = true // not a declared column, or a column twice: not worth telling apart
				continue
			}
			vals[2*i+k] = src[m.val:m.end]
		}
	}
	for i := range cp.rule {
		a, b := vals[2*i], vals[2*i+1]
		if a != nil && b != nil && bytes.Equal(a, b) {
			continue
		}
		if r := cp.rule[i]; r >= 0 {
			d.policed |= 1 << r
		} else {
			d.other = true
		}
	}
	return d
}

// trimmedEntry is an upsert entry without some policed columns, shared by
// every subscriber of the change that may not see the same ones.
type trimmedEntry struct {
	hidden uint64
	origin string // the origin shown: the change's (its writer's device), or none
	entry  []byte
	named  []byte // entry naming its resource, made on first use
}

// trimmed returns the upsert entry of c without the policed columns in
// hidden, as the device origin receives it, encoding it on first use for
// every subscriber that hides the same columns. A row that does not split
// into members cannot be trimmed: it is sent as a delete, like a row the
// principal may not see.
func (eb *entryBytes) trimmed(c *feed.Change, origin string, hidden uint64, cp *columnPolicies) []byte {
	shown := shownOrigin(c, origin)
	for i := range eb.trims {
		if t := &eb.trims[i]; t.hidden == hidden && t.origin == shown {
			return t.entry
		}
	}
	ms, ok := splitObject(c.Row)
	if !ok {
		return eb.view.hiddenDelete(c)
	}
	row := make([]byte, 0, len(c.Row))
	row = append(row, '{')
	n := 0
	for _, m := range ms {
		if i, ok := cp.col[string(m.name)]; ok && cp.rule[i] >= 0 && hidden&(1<<cp.rule[i]) != 0 {
			continue
		}
		if n > 0 {
			row = append(row, ',')
		}
		row = append(row, c.Row[m.start:m.end]...)
		n++
	}
	row = append(row, '}')
	e := protocol.AppendEntry(make([]byte, 0, len(row)+len(c.Key)+48), "upsert", c.Key, row, shown)
	eb.trims = append(eb.trims, trimmedEntry{hidden: hidden, origin: shown, entry: e})
	return e
}

// namedFor returns entry naming its resource: the shared one if entry is
// one of the change's trimmed entries, else a copy of its own.
func (eb *entryBytes) namedFor(entry []byte, resource string) []byte {
	for i := range eb.trims {
		if t := &eb.trims[i]; sameBytes(t.entry, entry) {
			if t.named == nil {
				t.named = namedEntry(entry, resource)
			}
			return t.named
		}
	}
	return namedEntry(entry, resource)
}

// objMember is one member of a JSON object: its key, unescaped, and where
// its text (key through value) and its value are.
type objMember struct {
	name            []byte // in the object's text, unless the key has escapes
	start, val, end int
}

// splitObject splits a JSON object into its members, in order. It
// reports false for anything that is not one well-formed object.
func splitObject(b []byte) ([]objMember, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	out := make([]objMember, 0, 16)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		start := i
		end, ok := skipString(b, i)
		if !ok {
			return nil, false
		}
		name := b[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var n string
			if json.Unmarshal(b[i:end], &n) != nil {
				return nil, false
			}
			name = []byte(n)
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		val := skipSpace(b, i+1)
		end, ok = skipValue(b, val)
		if !ok {
			return nil, false
		}
		out = append(out, objMember{name: name, start: start, val: val, end: end})
		i = skipSpace(b, end)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		case i < len(b) && b[i] == '}':
			return out, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the JSON string starting at b[i] ('"').
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the end of the JSON value starting at b[i]. It checks
// the nesting and the strings, and leaves the rest (numbers, literals) to
// whoever reads the value: its text is kept or dropped whole.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		var stack []byte
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '{', '[':
				stack = append(stack, b[i]+2) // '}' is '{'+2, ']' is '['+2
			case '}', ']':
				if len(stack) == 0 || stack[len(stack)-1] != b[i] {
					return 0, false
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
			return i, i > start
		}
		i++
	}
	return i, i > start
}
