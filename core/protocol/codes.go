package protocol

import (
	"fmt"
	"strconv"
)

// Code is a stable wire error code. Codes never change meaning; new ones may
// be added. docs/protocol.md lists every code.
type Code string

// Error codes sent in error frames and HTTP error bodies.
const (
	CodeBadFrame             Code = "bad_frame"              // not a JSON object, or a field is missing or of the wrong type
	CodeUnsupportedVersion   Code = "unsupported_version"    // the frame's v is not a version this server speaks
	CodeUnknownType          Code = "unknown_type"           // the frame's type is not a client frame type
	CodeHelloRequired        Code = "hello_required"         // a frame other than hello came first
	CodeUnknownResource      Code = "unknown_resource"       // no resource of that name is registered
	CodeInvalidConditions    Code = "invalid_conditions"     // a condition names an unknown column, has the wrong type, or an empty list
	CodeInvalidCursor        Code = "invalid_cursor"         // the cursor is not a string this server produced
	CodeDuplicateSub         Code = "duplicate_subscription" // the subscription id is already in use on this connection
	CodeUnknownSub           Code = "unknown_subscription"   // unsubscribe named an id that is not subscribed
	CodeUnauthenticated      Code = "unauthenticated"        // the caller must authenticate first (or its token is invalid)
	CodeForbidden            Code = "forbidden"              // the caller may not see this scope
	CodeTooManySubscriptions Code = "too_many_subscriptions" // the connection, or its principal across its connections, holds the maximum number of subscriptions
	CodeTooManyConnections   Code = "too_many_connections"   // the principal holds the maximum number of connections to this server; the connection is closed with 1013: retry later
	CodeTooManyConditions    Code = "too_many_conditions"    // the subscription has more conditions or values than allowed
	CodeFrameTooLarge        Code = "frame_too_large"        // the frame exceeds the maximum frame size
	CodeRateLimited          Code = "rate_limited"           // the client sends frames faster than allowed, or (a reject) too many of its mutations wait: resend later with the same key
	CodeDraining             Code = "draining"               // the server is shutting down; reconnect elsewhere
	CodeUnavailable          Code = "unavailable"            // the change feed is unreachable; retry later
	CodeInternal             Code = "internal"               // an unexpected server error; retry later
	CodeNotMigrated          Code = "not_migrated"           // the server's change feed is not installed (its migration has not run): a server setup error; retry later
	CodeNotCaptured          Code = "not_captured"           // the server does not record the resource's changes (it was registered after the feed's migration): a server setup error; retry later

	// Mutation refusals, sent in reject frames.
	CodeUnknownMutator Code = "unknown_mutator" // the resource has no mutator of that name
	CodeInvalidArgs    Code = "invalid_args"    // the arguments do not decode into the mutator's type, or the mutator said they are invalid
	CodeConflict       Code = "conflict"        // the mutator refused the write because of the data it found (a conflict raised by the app)
	CodeMutatorFailed  Code = "mutator_error"   // the mutator failed; nothing was written
	CodeKeyExpired     Code = "key_expired"     // the mutation is older than the server keeps idempotency keys: it is not run, lest it run twice
)

// Error is an error with a stable wire code. Every refusal tide sends a
// client is an *Error; errors.As recovers it.
type Error struct {
	Code    Code
	Message string // short and fit to show a person (the app's own words where it gave some); not stable
	Detail  string // for developers and logs: what went wrong, in full; may be empty; not stable
}

// Error formats the code and message.
func (e *Error) Error() string { return fmt.Sprintf("tide: %s: %s", e.Code, e.Message) }

func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CloseCode is a WebSocket close code. 1000, 1001, 1008 and 1013 are the
// standard codes; 4000–4002 are tide's own. docs/protocol.md says what a
// client does on each.
type CloseCode int

// The close codes tide sends.
const (
	CloseNormal      CloseCode = 1000 // the client or server ended the session normally
	CloseGoingAway   CloseCode = 1001 // an endpoint is going away
	ClosePolicy      CloseCode = 1008 // a policy was violated: no hello, bad auth, expired token, revoked
	CloseOverloaded  CloseCode = 1013 // backpressure: the client did not read fast enough
	CloseVersionSkew CloseCode = 4000 // the client speaks a protocol version this server does not
	CloseIdle        CloseCode = 4001 // no traffic within the idle timeout
	CloseDrain       CloseCode = 4002 // the server is shutting down: reconnect, possibly elsewhere
)

var closeNames = map[CloseCode]string{
	CloseNormal:      "normal",
	CloseGoingAway:   "going away",
	ClosePolicy:      "policy",
	CloseOverloaded:  "backpressure",
	CloseVersionSkew: "version skew",
	CloseIdle:        "idle",
	CloseDrain:       "drain",
}

// String returns the code and its name, "1013 backpressure".
func (c CloseCode) String() string {
	if n, ok := closeNames[c]; ok {
		return strconv.Itoa(int(c)) + " " + n
	}
	return strconv.Itoa(int(c))
}

// Reconnect reports whether a client should reconnect after this close.
// It should not after ClosePolicy (the same credentials would be refused
// again: get new ones first) or CloseVersionSkew (the client must be
// updated); after every other code, and after a connection lost without
// a close, it reconnects with backoff (CloseDrain: at once, possibly to
// another server).
func (c CloseCode) Reconnect() bool {
	return c != ClosePolicy && c != CloseVersionSkew
}

// ResetReason says why the server reset a subscription: the client must
// drop its copy of the scope and its cursor, then subscribe again without
// a cursor.
type ResetReason string

// Reset reasons.
const (
	ResetCursorExpired ResetReason = "cursor_expired" // the changes after the cursor were pruned
	ResetCursorAhead   ResetReason = "cursor_ahead"   // the cursor is past the feed's head (the feed was restored)
	ResetEpochChanged  ResetReason = "epoch_changed"  // the cursor belongs to another feed (another database)
	// ResetBacklog: the changes after the cursor are at least half as many
	// as the scope's rows, so the server sends the rows instead.
	ResetBacklog ResetReason = "backlog"
)
