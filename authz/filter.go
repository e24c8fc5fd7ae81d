package authz

// RowFilter decides, row by row, whether principal p may see row, a row of a
// resource backed by the struct type T. It narrows what a policy allowed: a
// subscription receives the rows of its scope for which the filter returns
// true, in snapshots, replays and live changes alike; a row that stops
// passing reaches the subscriber as a delete.
//
//	Filter: func(p authz.Principal, t *Todo) bool { return t.OwnerID == p.ID || !t.Private }
//
// A filter runs for every change of the scope and every subscriber, on the
// engine's fan-out path: it must be fast and must not block (no database
// queries; put what it needs in the principal's claims), must be safe for
// concurrent use, and must not modify row, which is shared by every
// subscriber of the change. A filter that panics hides the row.
type RowFilter[T any] func(p Principal, row *T) bool
