package client

import (
	"fmt"
	"time"

	"github.com/tidesync/tide/core/protocol"
)

// EventKind says what an Event reports.
type EventKind string

// EventConnected: the server answered hello with welcome and every
// scope has been subscribed. Build is the server's build id.
const EventConnected EventKind = "connected"

// EventConnectFailed: a connection attempt ended before welcome (dial,
// token or handshake failure, or a close before welcome). Err says why;
// Attempt and Delay give the retry (Delay 0 when Run returns instead).
const EventConnectFailed EventKind = "connect-failed"

// EventDisconnected: an established connection ended. Err and, when the
// server closed it, CloseCode and Reason say why; Attempt and Delay give
// the retry (Delay 0 when Run returns instead).
const EventDisconnected EventKind = "disconnected"

// EventUpdateAvailable: the server's build (Build) differs from
// Config.Build; reload or update when convenient.
const EventUpdateAvailable EventKind = "update-available"

// EventServerError: the server sent an error frame. Code, Message and
// Detail are the frame's; for an error about a subscription, Scope and
// SubscriptionID name it and the subscription has ended (see Client for
// what the client does next).
const EventServerError EventKind = "server-error"

// EventCaughtUp: a catch-up of Scope ended and was applied; Cursor is
// the caught-up cursor.
const EventCaughtUp EventKind = "caught-up"

// EventReset: the server reset Scope (Reason) and the handler dropped
// its copy; a snapshot follows.
const EventReset EventKind = "reset"

// EventApplyError: the handler of Scope returned Err. Nothing was
// persisted; the connection is dropped and the scope resumes from its
// stored cursor.
const EventApplyError EventKind = "apply-error"

// EventProtocolError: the server sent something the client cannot use
// (Err): a malformed frame, an entry of an unknown resource, a changes
// frame without a cursor. The connection is dropped.
const EventProtocolError EventKind = "protocol-error"

// EventStoreError: the CursorStore failed (Err). The connection is
// dropped so nothing is applied without being recorded.
const EventStoreError EventKind = "store-error"

// EventTokenRefreshed: the server asked for a fresh token and the client
// sent one.
const EventTokenRefreshed EventKind = "token-refreshed"

// EventTokenError: Config.Token failed (Err), for hello or when the
// server asked for a fresh token, or returned the token already in use
// (ErrSameToken). It is retried with backoff (Attempt, Delay for a
// refresh); Run goes on.
const EventTokenError EventKind = "token-error"

// EventMutationRejected: the mutation Key was rejected with Code,
// Message and Detail, and its local change rolled back; except for
// unavailable, draining and rate_limited, after which the client resends
// it. The rejection is the server's, or the client's own for a queued
// mutation that can never be delivered: frame_too_large (its frame exceeds the
// limit the server announced since it was queued) or CodeUndeliverable
// (the server closed the connection each of five times it was sent).
const EventMutationRejected EventKind = "mutation-rejected"

// EventMutationConflict: the Strategy of the mutation Key reported a
// conflict (Err, a *ConflictError); the server's row landed.
const EventMutationConflict EventKind = "mutation-conflict"

// Event reports something that happened to a client's connection or one of
// its subscriptions, for tests, logs and UIs (Config.OnEvent). Fields not
// relevant to the Kind are zero.
type Event struct {
	Kind           EventKind
	Scope          Scope              // the scope concerned, if any
	SubscriptionID string             // the subscription concerned, if any
	Code           protocol.Code      // EventServerError, EventMutationRejected
	Message        string             // EventServerError, EventMutationRejected: short, fit to show a person
	Detail         string             // EventServerError, EventMutationRejected: for developers and logs
	Reason         string             // EventReset; EventDisconnected: the close reason
	Build          string             // EventConnected, EventUpdateAvailable
	Cursor         string             // EventCaughtUp
	Key            string             // EventMutationRejected, EventMutationConflict: the mutation's key
	CloseCode      protocol.CloseCode // EventDisconnected, EventConnectFailed: the server's close code, if it sent one
	Err            error
	Attempt        int           // EventDisconnected, EventConnectFailed: the retry attempt (0 first)
	Delay          time.Duration // EventDisconnected, EventConnectFailed: the wait before reconnecting
}

// String formats the event for logs.
func (e Event) String() string {
	s := string(e.Kind)
	if e.Scope.Resource != "" {
		s += " " + e.Scope.String()
	}
	if e.SubscriptionID != "" {
		s += " id=" + e.SubscriptionID
	}
	if e.Key != "" {
		s += " key=" + e.Key
	}
	if e.Code != "" {
		s += fmt.Sprintf(" code=%s %q", e.Code, e.Message)
	}
	if e.CloseCode != 0 {
		s += fmt.Sprintf(" close=%d", int(e.CloseCode))
	}
	if e.Reason != "" {
		s += fmt.Sprintf(" reason=%q", e.Reason)
	}
	if e.Build != "" {
		s += " build=" + e.Build
	}
	if e.Err != nil {
		s += " err=" + e.Err.Error()
	}
	if e.Delay != 0 {
		s += fmt.Sprintf(" retry=%d in %v", e.Attempt, e.Delay)
	}
	return s
}
