package logrepl

import (
	"errors"
	"fmt"
)

// Code names a kind of failure. Codes are stable: callers and operators may
// match on them, and they never change meaning.
type Code string

// The codes of the errors this package returns.
const (
	// CodeWALLevel: the server's wal_level is not logical, so it cannot
	// decode its WAL into changes.
	CodeWALLevel Code = "wal_level_not_logical"
	// CodeBadName: a slot or publication name that is not 1 to 63 lower-case
	// letters, digits and underscores.
	CodeBadName Code = "bad_name"
	// CodeNoTable: a table named for a publication or a replica identity
	// does not exist.
	CodeNoTable Code = "no_such_table"
	// CodeNoSlot: the replication slot does not exist (EnsureSlot makes it).
	CodeNoSlot Code = "no_such_slot"
	// CodeSlotMismatch: a slot of that name exists but is not a pgoutput slot
	// of this database.
	CodeSlotMismatch Code = "slot_mismatch"
	// CodeSlotInUse: another connection is streaming from the slot (a slot
	// serves one consumer at a time), or it is being dropped while one is.
	CodeSlotInUse Code = "slot_in_use"
	// CodeSlotLost: the server removed WAL the slot still needed
	// (max_slot_wal_keep_size) and invalidated it: changes are missing from
	// it for good. Drop it, make it anew, and start from a fresh snapshot.
	CodeSlotLost Code = "slot_lost"
	// CodeMalformed: the server sent a message this package cannot read.
	CodeMalformed Code = "malformed_stream"
	// CodeSilent: the server sent nothing, not even a reply to a status
	// update that asked for one, for three status intervals.
	CodeSilent Code = "stream_silent"
	// CodeBusy: Run was called while another Run of the same Consumer was
	// running.
	CodeBusy Code = "consumer_busy"
	// CodeConfig: a Config that cannot work (a missing field).
	CodeConfig Code = "bad_config"
)

// Error is the error type of this package: a stable Code, a message for
// people, and the underlying error when there is one.
//
// errors.Is(err, ErrWALLevel) (or any of the Err values below) matches
// every *Error of the same Code, whatever its message.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// Error returns "logrepl: " followed by the message.
func (e *Error) Error() string {
	if e.Err != nil && e.Msg == "" {
		return "logrepl: " + e.Err.Error()
	}
	if e.Err != nil {
		return "logrepl: " + e.Msg + ": " + e.Err.Error()
	}
	return "logrepl: " + e.Msg
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same Code.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// Sentinels to test errors against with errors.Is; each matches every
// *Error of its Code.
var (
	ErrWALLevel     = &Error{Code: CodeWALLevel, Msg: "wal_level is not logical"}
	ErrBadName      = &Error{Code: CodeBadName, Msg: "bad slot or publication name"}
	ErrNoTable      = &Error{Code: CodeNoTable, Msg: "no such table"}
	ErrNoSlot       = &Error{Code: CodeNoSlot, Msg: "no such replication slot"}
	ErrSlotMismatch = &Error{Code: CodeSlotMismatch, Msg: "replication slot is not a pgoutput slot of this database"}
	ErrSlotInUse    = &Error{Code: CodeSlotInUse, Msg: "replication slot is in use"}
	ErrSlotLost     = &Error{Code: CodeSlotLost, Msg: "replication slot lost WAL it needed"}
	ErrMalformed    = &Error{Code: CodeMalformed, Msg: "malformed replication message"}
	ErrSilent       = &Error{Code: CodeSilent, Msg: "replication stream is silent"}
	ErrBusy         = &Error{Code: CodeBusy, Msg: "consumer is already running"}
	ErrConfig       = &Error{Code: CodeConfig, Msg: "bad configuration"}
)

// walLevelError is the error for a server whose wal_level is current. Its
// message is stable (docs and operators quote it):
//
//	logrepl: wal_level is "replica"; logical replication needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical; and restart Postgres
func walLevelError(current string) error {
	return &Error{Code: CodeWALLevel, Msg: fmt.Sprintf("wal_level is %q; logical replication needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical; and restart Postgres", current)}
}

// malformed returns a CodeMalformed error.
func malformed(format string, args ...any) error {
	return &Error{Code: CodeMalformed, Msg: fmt.Sprintf(format, args...)}
}

// slotLostError is the error for a slot the server invalidated.
func slotLostError(name string, err error) error {
	return &Error{Code: CodeSlotLost, Msg: "slot " + name + " was invalidated: the server removed WAL it needed (max_slot_wal_keep_size), so changes are missing from it; drop it (DropSlot), make it anew (EnsureSlot) and start from a fresh snapshot", Err: err}
}
