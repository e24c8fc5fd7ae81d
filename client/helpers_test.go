package client

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/middleware"
)

// failAfter bounds every wait in these tests. It is a failure bound only:
// no test relies on timing to pass.
const failAfter = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// ---- handler that records batches ----

// recorder is a Handler that records every batch it accepts and forwards it
// to a testRows. hook, if set, runs first and may fail the apply.
type recorder struct {
	mirror testRows
	hook   func(Batch) error // runs on the client's apply goroutine

	mu       sync.Mutex
	batches  []Batch
	failures int
	changed  chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) Apply(ctx context.Context, b Batch) error {
	if r.hook != nil {
		if err := r.hook(b); err != nil {
			r.mu.Lock()
			r.failures++
			r.mu.Unlock()
			return err
		}
	}
	// The mirror and the record change under one lock: a test that saw
	// the mirror change and then reads the record finds the batch there.
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.mirror.Apply(ctx, b)
	b.Entries = slices.Clone(b.Entries)
	r.batches = append(r.batches, b)
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

func (r *recorder) all() []Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func (r *recorder) failureCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}

// wait blocks until ok holds for the recorded batches, failing the test at
// the context's deadline.
func (r *recorder) wait(ctx context.Context, t *testing.T, what string, ok func([]Batch) bool) []Batch {
	t.Helper()
	for {
		r.mu.Lock()
		bs := slices.Clone(r.batches)
		ch := r.changed
		r.mu.Unlock()
		if ok(bs) {
			return bs
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; batches so far:\n%s", what, describeBatches(bs))
		}
	}
}

func countCaughtUp(bs []Batch) int {
	n := 0
	for _, b := range bs {
		if b.CaughtUp {
			n++
		}
	}
	return n
}

func hasKey(bs []Batch, key string) bool {
	for _, b := range bs {
		for _, e := range b.Entries {
			if e.Key == key {
				return true
			}
		}
	}
	return false
}

func describeBatches(bs []Batch) string {
	var sb strings.Builder
	for i, b := range bs {
		keys := make([]string, len(b.Entries))
		for j, e := range b.Entries {
			keys[j] = e.Op[:1] + ":" + e.Key
		}
		sb.WriteString(strings.Join([]string{"  #", itoa(i), " reset=", boolText(b.Reset), " caughtUp=", boolText(b.CaughtUp), " cursor=", b.Cursor, " entries=", strings.Join(keys, ","), "\n"}, ""))
	}
	return sb.String()
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
func boolText(b bool) string {
	if b {
		return "T"
	}
	return "f"
}

// ---- event log ----

type eventLog struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

func (l *eventLog) count(kind EventKind) int {
	n := 0
	for _, e := range l.all() {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func (l *eventLog) wait(ctx context.Context, t *testing.T, what string, ok func([]Event) bool) []Event {
	t.Helper()
	for {
		l.mu.Lock()
		es := slices.Clone(l.events)
		ch := l.changed
		l.mu.Unlock()
		if ok(es) {
			return es
		}
		select {
		case <-ch:
		case <-ctx.Done():
			var sb strings.Builder
			for _, e := range es {
				sb.WriteString("  " + e.String() + "\n")
			}
			t.Fatalf("timed out waiting for %s; events so far:\n%s", what, sb.String())
		}
	}
}

// waitKind waits until at least n events of kind were reported and returns
// the events of that kind.
func (l *eventLog) waitKind(ctx context.Context, t *testing.T, kind EventKind, n int) []Event {
	t.Helper()
	of := func(es []Event) []Event {
		var out []Event
		for _, e := range es {
			if e.Kind == kind {
				out = append(out, e)
			}
		}
		return out
	}
	return of(l.wait(ctx, t, itoa(n)+" "+string(kind)+" events", func(es []Event) bool { return len(of(es)) >= n }))
}

// ---- client harness ----

// newTestClient returns a client for url with fast backoff and an event
// log; cfg's other fields are kept.
func newTestClient(t *testing.T, cfg Config) (*Client, *eventLog) {
	t.Helper()
	log := newEventLog()
	prev := cfg.OnEvent
	cfg.OnEvent = func(e Event) {
		log.add(e)
		if prev != nil {
			prev(e)
		}
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 20 * time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, log
}

// runHandle is a running Client.Run.
type runHandle struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs c until the test ends (or stop).
func start(t *testing.T, c *Client) *runHandle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &runHandle{cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- c.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

// stop cancels Run and returns its result.
func (h *runHandle) stop(t *testing.T) error {
	t.Helper()
	h.cancel()
	select {
	case err := <-h.done:
		h.done <- err // keep it for a later stop
		return err
	case <-time.After(failAfter):
		t.Fatalf("Run did not return after its context was cancelled")
		return nil
	}
}

// result waits for Run to return on its own.
func (h *runHandle) result(ctx context.Context, t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-ctx.Done():
		t.Fatalf("Run did not return")
		return nil
	}
}

// ---- a real tide server ----

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
	Done      bool   `tide:"done"`
}

type realServer struct {
	engine *core.Engine
	todos  *core.Table[todo]
	url    string
}

// newRealServer serves a fresh engine (cfg.Feed, in memory by default)
// with a "todos" resource anyone may subscribe to, on a loopback httptest
// server.
func newRealServer(t *testing.T, cfg core.Config) *realServer {
	t.Helper()
	return newRealServerWith(t, cfg, authz.Allow)
}

// headerPrincipal identifies the caller by the X-User request header:
// anonymous without one.
func headerPrincipal(r *http.Request) (authz.Principal, error) {
	return authz.Principal{ID: r.Header.Get("X-User")}, nil
}

// newRealServerWith is newRealServer with the todos' policy and the
// middleware's options (middleware.WithPrincipal(headerPrincipal), say).
func newRealServerWith(t *testing.T, cfg core.Config, policy authz.Policy, opts ...middleware.Option) *realServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	tbl, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: policy})
	if err != nil {
		t.Fatalf("core.Register: %v", err)
	}
	srv := httptest.NewServer(middleware.Middleware(e, opts...)(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("engine Shutdown: %v", err)
		}
		srv.Close()
	})
	return &realServer{engine: e, todos: tbl, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"}
}

func (s *realServer) upsert(t *testing.T, ctx context.Context, rows ...todo) {
	t.Helper()
	if err := s.todos.Upsert(ctx, rows...); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

func (s *realServer) delete(t *testing.T, ctx context.Context, rows ...todo) {
	t.Helper()
	if err := s.todos.Delete(ctx, rows...); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func (s *realServer) head(t *testing.T) protocol.Cursor {
	t.Helper()
	pos, err := s.engine.Feed().Head(context.Background())
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return protocol.Cursor{Epoch: s.engine.Feed().Epoch(), Pos: uint64(pos)}
}

// decodeRows decodes a testRows's rows.
func decodeRows(t *testing.T, rows map[string]json.RawMessage) map[string]todo {
	t.Helper()
	out := make(map[string]todo, len(rows))
	for k, raw := range rows {
		td, err := protocol.DecodeRow[todo](raw)
		if err != nil {
			t.Fatalf("DecodeRow %s: %v", raw, err)
		}
		out[k] = td
	}
	return out
}

// gate holds new TCP connections while closed, to keep a client
// disconnected for as long as a test needs.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

func (g *gate) dialer() *websocket.Dialer {
	return &websocket.Dialer{
		HandshakeTimeout: failAfter,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			g.mu.Lock()
			ch := g.ch
			g.mu.Unlock()
			if ch != nil {
				select {
				case <-ch:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// ---- a scripted fake server, for exact frame sequences ----

type fakeServer struct {
	url   string
	conns chan *fakeConn

	mu  sync.Mutex
	all []*fakeConn
}

type clientMsg struct {
	frame protocol.ClientFrame
	raw   []byte
	err   *protocol.Error // the frame is invalid per protocol.DecodeClientFrame
}

type fakeConn struct {
	ws     *websocket.Conn
	header http.Header
	msgs   chan clientMsg // closed when the client's side ends
	pongs  chan string
	wmu    sync.Mutex
	endErr error // why reading ended; set before msgs is closed
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	fs := &fakeServer{conns: make(chan *fakeConn, 16)}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		fc := &fakeConn{ws: ws, header: r.Header.Clone(), msgs: make(chan clientMsg, 1024), pongs: make(chan string, 16)}
		ws.SetPongHandler(func(data string) error {
			select {
			case fc.pongs <- data:
			default:
			}
			return nil
		})
		fs.mu.Lock()
		fs.all = append(fs.all, fc)
		fs.mu.Unlock()
		go fc.readLoop()
		fs.conns <- fc
	}))
	t.Cleanup(func() {
		fs.mu.Lock()
		for _, fc := range fs.all {
			_ = fc.ws.Close()
		}
		fs.mu.Unlock()
		srv.Close()
	})
	fs.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws"
	return fs
}

func (fc *fakeConn) readLoop() {
	defer close(fc.msgs)
	for {
		_, data, err := fc.ws.ReadMessage()
		if err != nil {
			fc.endErr = err
			return
		}
		f, ferr := protocol.DecodeClientFrame(data)
		fc.msgs <- clientMsg{frame: f, raw: data, err: ferr}
	}
}

// accept returns the next connection the client opens.
func (fs *fakeServer) accept(ctx context.Context, t *testing.T) *fakeConn {
	t.Helper()
	select {
	case fc := <-fs.conns:
		return fc
	case <-ctx.Done():
		t.Fatalf("timed out waiting for the client to connect")
		return nil
	}
}

// next returns the client's next frame, which must be valid.
func (fc *fakeConn) next(ctx context.Context, t *testing.T) protocol.ClientFrame {
	t.Helper()
	select {
	case m, ok := <-fc.msgs:
		if !ok {
			t.Fatalf("the client closed the connection while a frame was expected")
		}
		if m.err != nil {
			t.Fatalf("the client sent an invalid frame %s: %v", m.raw, m.err)
		}
		return m.frame
	case <-ctx.Done():
		t.Fatalf("timed out waiting for a client frame")
		return protocol.ClientFrame{}
	}
}

// nextOf returns the client's next frame and checks its type.
func (fc *fakeConn) nextOf(ctx context.Context, t *testing.T, typ string) protocol.ClientFrame {
	t.Helper()
	f := fc.next(ctx, t)
	if f.Type != typ {
		t.Fatalf("client sent %q, want %q: %+v", f.Type, typ, f)
	}
	return f
}

// waitClosed waits until the client drops the connection; it fails if the
// client sends a frame first.
func (fc *fakeConn) waitClosed(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case m, ok := <-fc.msgs:
		if ok {
			t.Fatalf("client sent %s, want the connection dropped", m.raw)
		}
	case <-ctx.Done():
		t.Fatalf("timed out waiting for the client to drop the connection")
	}
}

// closeCode returns the close code the client sent, after waitClosed; 0 if
// it cut the connection without one.
func (fc *fakeConn) closeCode() int {
	var ce *websocket.CloseError
	if errors.As(fc.endErr, &ce) {
		return ce.Code
	}
	return 0
}

func (fc *fakeConn) send(t *testing.T, frame any) {
	t.Helper()
	data, err := json.Marshal(frame)
	if err != nil {
		t.Fatal(err)
	}
	fc.sendRaw(t, websocket.TextMessage, data)
}

func (fc *fakeConn) sendRaw(t *testing.T, mt int, data []byte) {
	t.Helper()
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	if err := fc.ws.WriteMessage(mt, data); err != nil {
		t.Fatalf("fake server write: %v", err)
	}
}

func (fc *fakeConn) close(t *testing.T, code int, reason string) {
	t.Helper()
	msg := websocket.FormatCloseMessage(code, reason)
	if err := fc.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(failAfter)); err != nil {
		t.Fatalf("fake server close: %v", err)
	}
}

// handshake expects hello, answers welcome and returns the hello.
func (fc *fakeConn) handshake(ctx context.Context, t *testing.T) protocol.ClientFrame {
	t.Helper()
	hello := fc.nextOf(ctx, t, protocol.FrameHello)
	fc.send(t, map[string]any{"v": 1, "type": "welcome", "build": "srv-1",
		"limits": map[string]any{"max_frame_bytes": 65536, "max_subscriptions": 256}})
	return hello
}

// Server frames.

const testEpoch = "EpochA"

func cur(pos uint64) string { return protocol.Cursor{Epoch: testEpoch, Pos: pos}.String() }

// snapCur is the seq-th snapshot cursor of a snapshot at pos; its sealed
// place is opaque bytes to a client.
func snapCur(pos, seq uint64) string {
	return protocol.Cursor{Epoch: testEpoch, Pos: pos, Snapshot: true, Seq: seq, Sealed: "opaque-sealed-place"}.String()
}

func changes(id, cursor string, entries ...map[string]any) map[string]any {
	if entries == nil {
		entries = []map[string]any{}
	}
	return map[string]any{"v": 1, "type": "changes", "id": id, "cursor": cursor, "entries": entries}
}

func up(key string) map[string]any {
	return map[string]any{"op": "upsert", "key": key, "row": map[string]any{"id": key}}
}

func del(key string) map[string]any { return map[string]any{"op": "delete", "key": key} }

func with(e map[string]any, field, value string) map[string]any {
	e[field] = value
	return e
}

func caughtUp(id, cursor string) map[string]any {
	return map[string]any{"v": 1, "type": "caught-up", "id": id, "cursor": cursor}
}

func resetFrame(id, reason string) map[string]any {
	return map[string]any{"v": 1, "type": "reset", "id": id, "reason": reason}
}

func errorFrame(id string, code protocol.Code) map[string]any {
	f := map[string]any{"v": 1, "type": "error", "code": code, "message": "test says " + string(code)}
	if id != "" {
		f["id"] = id
	}
	return f
}

// batchKeys lists a batch's entries as "u:key"/"d:key".
func batchKeys(b Batch) []string {
	out := make([]string, len(b.Entries))
	for i, e := range b.Entries {
		out[i] = e.Op[:1] + ":" + e.Key
	}
	return out
}

func timeNow() time.Time { return time.Now() }
