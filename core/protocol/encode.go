package protocol

import (
	"encoding/json"
	"strconv"

	"github.com/tidesync/tide/internal/jsontext"
)

// appendFrameStart appends the header every server frame starts with.
func appendFrameStart(b []byte, typ string) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	return append(b, '"')
}

// appendField appends `,"name":"value"` with value JSON-escaped.
func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return jsontext.AppendString(b, value)
}

// Welcome encodes the server's reply to hello: the server's build id, the
// connection's principal id ("" when anonymous), the heartbeat interval in
// milliseconds (0: none) and the limits.
func Welcome(build, principal string, heartbeatMS int, l Limits) []byte {
	b := appendFrameStart(nil, FrameWelcome)
	b = appendField(b, "build", build)
	if principal != "" {
		b = appendField(b, "principal", principal)
	}
	if heartbeatMS > 0 {
		b = append(b, `,"heartbeat_ms":`...)
		b = strconv.AppendInt(b, int64(heartbeatMS), 10)
	}
	b = append(b, `,"limits":{"max_frame_bytes":`...)
	b = strconv.AppendInt(b, int64(l.MaxFrameBytes), 10)
	b = append(b, `,"max_subscriptions":`...)
	b = strconv.AppendInt(b, int64(l.MaxSubscriptions), 10)
	b = append(b, `,"frame_rate":`...)
	b = strconv.AppendInt(b, int64(l.FrameRate), 10)
	b = append(b, `,"frame_burst":`...)
	b = strconv.AppendInt(b, int64(l.FrameBurst), 10)
	b = appendChannelLimits(b, l.ChannelLimits)
	return append(b, '}', '}')
}

// CaughtUp encodes the marker that ends a subscription's catch-up.
func CaughtUp(id, cursor string) []byte {
	b := appendFrameStart(nil, FrameCaughtUp)
	b = appendField(b, "id", id)
	b = appendField(b, "cursor", cursor)
	return append(b, '}')
}

// Reset encodes a reset of subscription id. An empty id is the polling
// form, where the request names the subscription.
func Reset(id string, reason ResetReason) []byte {
	b := appendFrameStart(nil, FrameReset)
	if id != "" {
		b = appendField(b, "id", id)
	}
	b = appendField(b, "reason", string(reason))
	return append(b, '}')
}

// ErrorFrame encodes e as an error frame; id names the subscription it is
// about, or is empty for an error about the connection.
func ErrorFrame(id string, e *Error) []byte {
	b := appendFrameStart(nil, FrameError)
	if id != "" {
		b = appendField(b, "id", id)
	}
	b = appendCodeMessage(b, e)
	return append(b, '}')
}

// appendCodeMessage appends e's code, message and, when set, detail.
func appendCodeMessage(b []byte, e *Error) []byte {
	b = appendField(b, "code", string(e.Code))
	b = appendField(b, "message", e.Message)
	if e.Detail != "" {
		b = appendField(b, "detail", e.Detail)
	}
	return b
}

// Ping encodes the server's heartbeat, which a client answers with pong.
func Ping() []byte { return append(appendFrameStart(nil, FramePing), '}') }

// UpdateAvailable encodes the notice that the server runs another build.
func UpdateAvailable(build string) []byte {
	b := appendFrameStart(nil, FrameUpdateAvailable)
	b = appendField(b, "build", build)
	return append(b, '}')
}

// RefreshToken encodes the request for a fresh token, expiresIn seconds
// before the current one expires.
func RefreshToken(expiresIn int) []byte {
	b := appendFrameStart(nil, FrameRefreshToken)
	b = append(b, `,"expires_in":`...)
	b = strconv.AppendInt(b, int64(expiresIn), 10)
	return append(b, '}')
}

// AppendChangesStart begins a changes frame; entries (AppendEntry, comma
// separated) follow, then AppendChangesEnd. idJSON is the subscription id,
// already JSON-encoded (subscriptions keep it so).
func AppendChangesStart(b, idJSON []byte, cursor string) []byte {
	b = appendFrameStart(b, FrameChanges)
	b = append(b, `,"id":`...)
	b = append(b, idJSON...)
	b = appendField(b, "cursor", cursor)
	return append(b, `,"entries":[`...)
}

// AppendPollStart begins the changes frame of a polling response, which
// names no subscription and says whether more pages are ready.
func AppendPollStart(b []byte, cursor string, more bool) []byte {
	b = appendFrameStart(b, FrameChanges)
	b = appendField(b, "cursor", cursor)
	if more {
		b = append(b, `,"more":true`...)
	} else {
		b = append(b, `,"more":false`...)
	}
	return append(b, `,"entries":[`...)
}

// AppendChangesEnd ends a changes frame.
func AppendChangesEnd(b []byte) []byte { return append(b, ']', '}') }

// AppendLiveChangesStart is AppendChangesStart with a change cursor built
// in place, for the live path where a frame must not allocate.
func AppendLiveChangesStart(b, idJSON []byte, epoch string, pos uint64) []byte {
	b = appendFrameStart(b, FrameChanges)
	b = append(b, `,"id":`...)
	b = append(b, idJSON...)
	b = append(b, `,"cursor":"`...)
	b = AppendCursor(b, epoch, pos)
	return append(b, `","entries":[`...)
}

// AppendEntry appends one entry of a changes frame. row is nil for a
// delete; origin is omitted when empty.
func AppendEntry(b []byte, op, key string, row json.RawMessage, origin string) []byte {
	b = append(b, `{"op":"`...)
	b = append(b, op...)
	b = append(b, `","key":`...)
	b = jsontext.AppendString(b, key)
	if row != nil {
		b = append(b, `,"row":`...)
		b = append(b, row...)
	}
	if origin != "" {
		b = appendField(b, "origin", origin)
	}
	return append(b, '}')
}

// Ack encodes the server's answer to an applied mutation: its key, the
// cursor at or after every change it wrote, and the entries of the rows it
// wrote (comma-separated AppendEntry output, possibly empty). replayed says
// the key had been applied before and this is its recorded result.
func Ack(key, cursor string, entries []byte, replayed bool) []byte {
	b := appendFrameStart(make([]byte, 0, len(entries)+len(key)+len(cursor)+64), FrameAck)
	b = appendField(b, "key", key)
	b = appendField(b, "cursor", cursor)
	if replayed {
		b = append(b, `,"replayed":true`...)
	}
	b = append(b, `,"entries":[`...)
	b = append(b, entries...)
	return append(b, ']', '}')
}

// Reject encodes the refusal of a mutation: nothing it would have written
// was written.
func Reject(key string, e *Error) []byte {
	b := appendFrameStart(nil, FrameReject)
	b = appendField(b, "key", key)
	b = appendCodeMessage(b, e)
	return append(b, '}')
}
