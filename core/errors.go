package core

import (
	"errors"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
)

// ErrorFor maps any error from the engine to the *protocol.Error a client is
// sent: a *protocol.Error as is, authz denials to CodeUnauthenticated or
// CodeForbidden, anything else (a feed or policy failure) to
// CodeUnavailable, whose message reveals nothing of the cause.
func ErrorFor(err error) *protocol.Error {
	var e *protocol.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, authz.ErrUnauthenticated):
		return &protocol.Error{Code: protocol.CodeUnauthenticated, Message: err.Error()}
	case errors.Is(err, authz.ErrForbidden):
		return &protocol.Error{Code: protocol.CodeForbidden, Message: err.Error()}
	}
	return &protocol.Error{Code: protocol.CodeUnavailable, Message: "the change feed is unavailable; retry later"}
}
