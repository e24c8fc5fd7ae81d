package core

import (
	"errors"
	"fmt"

	"github.com/tidesync/tide/authz"
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
	CodeTooManySubscriptions Code = "too_many_subscriptions" // the connection holds the maximum number of subscriptions
	CodeTooManyConditions    Code = "too_many_conditions"    // the subscription has more conditions or values than allowed
	CodeFrameTooLarge        Code = "frame_too_large"        // the frame exceeds the maximum frame size
	CodeRateLimited          Code = "rate_limited"           // the client sends frames faster than allowed
	CodeDraining             Code = "draining"               // the server is shutting down; reconnect elsewhere
	CodeUnavailable          Code = "unavailable"            // the change feed is unreachable; retry later
	CodeInternal             Code = "internal"               // an unexpected server error; retry later
)

// Error is an error with a stable wire code. Every refusal tide sends a
// client is an *Error; errors.As recovers it.
type Error struct {
	Code    Code
	Message string // human-readable detail; not stable
}

// Error formats the code and message.
func (e *Error) Error() string { return fmt.Sprintf("tide: %s: %s", e.Code, e.Message) }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorFor maps any error from the engine to the *Error a client is sent:
// an *Error as is, authz denials to CodeUnauthenticated or CodeForbidden,
// anything else (a feed or policy failure) to CodeUnavailable.
func ErrorFor(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, authz.ErrUnauthenticated):
		return &Error{Code: CodeUnauthenticated, Message: err.Error()}
	case errors.Is(err, authz.ErrForbidden):
		return &Error{Code: CodeForbidden, Message: err.Error()}
	}
	return &Error{Code: CodeUnavailable, Message: "the change feed is unavailable; retry later"}
}

// CodeOf returns the wire code of err: its own if it is an *Error, CodeInternal
// otherwise.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
