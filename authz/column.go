package authz

// ColumnPolicy decides whether principal p may see one column of row, a row
// of a resource backed by the struct type T. A principal it refuses
// receives the row without that column: the member is absent from the row
// object, not null, in snapshots, replays, live changes, polls and
// mutation acks alike, and a change that touches only columns it may not
// see does not reach it at all.
//
//	ColumnPolicies: map[string]authz.ColumnPolicy[Member]{
//		"email": func(p authz.Principal, m *Member) bool { return m.UserID == p.ID || p.Claims["admin"] == true },
//	}
//
// A column policy runs on the engine's fan-out path for every change of
// the scope and every subscriber, like a RowFilter: it must be fast, must
// not block, must be safe for concurrent use and must not modify row. A
// policy that panics hides the column.
type ColumnPolicy[T any] func(p Principal, row *T) bool
