package core

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/tidesync/tide/core/feed"
)

// ProtocolVersion is the wire protocol version this package speaks. Every
// frame carries it in its "v" field.
const ProtocolVersion = 1

// Frame types. docs/protocol.md specifies every frame and field.
const (
	// Client to server.
	FrameHello       = "hello"
	FrameSubscribe   = "subscribe"
	FrameUnsubscribe = "unsubscribe"
	FrameRefresh     = "refresh"

	// Server to client.
	FrameWelcome         = "welcome"
	FrameChanges         = "changes"
	FrameCaughtUp        = "caught-up"
	FrameReset           = "reset"
	FrameError           = "error"
	FrameUpdateAvailable = "update-available"
	FrameRefreshToken    = "refresh-token"
)

// WebSocket close codes tide uses. 1000, 1001, 1008 and 1013 are the
// standard codes; 4000–4002 are tide's own.
const (
	CloseNormal      = 1000 // the client or server ended the session normally
	CloseGoingAway   = 1001 // an endpoint is going away
	ClosePolicy      = 1008 // a policy was violated: no hello, bad auth, expired token, revoked
	CloseOverloaded  = 1013 // backpressure: the client did not read fast enough
	CloseVersionSkew = 4000 // the client speaks a protocol version this server does not
	CloseIdle        = 4001 // no traffic within the idle timeout
	CloseDrain       = 4002 // the server is shutting down: reconnect, possibly elsewhere
)

// Field limits of client frames.
const (
	maxIDLen       = 128
	maxNameLen     = 128
	maxBuildLen    = 128
	maxOriginLen   = 128
	maxTokenLen    = 8192
	maxConditionsN = 64 // hard cap before validation; the engine's limit is lower
)

// ClientFrame is a decoded client-to-server frame. Fields not used by a frame
// type are zero.
type ClientFrame struct {
	V    int    `json:"v"`
	Type string `json:"type"`

	// hello
	Build  string `json:"build,omitempty"`
	Origin string `json:"origin,omitempty"`
	Token  string `json:"token,omitempty"` // also refresh

	// subscribe, unsubscribe
	ID         string                     `json:"id,omitempty"`
	Resource   string                     `json:"resource,omitempty"`
	Conditions map[string]json.RawMessage `json:"conditions,omitempty"`
	Cursor     string                     `json:"cursor,omitempty"`
	Limit      int                        `json:"limit,omitempty"`
}

// DecodeClientFrame parses and checks one client frame. It never panics; a
// bad frame yields an *Error whose code says what is wrong.
func DecodeClientFrame(data []byte) (ClientFrame, *Error) {
	var f ClientFrame
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return f, errorf(CodeBadFrame, "a frame is a JSON object")
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return ClientFrame{}, errorf(CodeBadFrame, "invalid frame: %v", err)
	}
	if f.V == 0 {
		return f, errorf(CodeBadFrame, `missing protocol version "v"`)
	}
	if f.V != ProtocolVersion {
		return f, errorf(CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", f.V, ProtocolVersion)
	}
	switch f.Type {
	case FrameHello:
		if err := checkText("build", f.Build, maxBuildLen); err != nil {
			return f, err
		}
		if err := checkText("origin", f.Origin, maxOriginLen); err != nil {
			return f, err
		}
		if len(f.Token) > maxTokenLen {
			return f, errorf(CodeBadFrame, "token is longer than %d bytes", maxTokenLen)
		}
	case FrameSubscribe:
		if err := checkRequired("id", f.ID, maxIDLen); err != nil {
			return f, err
		}
		if err := checkRequired("resource", f.Resource, maxNameLen); err != nil {
			return f, err
		}
		if len(f.Conditions) > maxConditionsN {
			return f, errorf(CodeTooManyConditions, "at most %d conditions", maxConditionsN)
		}
		if len(f.Cursor) > maxCursorLen {
			return f, errorf(CodeInvalidCursor, "cursor is longer than %d bytes", maxCursorLen)
		}
		if f.Limit < 0 {
			return f, errorf(CodeBadFrame, "limit must not be negative")
		}
	case FrameUnsubscribe:
		if err := checkRequired("id", f.ID, maxIDLen); err != nil {
			return f, err
		}
	case FrameRefresh:
		if f.Token == "" {
			return f, errorf(CodeBadFrame, "refresh needs a token")
		}
		if len(f.Token) > maxTokenLen {
			return f, errorf(CodeBadFrame, "token is longer than %d bytes", maxTokenLen)
		}
	case "":
		return f, errorf(CodeBadFrame, `missing frame "type"`)
	default:
		return f, errorf(CodeUnknownType, "unknown frame type %q", truncate(f.Type, 32))
	}
	return f, nil
}

func checkRequired(field, v string, max int) *Error {
	if v == "" {
		return errorf(CodeBadFrame, "%s is required", field)
	}
	return checkText(field, v, max)
}

// checkText rejects over-long values and control characters in identifiers
// that end up in logs and frames.
func checkText(field, v string, max int) *Error {
	if len(v) > max {
		return errorf(CodeBadFrame, "%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return errorf(CodeBadFrame, "%s is not valid UTF-8", field)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return errorf(CodeBadFrame, "%s contains a control character", field)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// frame header shared by every server frame.
func appendFrameStart(b []byte, typ string) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, ProtocolVersion, 10)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	return append(b, '"')
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, value)
}

// encodeWelcome encodes the server's reply to hello.
func encodeWelcome(cfg *Config) []byte {
	b := appendFrameStart(nil, FrameWelcome)
	b = appendField(b, "build", cfg.BuildID)
	b = append(b, `,"limits":{"max_frame_bytes":`...)
	b = strconv.AppendInt(b, int64(cfg.MaxFrameBytes), 10)
	b = append(b, `,"max_subscriptions":`...)
	b = strconv.AppendInt(b, int64(cfg.MaxSubscriptions), 10)
	b = append(b, `,"frame_rate":`...)
	b = strconv.AppendInt(b, int64(cfg.FrameRate), 10)
	b = append(b, `,"frame_burst":`...)
	b = strconv.AppendInt(b, int64(cfg.FrameBurst), 10)
	return append(b, '}', '}')
}

func encodeCaughtUp(id, cursor string) []byte {
	b := appendFrameStart(nil, FrameCaughtUp)
	b = appendField(b, "id", id)
	b = appendField(b, "cursor", cursor)
	return append(b, '}')
}

func encodeReset(id, reason string) []byte {
	b := appendFrameStart(nil, FrameReset)
	b = appendField(b, "id", id)
	b = appendField(b, "reason", reason)
	return append(b, '}')
}

func encodeError(id string, e *Error) []byte {
	b := appendFrameStart(nil, FrameError)
	if id != "" {
		b = appendField(b, "id", id)
	}
	b = appendField(b, "code", string(e.Code))
	b = appendField(b, "message", e.Message)
	return append(b, '}')
}

func encodeUpdateAvailable(build string) []byte {
	b := appendFrameStart(nil, FrameUpdateAvailable)
	b = appendField(b, "build", build)
	return append(b, '}')
}

func encodeRefreshToken(expiresIn int) []byte {
	b := appendFrameStart(nil, FrameRefreshToken)
	b = append(b, `,"expires_in":`...)
	b = strconv.AppendInt(b, int64(expiresIn), 10)
	return append(b, '}')
}

// appendChangesStart begins a changes frame; entries follow, then
// appendChangesEnd. The id is already JSON-encoded (subscriptions keep it so).
func appendChangesStart(b, idJSON []byte, cursor string) []byte {
	b = appendFrameStart(b, FrameChanges)
	b = append(b, `,"id":`...)
	b = append(b, idJSON...)
	b = appendField(b, "cursor", cursor)
	return append(b, `,"entries":[`...)
}

func appendChangesEnd(b []byte) []byte { return append(b, ']', '}') }

// appendLiveChangesStart is appendChangesStart with a change cursor built
// in place, for the live path where a frame must not allocate.
func appendLiveChangesStart(b, idJSON []byte, epoch string, pos feed.Position) []byte {
	b = appendFrameStart(b, FrameChanges)
	b = append(b, `,"id":`...)
	b = append(b, idJSON...)
	b = append(b, `,"cursor":"`...)
	b = appendCursor(b, epoch, pos)
	return append(b, `","entries":[`...)
}
