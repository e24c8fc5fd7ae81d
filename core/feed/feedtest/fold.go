package feedtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/tidesync/tide/core/feed"
)

// RowID identifies a row across resources.
type RowID struct {
	Resource string
	Key      string
}

// String returns "resource/key".
func (id RowID) String() string { return id.Resource + "/" + id.Key }

// Rows is a copy of a set of rows, as a client keeps it: the latest upsert
// change of every row that exists. Only Scope and Row of the values matter
// when comparing with Diff.
type Rows map[RowID]feed.Change

// Fold applies changes in order to rows, the way a client applies a replay or
// a stream: an upsert sets the row, a delete removes it (deleting a missing
// row is a no-op). A nil rows is allocated. It returns rows.
func Fold(rows Rows, changes []feed.Change) Rows {
	if rows == nil {
		rows = make(Rows)
	}
	for _, c := range changes {
		id := RowID{c.Resource, c.Key}
		switch c.Op {
		case feed.OpUpsert:
			rows[id] = c
		case feed.OpDelete:
			delete(rows, id)
		}
	}
	return rows
}

// Diff describes how got differs from want, comparing every row's scope
// values and JSON content (decoded, so formatting and key order do not
// matter), or returns "" when they are equal.
func Diff(want, got Rows) string {
	var ids []RowID
	for id := range want {
		ids = append(ids, id)
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b RowID) int { return strings.Compare(a.String(), b.String()) })
	var b strings.Builder
	n := 0
	for _, id := range ids {
		w, inWant := want[id]
		g, inGot := got[id]
		var msg string
		switch {
		case !inGot:
			msg = fmt.Sprintf("%s missing (want scope %q row %s)", id, w.Scope, w.Row)
		case !inWant:
			msg = fmt.Sprintf("%s unexpected (scope %q row %s)", id, g.Scope, g.Row)
		case !slices.Equal(w.Scope, g.Scope):
			msg = fmt.Sprintf("%s scope %q, want %q", id, g.Scope, w.Scope)
		case !JSONEqual(w.Row, g.Row):
			msg = fmt.Sprintf("%s row %s, want %s", id, g.Row, w.Row)
		default:
			continue
		}
		n++
		if n <= 10 {
			b.WriteString("\n\t")
			b.WriteString(msg)
		}
	}
	if n == 0 {
		return ""
	}
	if n > 10 {
		fmt.Fprintf(&b, "\n\t… %d differences in all", n)
	}
	return fmt.Sprintf("%d of %d/%d rows differ (want/got):%s", n, len(want), len(got), b.String())
}

// JSONEqual reports whether a and b are the same JSON value, ignoring
// formatting and object key order. Invalid JSON equals nothing.
func JSONEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return json.Valid(a)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
