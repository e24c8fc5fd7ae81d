package middleware

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
	"github.com/tidesync/tide/internal/text"
	"github.com/tidesync/tide/internal/transport"
)

// maxPollBody bounds a poll request body.
const maxPollBody = 64 << 10

// handler serves tide's routes for one engine.
type handler struct {
	e          *core.Engine
	o          options
	upgrader   websocket.Upgrader
	wsPath     string
	pollPath   string
	mutPath    string
	jsPath     string
	tokenPath  string       // "" without WithTokenEndpoint
	statusPath string       // "" without WithStatusPage
	tokens     http.Handler // the token endpoint, if any
}

// writeBuffers is shared by every connection: a write buffer is held only
// while a message is being written, so idle connections cost none.
var writeBuffers = &sync.Pool{}

func newHandler(e *core.Engine, o options) *handler {
	h := &handler{
		e: e,
		o: o,
		upgrader: websocket.Upgrader{
			ReadBufferSize:  256, // client frames are small; larger payloads bypass the buffer
			WriteBufferSize: 4096,
			WriteBufferPool: writeBuffers,
		},
		wsPath:   o.prefix + "/ws",
		pollPath: o.prefix + "/changes",
		mutPath:  o.prefix + "/mutate",
		jsPath:   o.prefix + "/client.js",
	}
	// serveWS checks the origin before upgrading, to answer with an error
	// frame; the upgrader checks again, so no path skips the check.
	h.upgrader.CheckOrigin = h.o.originAllowed
	h.upgrader.Error = upgradeError
	if o.status != nil {
		h.statusPath = o.prefix + "/status"
	}
	if o.keyring != nil {
		h.tokenPath = o.prefix + "/token"
		h.tokens = &tokenHandler{kr: o.keyring, o: &h.o}
	}
	return h
}

// owns reports whether the request is for one of tide's routes.
func (h *handler) owns(r *http.Request) bool {
	return r.URL.Path == h.wsPath || r.URL.Path == h.pollPath || r.URL.Path == h.mutPath || r.URL.Path == h.jsPath ||
		(h.tokenPath != "" && r.URL.Path == h.tokenPath) || (h.statusPath != "" && (r.URL.Path == h.statusPath || h.isInspect(r)))
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case h.wsPath:
		h.serveWS(w, r)
	case h.pollPath:
		h.servePoll(w, r)
	case h.mutPath:
		h.serveMutate(w, r)
	case h.jsPath:
		serveClientJS(w, r)
	case h.tokenPath:
		if h.tokens == nil {
			http.NotFound(w, r)
			return
		}
		h.tokens.ServeHTTP(w, r)
	case h.statusPath:
		if h.statusPath == "" {
			http.NotFound(w, r)
			return
		}
		h.serveStatus(w, r)
	default:
		if h.isInspect(r) {
			h.serveInspect(w, r) // inspect.go
			return
		}
		http.NotFound(w, r)
	}
}

func (h *handler) serveWS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, &protocol.Error{Code: protocol.CodeBadFrame, Message: "the WebSocket endpoint takes GET"})
		return
	}
	if h.e.Draining() {
		writeError(w, http.StatusServiceUnavailable, core.ErrDraining)
		return
	}
	if _, ok := w.(http.Hijacker); !ok {
		writeError(w, http.StatusInternalServerError, &protocol.Error{Code: protocol.CodeInternal, Message: cannotHijack})
		return
	}
	if !h.o.originAllowed(r) {
		refuseOrigin(w, r) // cross-site WebSocket hijacking of the user's cookie
		return
	}
	p, err := h.o.principal(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, &protocol.Error{Code: protocol.CodeUnauthenticated, Message: err.Error()})
		return
	}
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered the request
	}
	_ = h.e.Accept(ws, p)
}

// readPost checks a POST to one of tide's HTTP routes (method, origin,
// principal, body size) and returns the principal and the body, or answers
// the request itself and reports false. Once it knows the principal, every
// answer carries PrincipalHeader. tooBig answers a body above maxPollBody,
// given its first maxPollBody bytes; nil: a 413 error.
func (h *handler) readPost(w http.ResponseWriter, r *http.Request, what string, tooBig func(w http.ResponseWriter, prefix []byte) bool) (authz.Principal, []byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, &protocol.Error{Code: protocol.CodeBadFrame, Message: "the " + what + " endpoint takes POST"})
		return authz.Principal{}, nil, false
	}
	if !h.o.originAllowed(r) {
		refuseOrigin(w, r) // a cross-site page posting with the user's cookie
		return authz.Principal{}, nil, false
	}
	p, err := h.o.principal(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, &protocol.Error{Code: protocol.CodeUnauthenticated, Message: err.Error()})
		return authz.Principal{}, nil, false
	}
	setPrincipalHeader(w.Header(), p)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPollBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, &protocol.Error{Code: protocol.CodeBadFrame, Message: "cannot read the request body"})
		return authz.Principal{}, nil, false
	}
	if len(body) > maxPollBody {
		if tooBig == nil || !tooBig(w, body[:maxPollBody]) {
			writeError(w, http.StatusRequestEntityTooLarge, &protocol.Error{Code: protocol.CodeFrameTooLarge, Message: "the request body is too large", Detail: bodyLimit})
		}
		return authz.Principal{}, nil, false
	}
	return p, body, true
}

func (h *handler) servePoll(w http.ResponseWriter, r *http.Request) {
	p, body, ok := h.readPost(w, r, "changes", nil)
	if !ok {
		return
	}
	// The poller's origin: entries it wrote carry it, as on a socket whose
	// hello named it; everyone else's come without theirs.
	origin := r.Header.Get(OriginHeader)
	if err := protocol.CheckText("origin", origin, protocol.MaxOriginLen); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var req protocol.PollRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, bodyError("poll request", err))
		return
	}
	out, err := transport.Of(h.e).Poll(r.Context(), p, origin, req)
	if err != nil {
		te := core.ErrorFor(err)
		writeError(w, statusFor(te.Code), te)
		return
	}
	writeFrame(w, http.StatusOK, out)
}

func (h *handler) serveMutate(w http.ResponseWriter, r *http.Request) {
	p, body, ok := h.readPost(w, r, "mutate", rejectTooBig)
	if !ok {
		return
	}
	// The origin scopes the mutation's idempotency key and tags the rows
	// it writes, as hello's origin does on a WebSocket.
	origin := r.Header.Get(OriginHeader)
	if err := protocol.CheckText("origin", origin, protocol.MaxOriginLen); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	var f protocol.ClientFrame
	if err := json.Unmarshal(body, &f); err != nil {
		writeError(w, http.StatusBadRequest, bodyError("mutate frame", err))
		return
	}
	routes := transport.Of(h.e)
	ctx := routes.ContinueTrace(r.Context(), r.Header.Get("traceparent"), r.Header.Get("tracestate"))
	out, rej := routes.Mutate(ctx, p, origin, f)
	status := http.StatusOK
	if rej != nil {
		status = statusFor(rej.Code)
	}
	writeFrame(w, status, out)
}

// bodyLimit is the detail of a refused body.
var bodyLimit = fmt.Sprintf("request bodies are limited to %d bytes", maxPollBody)

// rejectTooBig answers a mutate body above the limit with a reject for its
// key when its first bytes show one (as the WebSocket route does for a
// frame above its limit), so that the client settles that mutation. It
// reports false when they do not.
func rejectTooBig(w http.ResponseWriter, prefix []byte) bool {
	typ, key, ok := protocol.ScanFrameKey(prefix)
	if !ok || key == "" || (typ != "" && typ != protocol.FrameMutate) {
		return false
	}
	writeFrame(w, http.StatusRequestEntityTooLarge, protocol.Reject(text.Truncate(key, protocol.MaxKeyLen), &protocol.Error{
		Code: protocol.CodeFrameTooLarge, Message: "the change is too large", Detail: bodyLimit}))
	return true
}

// bodyError is the error of a body that does not decode as a what: its
// message says what is wrong in JSON's terms, never Go's.
func bodyError(what string, err error) *protocol.Error {
	msg := "the body is not a JSON " + what
	if m, ok := jsontext.DescribeError(err, "the body"); ok {
		msg += ": " + m
	}
	return &protocol.Error{Code: protocol.CodeBadFrame, Message: msg, Detail: err.Error()}
}

// writeFrame answers with a frame as the JSON body.
func writeFrame(w http.ResponseWriter, status int, frame []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(frame)
}

// cannotHijack names the usual cause of a failed takeover of the connection.
const cannotHijack = "the http.ResponseWriter cannot be hijacked for a WebSocket upgrade: remove timeout, gzip or other response-wrapping middleware from the tide route"

// upgradeError answers a refused upgrade with an error frame, like every
// other refusal. gorilla answers 500 when the connection cannot be taken
// over: a framework's response writer always has a Hijack method, and only
// calling it shows that what it wraps (an http.TimeoutHandler, say) cannot.
func upgradeError(w http.ResponseWriter, _ *http.Request, status int, reason error) {
	w.Header().Set("Sec-Websocket-Version", "13") // as gorilla's own answer, for clients of another version
	switch status {
	case http.StatusInternalServerError:
		writeError(w, status, &protocol.Error{Code: protocol.CodeInternal, Message: cannotHijack + " (" + reason.Error() + ")"})
	case http.StatusForbidden:
		writeError(w, status, &protocol.Error{Code: protocol.CodeForbidden, Message: reason.Error()})
	default:
		writeError(w, status, &protocol.Error{Code: protocol.CodeBadFrame, Message: reason.Error()})
	}
}

// statusFor maps a wire error code to an HTTP status.
func statusFor(code protocol.Code) int {
	switch code {
	case protocol.CodeUnauthenticated:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeUnknownResource, protocol.CodeUnknownMutator:
		return http.StatusNotFound
	case protocol.CodeConflict:
		return http.StatusConflict
	case protocol.CodeKeyExpired:
		return http.StatusGone
	case protocol.CodeMutatorFailed:
		return http.StatusUnprocessableEntity
	case protocol.CodeRateLimited:
		return http.StatusTooManyRequests
	case protocol.CodeFrameTooLarge:
		return http.StatusRequestEntityTooLarge
	case protocol.CodeDraining, protocol.CodeUnavailable, protocol.CodeNotMigrated, protocol.CodeNotCaptured:
		return http.StatusServiceUnavailable
	case protocol.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// writeError answers with an error frame as the JSON body.
func writeError(w http.ResponseWriter, status int, e *protocol.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	body, _ := json.Marshal(struct {
		V       int           `json:"v"`
		Type    string        `json:"type"`
		Code    protocol.Code `json:"code"`
		Message string        `json:"message"`
		Detail  string        `json:"detail,omitempty"`
	}{protocol.Version, protocol.FrameError, e.Code, e.Message, e.Detail})
	_, _ = w.Write(body)
}
