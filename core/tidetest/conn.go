package tidetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core/protocol"
)

// DefaultTimeout bounds every read of a Conn unless WithTimeout says
// otherwise. It is generous on purpose: it only trips when a test hangs, and
// is never an assertion about speed.
const DefaultTimeout = 30 * time.Second

// probeID is the subscription id Probe unsubscribes; no test should use it.
const probeID = "tidetest.probe"

// TB is the part of testing.TB that tidetest uses: *testing.T, *testing.B
// and *testing.F satisfy it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Option configures Dial and TryDial.
type Option func(*config)

type config struct {
	header    http.Header
	timeout   time.Duration
	dialer    *websocket.Dialer
	noCleanup bool
	pings     bool
}

// WithHeader adds values for key to the upgrade request's headers, standing
// in for an app's session (a cookie, or headers a principal hook reads).
// An empty values list adds nothing.
func WithHeader(key string, values ...string) Option {
	return func(c *config) {
		for _, v := range values {
			c.header.Add(key, v)
		}
	}
}

// WithHeaders adds every value of h to the upgrade request's headers.
func WithHeaders(h http.Header) Option {
	return func(c *config) {
		for k, vs := range h {
			for _, v := range vs {
				c.header.Add(k, v)
			}
		}
	}
}

// WithTimeout replaces DefaultTimeout as the bound on each read. Zero or
// less removes the bound: a read then blocks until a frame arrives or the
// connection ends.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithDialer dials with d instead of websocket.DefaultDialer.
func WithDialer(d *websocket.Dialer) Option {
	return func(c *config) { c.dialer = d }
}

// WithPingFrames makes the reads return the server's heartbeat ping frames.
// Without it they skip them, as a client's transport would, so that a test
// reading a sequence of frames is not disturbed by a heartbeat falling
// between them.
func WithPingFrames() Option {
	return func(c *config) { c.pings = true }
}

// WithoutCleanup leaves closing the connection to the caller instead of
// registering Close with t.Cleanup. It is for a connection that outlives the
// test that dialed it, such as one a fuzz target shares across its inputs
// (see Conn.For).
func WithoutCleanup() Option {
	return func(c *config) { c.noCleanup = true }
}

// Conn is a wire-level client of a tide endpoint for tests: it sends client
// frames as given and decodes what the server sends with
// protocol.DecodeServerFrame, so a test asserts on the protocol itself.
//
// Methods that read (Next, Expect and the rest) block until a frame arrives,
// for at most the connection's timeout (DefaultTimeout unless WithTimeout
// says otherwise); a read error, a timeout or an undecodable frame fails the
// test with t.Fatal. They must be called from the test's goroutine, one at a
// time. ReadFrame is the exception: it reports errors instead, for readers
// on their own goroutine.
type Conn struct {
	t       TB
	ws      *websocket.Conn
	timeout time.Duration
	pings   bool // return ping frames (WithPingFrames)
	close   *sync.Once
}

// Dial opens a WebSocket to url (ws:// or wss://) and returns it as a Conn
// whose failures are reported to t. It does not send hello. A failed dial
// fails the test. The connection is closed by t.Cleanup, unless
// WithoutCleanup is given, so nothing outlives the test.
func Dial(t TB, url string, opts ...Option) *Conn {
	t.Helper()
	c, resp, err := TryDial(t, url, opts...)
	if err != nil {
		status := ""
		if resp != nil {
			status = " (HTTP " + resp.Status + ")"
		}
		t.Fatalf("tidetest: dial %s: %v%s", url, err, status)
	}
	return c
}

// TryDial is Dial for tests about the upgrade itself: it reports a failed
// dial, with the server's HTTP response if there was one, instead of
// failing the test. On success the Conn is as Dial's and resp is the
// upgrade response.
func TryDial(t TB, url string, opts ...Option) (c *Conn, resp *http.Response, err error) {
	t.Helper()
	cfg := config{header: http.Header{}, timeout: DefaultTimeout, dialer: websocket.DefaultDialer}
	for _, o := range opts {
		o(&cfg)
	}
	ws, resp, err := cfg.dialer.Dial(url, cfg.header)
	if err != nil {
		return nil, resp, err
	}
	c = &Conn{t: t, ws: ws, timeout: cfg.timeout, pings: cfg.pings, close: new(sync.Once)}
	if !cfg.noCleanup {
		t.Cleanup(c.Close)
	}
	return c, resp, nil
}

// For returns a Conn on the same connection that reports failures to t: for
// a connection shared by subtests, or by the inputs of a fuzz target.
func (c *Conn) For(t TB) *Conn {
	d := *c
	d.t = t
	return &d
}

// Timeout returns a Conn on the same connection whose reads are bounded by
// d instead; zero or less removes the bound, for a reader that waits on its
// own goroutine for as long as the connection lives.
func (c *Conn) Timeout(d time.Duration) *Conn {
	e := *c
	e.timeout = d
	return &e
}

// WebSocket returns the underlying connection, for what the protocol's
// frames cannot express (ping handlers, binary messages, raw reads in a
// benchmark loop). Reads and writes on it bypass the Conn.
func (c *Conn) WebSocket() *websocket.Conn { return c.ws }

// Close closes the connection at once, without a close handshake, as when
// a network drops. It does not block and may be called more than once.
func (c *Conn) Close() {
	c.close.Do(func() { _ = c.ws.Close() })
}

// Send writes one text message. A string, []byte or json.RawMessage is sent
// as is (it need not be valid JSON); anything else, such as a
// protocol.ClientFrame, is encoded with encoding/json. A failed write fails
// the test.
func (c *Conn) Send(frame any) {
	c.t.Helper()
	var data []byte
	switch f := frame.(type) {
	case string:
		data = []byte(f)
	case []byte:
		data = f
	case json.RawMessage:
		data = f
	default:
		var err error
		if data, err = json.Marshal(f); err != nil {
			c.t.Fatalf("tidetest: encode %T: %v", frame, err)
		}
	}
	c.SendMessage(websocket.TextMessage, data)
}

// SendMessage writes one message of the given WebSocket type
// (websocket.TextMessage or websocket.BinaryMessage). A failed write fails
// the test.
func (c *Conn) SendMessage(messageType int, data []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(messageType, data); err != nil {
		c.t.Fatalf("tidetest: write %.200s: %v", data, err)
	}
}

// Hello sends a hello frame (h with v and type filled in; the zero value is
// a plain hello) and expects welcome, which it returns. Any other answer
// fails the test; for a hello that should be refused, Send it and use
// ExpectErrorClose.
func (c *Conn) Hello(h protocol.ClientFrame) protocol.ServerFrame {
	c.t.Helper()
	c.Send(HelloFrame(h))
	return c.Expect(protocol.FrameWelcome)
}

// HelloFrame returns h as a hello frame: with the protocol version and the
// hello type filled in.
func HelloFrame(h protocol.ClientFrame) protocol.ClientFrame {
	h.V, h.Type = protocol.Version, protocol.FrameHello
	return h
}

// Subscribe sends a subscribe frame for id on resource, with conditions
// (nil for the whole resource) encoded with encoding/json. It does not wait
// for an answer: use Collect, ExpectErrorFor or Expect.
func (c *Conn) Subscribe(id, resource string, conditions map[string]any) {
	c.t.Helper()
	c.SubscribeFrom(id, resource, conditions, "")
}

// SubscribeFrom is Subscribe with a cursor, to resume ("" for none).
func (c *Conn) SubscribeFrom(id, resource string, conditions map[string]any, cursor string) {
	c.t.Helper()
	f := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameSubscribe, ID: id, Resource: resource, Cursor: cursor}
	if conditions != nil {
		f.Conditions = make(map[string]json.RawMessage, len(conditions))
		for k, v := range conditions {
			b, err := json.Marshal(v)
			if err != nil {
				c.t.Fatalf("tidetest: encode condition %s: %v", k, err)
			}
			f.Conditions[k] = b
		}
	}
	c.Send(f)
}

// Unsubscribe sends an unsubscribe frame for id. It does not wait.
func (c *Conn) Unsubscribe(id string) {
	c.t.Helper()
	c.Send(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameUnsubscribe, ID: id})
}

// Refresh sends a refresh frame with token. It does not wait.
func (c *Conn) Refresh(token string) {
	c.t.Helper()
	c.Send(protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameRefresh, Token: token})
}

// ReadFrame reads one message and decodes it. It blocks for at most the
// connection's timeout and, unlike the other reads, fails nothing: it
// returns the frame, the message as received, and any read or decode error
// (a *websocket.CloseError when the server closed the connection). It is
// safe to call from a goroutine other than the test's, one reader at a
// time. Like every read it skips ping frames unless the Conn was dialed
// WithPingFrames.
func (c *Conn) ReadFrame() (protocol.ServerFrame, []byte, error) {
	for {
		f, data, err := c.readFrame()
		if err != nil || c.pings || f.Type != protocol.FramePing {
			return f, data, err
		}
	}
}

func (c *Conn) readFrame() (protocol.ServerFrame, []byte, error) {
	if c.timeout > 0 {
		_ = c.ws.SetReadDeadline(time.Now().Add(c.timeout))
	}
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		return protocol.ServerFrame{}, nil, err
	}
	if c.timeout > 0 {
		_ = c.ws.SetReadDeadline(time.Time{}) // the bound is per read
	}
	f, err := protocol.DecodeServerFrame(data)
	if err != nil {
		return f, data, fmt.Errorf("tidetest: undecodable frame %.500s: %w", data, err)
	}
	return f, data, nil
}

// Next reads the next frame. It blocks up to the timeout; a read error
// (the connection closing included), a timeout or an undecodable frame
// fails the test.
func (c *Conn) Next() protocol.ServerFrame {
	c.t.Helper()
	f, data, err := c.ReadFrame()
	switch {
	case data != nil && err != nil:
		c.t.Fatalf("%v", err)
	case err != nil && isTimeout(err):
		c.t.Fatalf("tidetest: no frame within %v (a hang: the bound is not a timing assertion): %v", c.timeout, err)
	case err != nil:
		c.t.Fatalf("tidetest: read: %v", err)
	}
	return f
}

// Expect reads the next frame and fails the test unless it has type typ
// (a protocol.Frame* constant). It returns the frame.
func (c *Conn) Expect(typ string) protocol.ServerFrame {
	c.t.Helper()
	f := c.Next()
	if f.Type != typ {
		c.t.Fatalf("tidetest: got %s frame %+v, want %s", f.Type, f, typ)
	}
	return f
}

// ExpectError reads the next frame and fails the test unless it is an
// error frame with code, whatever its id. It returns the frame.
func (c *Conn) ExpectError(code protocol.Code) protocol.ServerFrame {
	c.t.Helper()
	f := c.Expect(protocol.FrameError)
	if f.Code != code {
		c.t.Fatalf("tidetest: got error %+v, want code %s", f, code)
	}
	return f
}

// ExpectErrorFor reads the next frame and fails the test unless it is an
// error frame with code about subscription id ("" for the connection). It
// returns the frame.
func (c *Conn) ExpectErrorFor(id string, code protocol.Code) protocol.ServerFrame {
	c.t.Helper()
	f := c.Expect(protocol.FrameError)
	if f.Code != code || f.ID != id {
		c.t.Fatalf("tidetest: got error %+v, want %s for id %q", f, code, id)
	}
	return f
}

// ExpectClose reads until the connection ends and fails the test unless the
// server closed it with closeCode, with no frame before the close. It
// blocks up to the timeout.
func (c *Conn) ExpectClose(closeCode protocol.CloseCode) {
	c.t.Helper()
	f, data, err := c.ReadFrame()
	switch {
	case err == nil || data != nil:
		c.t.Fatalf("tidetest: got frame %s (%+v), want close %d", data, f, closeCode)
	case !websocket.IsCloseError(err, int(closeCode)):
		c.t.Fatalf("tidetest: want close %d (%s), got %v", closeCode, closeCode, err)
	}
}

// ExpectErrorClose expects what the server sends when it ends a
// connection: a connection-level error frame (no id) with code, then the
// close with closeCode. It fails the test otherwise, and returns the error
// frame.
func (c *Conn) ExpectErrorClose(code protocol.Code, closeCode protocol.CloseCode) protocol.ServerFrame {
	c.t.Helper()
	f := c.Expect(protocol.FrameError)
	if f.Code != code || f.ID != "" {
		c.t.Fatalf("tidetest: error %+v, want connection-level %s", f, code)
	}
	c.ExpectClose(closeCode)
	return f
}

// Collect reads the catch-up of subscription id: changes frames up to
// caught-up. It returns their entries in order and the caught-up cursor. A
// frame of another type or for another id fails the test, so Collect also
// proves nothing else arrived meanwhile.
func (c *Conn) Collect(id string) ([]protocol.Entry, string) {
	c.t.Helper()
	var entries []protocol.Entry
	for {
		f := c.Next()
		if f.ID != id {
			c.t.Fatalf("tidetest: frame for %q, want %q: %+v", f.ID, id, f)
		}
		switch f.Type {
		case protocol.FrameChanges:
			entries = append(entries, f.Entries...)
		case protocol.FrameCaughtUp:
			return entries, f.Cursor
		default:
			c.t.Fatalf("tidetest: collecting %q: unexpected %+v", id, f)
		}
	}
}

// Probe proves the server has handled every frame sent so far and queued
// nothing else meanwhile: it unsubscribes an id no test uses and expects
// the next frame to be the unknown_subscription error for it. Any other
// frame fails the test.
func (c *Conn) Probe() {
	c.t.Helper()
	c.Unsubscribe(probeID)
	if f := c.Next(); f.Type != protocol.FrameError || f.Code != protocol.CodeUnknownSub || f.ID != probeID {
		c.t.Fatalf("tidetest: probe answered by %+v", f)
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
