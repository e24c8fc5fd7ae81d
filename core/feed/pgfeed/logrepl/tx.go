package logrepl

import (
	"strconv"
	"time"
)

// Tx is a committed transaction, or one piece of a large one (see More).
//
// A Tx passed to a Handler belongs to the handler: the consumer keeps no
// reference to it or its slices.
type Tx struct {
	// XID is the transaction's id on the server.
	XID uint32
	// CommitLSN is the WAL position of the transaction's commit record.
	// Transactions arrive in the order of their CommitLSN: commit order.
	CommitLSN uint64
	// EndLSN is the WAL position just past the commit record: the position
	// the consumer confirms once the handler has accepted the whole
	// transaction. Zero on a piece with More set (it is not known yet).
	EndLSN uint64
	// CommitTime is when the transaction committed, by the server's clock.
	CommitTime time.Time
	// Changes are the transaction's row changes to the published tables,
	// in the order they were made.
	Changes []Change

	// Messages are the transactional logical decoding messages the
	// transaction emitted (pg_logical_emit_message(true, prefix, content)),
	// in the order it emitted them; delivered only with Config.Messages.
	// A transaction with messages and no changes is delivered too.
	Messages []Message

	// Part numbers the pieces of a transaction larger than the consumer's
	// piece limits (Config.MaxPieceChanges, Config.MaxPieceBytes), from 0.
	// A transaction within the limits arrives as one Tx with Part 0.
	Part int
	// More is true on every piece of a split transaction but its last. The
	// transaction has committed (the server sends nothing before its
	// commit), so a piece is never taken back; but its position is
	// confirmed only after the last piece is accepted, so a restart
	// delivers the transaction again from Part 0.
	More bool
}

// Message is a logical decoding message emitted inside a transaction.
type Message struct {
	// Prefix is the message's prefix (its first argument after
	// transactional), which says what it is for.
	Prefix string
	// Content is the message's content.
	Content []byte
	// Changes is how many changes of the transaction preceded the message
	// (across pieces).
	Changes int
}

// Op is the kind of a Change.
type Op uint8

// The kinds of change.
const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
	// OpTruncate is a TRUNCATE of the table: every row is gone. It carries
	// no columns.
	OpTruncate
)

// String returns "insert", "update", "delete" or "truncate".
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Change is one row change.
type Change struct {
	// Table is the schema-qualified table name, as "schema.table"
	// (unquoted).
	Table string
	// Op is what happened to the row.
	Op Op
	// New is the row after an insert or update, one Column per table
	// column in table order; nil for deletes and truncates.
	New []Column
	// Old is the row before an update or delete, when the server sent it:
	// always for a table with REPLICA IDENTITY FULL (every column), for
	// other tables only on deletes and on updates that change the key (the
	// key columns, see OldKeyOnly). Nil otherwise.
	Old []Column
	// OldKeyOnly is true when Old holds only the replica identity key: its
	// other columns are nil, meaning not sent, not SQL NULL.
	OldKeyOnly bool
}

// Column is one column of a row.
type Column struct {
	// Name is the column's name.
	Name string
	// Type is the OID of the column's data type (see pg_type).
	Type uint32
	// Key is true for a column of the table's replica identity key.
	Key bool
	// Value is the column's value in Postgres's text output format; nil
	// for SQL NULL, and for a value not sent (Unchanged, or a non-key
	// column of a key-only Old row).
	Value *string
	// Unchanged is true when the value is a TOASTed value the update did
	// not change, which the server does not send ('u' in pgoutput). Value
	// is then nil; with REPLICA IDENTITY FULL the change's Old row holds
	// it.
	Unchanged bool
}

// Find returns the column of row called name, and whether there is one.
func Find(row []Column, name string) (Column, bool) {
	for _, col := range row {
		if col.Name == name {
			return col, true
		}
	}
	return Column{}, false
}
