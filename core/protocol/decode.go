package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tidesync/tide/internal/jsontext"
	"github.com/tidesync/tide/internal/text"
)

// DecodeClientFrame parses and checks one client frame. It never panics; a
// bad frame yields an *Error whose code says what is wrong.
func DecodeClientFrame(data []byte) (ClientFrame, *Error) {
	var f ClientFrame
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return f, Errorf(CodeBadFrame, "a frame is a JSON object")
	}
	if err := json.Unmarshal(data, &f); err != nil {
		e := &Error{Code: CodeBadFrame, Message: "invalid frame", Detail: "invalid frame: " + err.Error()}
		if m, ok := jsontext.DescribeError(err, "the frame"); ok {
			e.Message = "invalid frame: " + m
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// The rest of the frame was decoded: keep what says which
			// mutation it is, so that it is answered by a reject.
			return ClientFrame{V: f.V, Type: f.Type, Key: f.Key}, e
		}
		return ClientFrame{}, e
	}
	return f, f.Validate()
}

// Validate checks the fields a frame of f's type needs: the version, the
// type, required fields and their limits. DecodeClientFrame calls it;
// routes that build a frame from another encoding (an HTTP body) call it
// themselves.
func (f *ClientFrame) Validate() *Error {
	if f.V == 0 {
		return Errorf(CodeBadFrame, `missing protocol version "v"`)
	}
	if f.V != Version {
		return Errorf(CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", f.V, Version)
	}
	switch f.Type {
	case FrameHello:
		if err := CheckText("build", f.Build, MaxBuildLen); err != nil {
			return err
		}
		if err := CheckText("origin", f.Origin, MaxOriginLen); err != nil {
			return err
		}
		if len(f.Token) > MaxTokenLen {
			return Errorf(CodeBadFrame, "token is longer than %d bytes", MaxTokenLen)
		}
	case FrameSubscribe:
		if err := checkRequired("id", f.ID, MaxIDLen); err != nil {
			return err
		}
		if err := CheckResources(f.Resource, f.Resources); err != nil {
			return err
		}
		if len(f.Conditions) > MaxConditionsN {
			return Errorf(CodeTooManyConditions, "at most %d conditions", MaxConditionsN)
		}
		if len(f.Cursor) > MaxCursorLen {
			return Errorf(CodeInvalidCursor, "cursor is longer than %d bytes", MaxCursorLen)
		}
		if f.Limit < 0 {
			return Errorf(CodeBadFrame, "limit must not be negative")
		}
	case FrameUnsubscribe:
		if err := checkRequired("id", f.ID, MaxIDLen); err != nil {
			return err
		}
	case FrameMutate:
		if err := checkRequired("key", f.Key, MaxKeyLen); err != nil {
			return err
		}
		if err := checkRequired("resource", f.Resource, MaxNameLen); err != nil {
			return err
		}
		if err := checkRequired("name", f.Name, MaxNameLen); err != nil {
			return err
		}
		if f.Seq < 0 {
			return Errorf(CodeBadFrame, "seq must not be negative")
		}
		if f.At <= 0 {
			return Errorf(CodeBadFrame, "at (Unix milliseconds) is required")
		}
		if a := bytes.TrimSpace(f.Args); len(a) > 0 && a[0] != '{' {
			return Errorf(CodeInvalidArgs, "args is a JSON object")
		}
		// Its format is the tracer's to check: one that does not parse
		// only starts no trace.
		if err := CheckText("traceparent", f.TraceParent, MaxTraceParentLen); err != nil {
			return err
		}
	case FrameRefresh:
		if f.Token == "" {
			return Errorf(CodeBadFrame, "refresh needs a token")
		}
		if len(f.Token) > MaxTokenLen {
			return Errorf(CodeBadFrame, "token is longer than %d bytes", MaxTokenLen)
		}
	case FramePong:
		// Nothing to check: a pong only shows the connection is alive.
	case FrameTopicSubscribe, FrameTopicUnsubscribe, FramePublish, FramePresenceUpdate:
		return f.validateChannel()
	case "":
		return Errorf(CodeBadFrame, `missing frame "type"`)
	default:
		return Errorf(CodeUnknownType, "unknown frame type %q", text.Truncate(f.Type, 32))
	}
	return nil
}

// CheckResources checks the resources a subscribe names: resource alone,
// or a list of 1 to MaxResourcesN distinct names (resources), which
// resource, when also given, must be part of.
func CheckResources(resource string, resources []string) *Error {
	if len(resources) == 0 {
		return checkRequired("resource", resource, MaxNameLen)
	}
	if len(resources) > MaxResourcesN {
		return Errorf(CodeBadFrame, "at most %d resources", MaxResourcesN)
	}
	found := resource == ""
	for i, r := range resources {
		if err := checkRequired("resources", r, MaxNameLen); err != nil {
			return err
		}
		for _, o := range resources[:i] {
			if o == r {
				return Errorf(CodeBadFrame, "resources names %q twice", text.Truncate(r, 64))
			}
		}
		found = found || r == resource
	}
	if !found {
		return Errorf(CodeBadFrame, "resource %q is not one of resources", text.Truncate(resource, 64))
	}
	return nil
}

func checkRequired(field, v string, max int) *Error {
	if v == "" {
		return Errorf(CodeBadFrame, "%s is required", field)
	}
	return CheckText(field, v, max)
}

// CheckText rejects over-long values and control characters in identifiers
// that end up in logs and frames.
func CheckText(field, v string, max int) *Error {
	if len(v) > max {
		return Errorf(CodeBadFrame, "%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return Errorf(CodeBadFrame, "%s is not valid UTF-8", field)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return Errorf(CodeBadFrame, "%s contains a control character", field)
		}
	}
	return nil
}

// ErrBadServerFrame reports a server frame a client cannot use.
var ErrBadServerFrame = errors.New("tide: bad server frame")

// DecodeServerFrame parses one server frame and checks the fields its type
// requires. Unknown frame types are returned without error so that old
// clients tolerate new informational frames; callers ignore them.
//
// Entry rows of a changes frame may share data's memory: do not modify data
// while the frame is in use.
func DecodeServerFrame(data []byte) (ServerFrame, error) {
	f, ok := decodeChangesFast(data)
	if !ok {
		f = ServerFrame{}
		if err := json.Unmarshal(data, &f); err != nil {
			return ServerFrame{}, fmt.Errorf("%w: %v", ErrBadServerFrame, err)
		}
	}
	if f.V != Version {
		return f, fmt.Errorf("%w: protocol version %d", ErrBadServerFrame, f.V)
	}
	switch f.Type {
	case FrameChanges:
		if f.Cursor == "" {
			return f, fmt.Errorf("%w: changes without cursor", ErrBadServerFrame)
		}
		if err := checkEntries(f.Entries); err != nil {
			return f, err
		}
	case FrameCaughtUp:
		if f.ID == "" || f.Cursor == "" {
			return f, fmt.Errorf("%w: caught-up needs id and cursor", ErrBadServerFrame)
		}
	case FrameReset:
		// A polling response's reset has no id: the request named the scope.
		if f.Reason == "" {
			return f, fmt.Errorf("%w: reset without reason", ErrBadServerFrame)
		}
	case FrameAck:
		if f.Key == "" || f.Cursor == "" {
			return f, fmt.Errorf("%w: ack needs key and cursor", ErrBadServerFrame)
		}
		if err := checkEntries(f.Entries); err != nil {
			return f, err
		}
	case FrameReject:
		if f.Key == "" || f.Code == "" {
			return f, fmt.Errorf("%w: reject needs key and code", ErrBadServerFrame)
		}
	case FrameError:
		if f.Code == "" {
			return f, fmt.Errorf("%w: error without code", ErrBadServerFrame)
		}
	default:
		return f, checkChannelServerFrame(&f)
	}
	return f, nil
}

// checkEntries checks the entries of a changes or ack frame: each is an
// upsert with a row or a delete.
func checkEntries(es []Entry) error {
	for _, e := range es {
		if e.Op != "upsert" && e.Op != "delete" {
			return fmt.Errorf("%w: entry op %q", ErrBadServerFrame, e.Op)
		}
		if e.Op == "upsert" && len(e.Row) == 0 {
			return fmt.Errorf("%w: upsert without row", ErrBadServerFrame)
		}
	}
	return nil
}
