package feed

import "context"

// KeyQuery asks for the last change of one row of a resource.
type KeyQuery struct {
	Schema *Schema
	Key    string // canonical text of the primary key
	// Scope, when it has one value per scope column, are the row's scope
	// values as far as the caller knows them: a feed may look the key up
	// through its scope index instead of reading the resource's whole log.
	Scope []string
}

// LastChanger is implemented by feeds that can tell the last change of a
// row: its position, operation, scope and row. Package core's inspector
// asks it to tell whether a subscription was sent a row's latest version.
// It reads a bounded amount of the log: a row whose last change is older
// than what the feed retains, or than what it is willing to read, is not
// found (ok false), which the inspector reports as "unknown".
type LastChanger interface {
	LastChange(ctx context.Context, q KeyQuery) (c Change, ok bool, err error)
}
