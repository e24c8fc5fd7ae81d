package core

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
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

// rejectMessage is the short message, fit to show a person, of a reject
// with code when the app gave no words of its own. The specifics go to
// the reject's detail.
func rejectMessage(code protocol.Code) string {
	switch code {
	case protocol.CodeBadFrame, protocol.CodeUnsupportedVersion, protocol.CodeUnknownType:
		return "the app sent a change the server cannot read"
	case protocol.CodeUnknownResource, protocol.CodeUnknownMutator:
		return "this action is not available"
	case protocol.CodeUnauthenticated:
		return "you need to sign in"
	case protocol.CodeForbidden:
		return "you do not have access to this"
	case protocol.CodeInvalidArgs:
		return "the change is not valid"
	case protocol.CodeConflict:
		return "the change conflicts with the current data"
	case protocol.CodeKeyExpired:
		return "the change is too old to be saved"
	case protocol.CodeFrameTooLarge:
		return "the change is too large"
	case protocol.CodeRateLimited:
		return "too many changes at once; try again"
	case protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeNotMigrated, protocol.CodeNotCaptured:
		return "the server cannot save changes right now; try again later"
	case protocol.CodeDraining:
		return "the server is restarting; try again"
	}
	return "the change could not be saved" // mutator_error, and any code added later
}

// presentReject returns e as a reject carries it: a short message for a
// person and the specifics in detail. An e that has a detail already was
// worded for a person where it was made (presentedf) and is returned as
// it is; for any other the message becomes rejectMessage's and e's own
// message the detail. e is not modified: it may be shared (ErrDraining).
func presentReject(e *protocol.Error) *protocol.Error {
	if e.Detail != "" {
		return e
	}
	return &protocol.Error{Code: e.Code, Message: rejectMessage(e.Code), Detail: e.Message}
}

// presentedf returns an error with a message for a person and a detail
// formatted for developers.
func presentedf(code protocol.Code, message, format string, args ...any) *protocol.Error {
	return &protocol.Error{Code: code, Message: message, Detail: fmt.Sprintf(format, args...)}
}

// maxAppWords bounds the app's words taken as a message, in bytes.
const maxAppWords = 200

// appWords returns what the app wrote after sentinel in err's text: "title
// must be 1-200 characters (got 0)" for fmt.Errorf("%w: title must be
// 1-200 characters (got 0)", ErrInvalidArgs). It is "" when the app wrote
// nothing there. It is cut, on a character boundary, to maxAppWords bytes.
func appWords(err, sentinel error) string {
	_, words, ok := strings.Cut(err.Error(), sentinel.Error()+": ")
	if !ok {
		return ""
	}
	words = strings.TrimSpace(words)
	if len(words) > maxAppWords {
		cut := maxAppWords
		for cut > 0 && !utf8.RuneStart(words[cut]) {
			cut--
		}
		words = words[:cut] + "…"
	}
	return words
}

// argsMessage words a mutator's refusal of its arguments for a person:
// the app's own words (an error wrapping ErrInvalidArgs, from the
// arguments' UnmarshalJSON say), or what a JSON decoding error means in
// JSON's terms, never Go's.
func argsMessage(err error) string {
	if errors.Is(err, ErrInvalidArgs) {
		if w := appWords(err, ErrInvalidArgs); w != "" {
			return w
		}
	}
	if m, ok := jsontext.DescribeError(err, "the arguments"); ok {
		return m
	}
	return rejectMessage(protocol.CodeInvalidArgs)
}
