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

// The engine's sentinel errors. Each message starts with "tide: "; the
// engine wraps them with what is at fault (the resource, the channel
// pattern, the mutator), so test for them with errors.Is.

// Registration errors, from Register, Table.Mutator and RegisterChannel.
var (
	// ErrDuplicateResource: a resource of that name is registered already.
	ErrDuplicateResource = errors.New("tide: resource already registered")
	// ErrInvalidResource: a declaration is wrong (its table, name, tags,
	// filter columns, dependencies or mutators); the wrapping error says
	// which part. A *DependencyError wraps it too.
	ErrInvalidResource = errors.New("tide: invalid resource")
	// ErrInvalidChannel: a channel declaration is wrong.
	ErrInvalidChannel = errors.New("tide: invalid channel")
	// ErrDuplicateChannel: a channel of that pattern is registered already.
	ErrDuplicateChannel = errors.New("tide: channel already registered")
)

// ErrNotWritable is returned by Table writes when the engine's feed does
// not implement feed.Writer.
var ErrNotWritable = errors.New("tide: the feed does not accept writes through tide")

// Errors a mutator returns (wrapped, with its own message) to refuse a
// mutation with a specific code. Any other error refuses it with
// mutator_error. Nothing the mutator wrote is committed either way.
var (
	// ErrConflict: the data the mutator found forbids the write (the title
	// is taken, the item was sold). Clients receive reject "conflict" and
	// roll their optimistic write back.
	ErrConflict = errors.New("tide: conflict")
	// ErrInvalidArgs: the arguments are wrong in a way their type cannot
	// say (an empty title). Clients receive reject "invalid_args".
	ErrInvalidArgs = errors.New("tide: invalid arguments")
)

// ErrDraining is returned once Shutdown has begun. It is also the wire
// error (draining) a client is sent, so its text is
// "tide: draining: the server is shutting down".
var ErrDraining = &protocol.Error{Code: protocol.CodeDraining, Message: "the server is shutting down"}

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
