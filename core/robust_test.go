package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// TestSlowConsumer: one client stops reading while a writer keeps writing.
// The server's memory for it stays bounded by its send buffer, a fast client
// on the same scope keeps receiving everything, and when the slow client
// reads again it converges. Whether the server cut the slow client off on
// the way (its drop limit, or a write timeout on a slow machine) does not
// matter: like any client it then resumes from its cursor.
func TestSlowConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 16 MB")
	}
	s, slow, slowCursor, _ := slowServer(t)
	ctx := context.Background()
	fast := s.dial(t, "u", "p7")
	fast.hello()
	fast.send(`{"v":1,"type":"subscribe","id":"f","resource":"todos","conditions":{"project_id":"p7"}}`)
	fast.collect("f")

	const n, size = 8000, 2000 // 16 MB: well beyond loopback socket buffers
	title := strings.Repeat("x", size)
	fastDone := make(chan map[string]string, 1)
	go func() { fastDone <- readCopy(fast, fmt.Sprintf("k%05d", n-1)) }()

	heapBefore := heapInUse()
	for i := 0; i < n; i++ {
		// Rows are rewritten, so the final state is n/4 rows.
		if err := s.todos.Upsert(ctx, todo{ID: fmt.Sprintf("k%05d", i%(n/4)), ProjectID: "p7", Title: title, Done: i >= 3*n/4}); err != nil {
			t.Fatal(err)
		}
		if i == n-1 {
			_ = s.todos.Upsert(ctx, todo{ID: fmt.Sprintf("k%05d", n-1), ProjectID: "p7", Title: "last"})
		}
	}
	fastCopy := <-fastDone
	heapAfter := heapInUse()
	st := s.e.Stats()
	t.Logf("live heap: %d KiB before the writes, %d KiB after (payload written: %d KiB); dropped=%d",
		heapBefore>>10, heapAfter>>10, n*size>>10, st.Dropped)
	if st.Dropped == 0 {
		t.Fatal("the slow client never hit backpressure: the test did not exercise it")
	}
	// The in-memory feed keeps every change (~payload); a queue holding the
	// stalled client's changes would add as much again.
	if grow := heapAfter - heapBefore; grow > uint64(n*size)+16<<20 {
		t.Fatalf("heap grew by %d KiB for %d KiB of payload", grow>>10, n*size>>10)
	}
	want := rowsOf(t, s, "p7")
	if !equalCopies(fastCopy, want) {
		t.Fatalf("fast client: %d rows, want %d", len(fastCopy), len(want))
	}
	// The slow client reads again and converges.
	slowCopy, cutOff := resumeCopy(t, s, slow, slowCursor, want)
	if !equalCopies(slowCopy, want) {
		t.Fatalf("slow client did not converge: %d rows, want %d (cut off on the way: %v)", len(slowCopy), len(want), cutOff)
	}
	t.Logf("slow client converged; cut off on the way: %v", cutOff)
}

// slowServer is a server with a small send buffer and a client "u"
// subscribed (as "s") to project p7 and caught up; it returns the client's
// cursor, and a signal of the live entries the server drops. MaxDrops is
// high so a client falling behind the in-process writer is resynced rather
// than cut off.
func slowServer(t *testing.T) (*server, *wsClient, string, *dropSignal) {
	t.Helper()
	drops := &dropSignal{c: make(chan struct{}, 16)}
	s := newServer(t, core.Config{SendBuffer: 64 << 10, MaxDrops: 1 << 20, WriteTimeout: time.Minute, Observer: drops})
	slow := s.dial(t, "u", "p7")
	slow.hello()
	slow.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	_, cursor := slow.collect("s")
	return s, slow, cursor, drops
}

// TestPingsWhileStalled: a client that stops reading but keeps pinging
// gets its pongs and frames as whole frames: the server's answers to its
// pings never land inside a frame the server had only half written when
// the socket filled up. When it reads again it converges, and whatever
// ended its connections on the way was a close, never a broken frame.
func TestPingsWhileStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 8 MB")
	}
	s, slow, cursor, drops := slowServer(t)
	ctx := context.Background()
	var pongs atomic.Int64
	slow.ws.SetPongHandler(func(string) error { pongs.Add(1); return nil })
	const n, size = 4000, 2000 // 8 MB: beyond loopback socket buffers
	title := strings.Repeat("x", size)
	for i := 0; i < n; i++ {
		if err := s.todos.Upsert(ctx, todo{ID: fmt.Sprintf("k%05d", i%(n/4)), ProjectID: "p7", Title: title}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if err := slow.ws.WriteControl(websocket.PingMessage, []byte(fmt.Sprint(i)), time.Now().Add(10*time.Second)); err != nil {
				t.Fatalf("ping %d: %v", i, err)
			}
		}
	}
	// The fan-out may still be behind the writes: wait for its first drop.
	select {
	case <-drops.c:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled client never hit backpressure: the test did not exercise it")
	}
	want := rowsOf(t, s, "p7")
	got, cutOff := resumeCopy(t, s, slow, cursor, want)
	if !equalCopies(got, want) {
		t.Fatalf("stalled client did not converge: %d rows, want %d (cut off on the way: %v)", len(got), len(want), cutOff)
	}
	for _, err := range cutOff {
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || (ce.Code != int(protocol.CloseOverloaded) && ce.Code != websocket.CloseAbnormalClosure) {
			t.Errorf("connection ended by %v, want a close (1013) or a cut connection (1006), not a broken frame", err)
		}
	}
	t.Logf("converged; %d pongs read; cut off on the way: %v", pongs.Load(), cutOff)
}

// resumeCopy reads subscription "s" of c into a copy of the scope until the
// copy equals want. When the server ends the connection (1013 past the drop
// limit, 1006 after a write timeout: whatever the machine's speed made it),
// it does what a client does: it reconnects and resubscribes from the last
// cursor it received, and goes on applying. It returns the copy and the
// errors that ended each connection on the way.
func resumeCopy(t *testing.T, s *server, c *wsClient, cursor string, want map[string]string) (map[string]string, []error) {
	t.Helper()
	got := map[string]string{}
	var cutOff []error
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(60 * time.Second)) // bounds a broken test only
		data, err := readMessage(c.ws)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || len(cutOff) == 10 {
				t.Errorf("slow client: %v (cut off before: %v)", err, cutOff)
				return got, cutOff
			}
			cutOff = append(cutOff, err)
			c.ws.Close()
			c = s.dial(t, "u", "p7")
			c.hello()
			c.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"},"cursor":"` + cursor + `"}`)
			continue
		}
		f, err := protocol.DecodeServerFrame(data)
		if err != nil || f.Type == protocol.FrameError || f.ID != "s" {
			t.Errorf("bad frame %s", data)
			return got, cutOff
		}
		if f.Type == protocol.FrameReset {
			clear(got)
		}
		for _, e := range f.Entries {
			if e.Op == "upsert" {
				got[e.Key] = string(e.Row)
			} else {
				delete(got, e.Key)
			}
		}
		if f.Cursor != "" {
			cursor = f.Cursor
		}
		if equalCopies(got, want) {
			return got, cutOff
		}
	}
}

// TestBackpressureCloses: a client that keeps falling behind is cut off
// with 1013 once it exceeds the drop limit. The client falls behind for
// certain: whenever it is live (caught up), it stops reading until the
// server has dropped entries for it, then reads on.
func TestBackpressureCloses(t *testing.T) {
	drops := &dropSignal{c: make(chan struct{}, 16)}
	s := newServer(t, core.Config{SendBuffer: 1024, MaxDrops: 2, WriteTimeout: time.Minute, Observer: drops})
	c := s.dial(t, "u", "p7")
	c.hello()
	c.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	c.collect("s")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keep writing until the server gives up on the client
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = s.todos.Upsert(context.Background(), todo{ID: fmt.Sprint(i % 50), ProjectID: "p7", Title: strings.Repeat("y", 500)})
			if i > 2_000_000 {
				return // bound the loop; the test fails below if this is reached
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	live := true // collect returned at caught-up
	for {
		if live {
			select {
			case <-drops.c:
			case <-time.After(30 * time.Second):
				t.Fatal("no entries dropped within 30 s of the client stopping to read")
			}
			live = false
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		msg, err := readMessage(c.ws)
		if err == nil {
			live = strings.Contains(string(msg[:min(len(msg), 40)]), `"caught-up"`)
			continue
		}
		if !websocket.IsCloseError(err, int(protocol.CloseOverloaded)) {
			t.Fatalf("want close 1013, got %v", err)
		}
		return
	}
}

// dropSignal is an observer that signals every dropped live entry.
type dropSignal struct {
	core.NopObserver
	c chan struct{}
}

func (d *dropSignal) Dropped() {
	select {
	case d.c <- struct{}{}:
	default:
	}
}

// TestIdleSweep: a half-open peer (it never answers pings) is closed with
// 4001, while a live peer on the same engine keeps being served. The idle
// timeout is what the test waits out for the deaf peer, yet long enough that
// the live peer's pong round trip (ping tick, writer, client, reader), not
// in a hurry on a loaded machine, cannot miss it: 300 ms left it a few
// hundred milliseconds, which a machine at load 70-80 can take.
func TestIdleSweep(t *testing.T) {
	s := newServer(t, core.Config{IdleTimeout: 5 * time.Second})
	deaf := s.dial(t, "u", "p7")
	deaf.ws.SetPingHandler(func(string) error { return nil }) // never pongs
	deaf.hello()
	live := s.dial(t, "u", "p7")
	live.hello()
	live.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	live.collect("s")
	liveFrames := make(chan protocol.ServerFrame, 16)
	go func() {
		for {
			_ = live.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			data, err := readMessage(live.ws) // reading also answers pings
			if err != nil {
				close(liveFrames)
				return
			}
			f, _ := protocol.DecodeServerFrame(data)
			liveFrames <- f
		}
	}()
	_ = deaf.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		_, err := readMessage(deaf.ws)
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, int(protocol.CloseIdle)) {
			t.Fatalf("want close 4001, got %v", err)
		}
		break
	}
	// The live peer outlived the idle timeout and still gets changes.
	_ = s.todos.Upsert(context.Background(), todo{ID: "after", ProjectID: "p7"})
	f, ok := <-liveFrames
	if !ok || f.Type != protocol.FrameChanges || f.Entries[0].Key != "after" {
		t.Fatalf("live client got %+v (open=%v)", f, ok)
	}
}

// TestHostileFrames feeds malformed, truncated, oversized and wrong-version
// frames; each gets its documented error (and close, where documented), and
// a bystander keeps being served.
func TestHostileFrames(t *testing.T) {
	s := newServer(t, core.Config{MaxFrameBytes: 1024})
	by := s.dial(t, "u", "p7")
	by.hello()
	by.send(`{"v":1,"type":"subscribe","id":"s","resource":"todos","conditions":{"project_id":"p7"}}`)
	by.collect("s")
	big := `{"v":1,"type":"hello","build":"` + strings.Repeat("b", 2000) + `"}`
	for _, tt := range []struct {
		name      string
		hello     bool // send hello first
		frame     string
		binary    bool
		code      protocol.Code
		closeCode int // 0: the connection stays open
	}{
		{name: "garbage before hello", frame: `\x00\x01garbage`, code: protocol.CodeBadFrame, closeCode: int(protocol.ClosePolicy)},
		{name: "truncated hello", frame: `{"v":1,"type":"hel`, code: protocol.CodeBadFrame, closeCode: int(protocol.ClosePolicy)},
		{name: "wrong version", frame: `{"v":9,"type":"hello"}`, code: protocol.CodeUnsupportedVersion, closeCode: int(protocol.CloseVersionSkew)},
		{name: "oversized", hello: true, frame: big, code: protocol.CodeFrameTooLarge},
		{name: "binary", hello: true, frame: `{"v":1,"type":"hello"}`, binary: true, code: protocol.CodeBadFrame},
		{name: "truncated subscribe", hello: true, frame: `{"v":1,"type":"subscribe","id":"x","reso`, code: protocol.CodeBadFrame},
		{name: "wrong version after hello", hello: true, frame: `{"v":0.5,"type":"subscribe"}`, code: protocol.CodeBadFrame},
		{name: "null", hello: true, frame: `null`, code: protocol.CodeBadFrame},
		{name: "deeply nested", hello: true, frame: `{"v":1,"type":"subscribe","id":"d","resource":"todos","conditions":{"project_id":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}}`, code: protocol.CodeInvalidConditions},
		{name: "bad condition shape", hello: true, frame: `{"v":1,"type":"subscribe","id":"d","resource":"todos","conditions":{"project_id":{"in":"p7"}}}`, code: protocol.CodeInvalidConditions},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dial(t, "u", "p7")
			if tt.hello {
				c.hello()
			}
			mt := websocket.TextMessage
			if tt.binary {
				mt = websocket.BinaryMessage
			}
			if err := c.ws.WriteMessage(mt, []byte(tt.frame)); err != nil {
				t.Fatal(err)
			}
			if f := c.expect(protocol.FrameError); f.Code != tt.code {
				t.Fatalf("code %s (%s), want %s", f.Code, f.Message, tt.code)
			}
			if tt.closeCode != 0 {
				_, err := readMessage(c.ws)
				if !websocket.IsCloseError(err, tt.closeCode) {
					t.Fatalf("want close %d, got %v", tt.closeCode, err)
				}
				return
			}
			// Still serving: a probe gets its answer.
			c.send(`{"v":1,"type":"unsubscribe","id":"probe"}`)
			if f := c.expect(protocol.FrameError); f.Code != protocol.CodeUnknownSub {
				t.Fatalf("probe got %+v", f)
			}
		})
	}
	_ = s.todos.Upsert(context.Background(), todo{ID: "still", ProjectID: "p7"})
	if f := by.expect(protocol.FrameChanges); f.Entries[0].Key != "still" {
		t.Fatalf("bystander got %+v", f)
	}
}

// TestRateLimit: frames beyond the rate get one rate_limited error per run
// of refused frames; a client that keeps flooding is closed with 1008.
func TestRateLimit(t *testing.T) {
	s := newServer(t, core.Config{FrameRate: 1, FrameBurst: 5})
	c := s.dial(t, "u", "p7")
	c.hello()
	go func() {
		for i := 0; i < 200; i++ {
			if c.ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"unsubscribe","id":"x"}`)) != nil {
				return
			}
		}
	}()
	codes := codesUntilPolicyClose(t, c)
	// Each allowed unsubscribe is answered unknown_subscription; each run of
	// refused frames gets one rate_limited error, at its start. The flood is
	// one run on a fast machine; on a slow one the bucket may refill a token
	// mid-flood (1/s), ending a run: the frame it allows is answered, and the
	// next run gets its own single error. The last run is the one closed.
	allowed, runs := 0, 0
	for i, code := range codes {
		switch {
		case code == protocol.CodeUnknownSub:
			allowed++
		case code == protocol.CodeRateLimited && (i == 0 || codes[i-1] != protocol.CodeRateLimited):
			runs++
		default:
			t.Fatalf("want one rate_limited error per run of refused frames, got codes %v", codes)
		}
	}
	if allowed < 4 || runs == 0 || codes[len(codes)-1] != protocol.CodeRateLimited {
		t.Fatalf("want the burst's 4 frames answered, then a run of refused frames with one rate_limited error before the close, got codes %v", codes)
	}
}

// codesUntilPolicyClose reads c's frames until the server closes it with
// 1008 and returns their error codes; any other end fails the test.
func codesUntilPolicyClose(t *testing.T, c *wsClient) []protocol.Code {
	t.Helper()
	var codes []protocol.Code
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		data, err := readMessage(c.ws)
		if err != nil {
			if !websocket.IsCloseError(err, int(protocol.ClosePolicy)) {
				t.Fatalf("want close 1008, got %v (codes so far %v)", err, codes)
			}
			return codes
		}
		f, _ := protocol.DecodeServerFrame(data)
		codes = append(codes, f.Code)
	}
}

// TestRateLimitedMutationsAnswered: a mutate frame the frame rate refuses
// is answered reject rate_limited for its key (its client waits for an
// answer to that key, and resends it later), not dropped unanswered; every
// key gets exactly one answer.
func TestRateLimitedMutationsAnswered(t *testing.T) {
	s := newServer(t, core.Config{FrameRate: 1, FrameBurst: 5})
	c := s.dial(t, "u", "p7")
	c.hello()
	const n = 12 // below the 4×FrameBurst refused frames that close
	for i := range n {
		c.send(fmt.Sprintf(`{"v":1,"type":"mutate","key":"k%02d","resource":"todos","name":"nope","args":{},"at":1764590000000}`, i))
	}
	answers := map[string]protocol.Code{}
	limited := 0
	for len(answers) < n {
		_ = c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		data, err := readMessage(c.ws)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(answers), err)
		}
		f, _ := protocol.DecodeServerFrame(data)
		if f.Type != protocol.FrameReject {
			t.Fatalf("want a reject per mutation, got %s %s", f.Type, f.Code)
		}
		if _, dup := answers[f.Key]; dup {
			t.Fatalf("key %s answered twice", f.Key)
		}
		answers[f.Key] = f.Code
		switch f.Code {
		case protocol.CodeRateLimited:
			limited++
		case protocol.CodeUnknownMutator:
		default:
			t.Fatalf("key %s: code %s", f.Key, f.Code)
		}
	}
	if limited == 0 {
		t.Fatalf("no mutation was rate limited: %v", answers)
	}
}

// TestRateLimitOversized: frames above MaxFrameBytes count against the
// rate like any other (each costs the server a read and an answer): a
// flood of them gets the burst's frame_too_large answers, then
// rate_limited, then close 1008.
func TestRateLimitOversized(t *testing.T) {
	s := newServer(t, core.Config{FrameRate: 1, FrameBurst: 5, MaxFrameBytes: 1024})
	c := s.dial(t, "u", "p7")
	c.hello()
	big := []byte(`{"v":1,"type":"unsubscribe","id":"x","pad":"` + strings.Repeat("x", 2048) + `"}`)
	go func() {
		for i := 0; i < 200; i++ {
			if c.ws.WriteMessage(websocket.TextMessage, big) != nil {
				return
			}
		}
	}()
	codes := codesUntilPolicyClose(t, c)
	tooBig := 0
	for _, code := range codes {
		switch code {
		case protocol.CodeFrameTooLarge:
			tooBig++
		case protocol.CodeRateLimited:
		default:
			t.Fatalf("want frame_too_large and rate_limited only, got codes %v", codes)
		}
	}
	if tooBig < 4 || codes[len(codes)-1] != protocol.CodeRateLimited {
		t.Fatalf("want the burst's oversized frames answered, then rate_limited before the close, got codes %v", codes)
	}
}

// readCopy applies changes frames to a copy of the scope until the copy
// holds lastKey.
func readCopy(c *wsClient, lastKey string) map[string]string {
	got := map[string]string{}
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(60 * time.Second))
		data, err := readMessage(c.ws)
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				c.t.Errorf("closed: %v", err)
			}
			return got
		}
		f, err := protocol.DecodeServerFrame(data)
		if err != nil || f.Type == protocol.FrameError {
			c.t.Errorf("bad frame %s", data)
			return got
		}
		for _, e := range f.Entries {
			if e.Op == "upsert" {
				got[e.Key] = string(e.Row)
			} else {
				delete(got, e.Key)
			}
		}
		if _, ok := got[lastKey]; ok {
			return got
		}
	}
}

func rowsOf(t *testing.T, s *server, project string) map[string]string {
	t.Helper()
	rows, err := s.todos.Rows(context.Background(), map[string]any{"project_id": project})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		_, row, _ := protocol.EncodeRow(r)
		out[r.ID] = string(row)
	}
	return out
}

func equalCopies(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !jsonEqual(g, w) {
			return false
		}
	}
	return true
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLimits: each limit has its documented error, and the connection keeps
// serving.
func TestLimits(t *testing.T) {
	s := newServer(t, core.Config{MaxSubscriptions: 2, MaxConditions: 1, MaxConditionValues: 3})
	c := s.dial(t, "u", "p1,p2,p3,p4")
	c.hello()
	for i := 1; i <= 2; i++ {
		c.send(fmt.Sprintf(`{"v":1,"type":"subscribe","id":"s%d","resource":"todos","conditions":{"project_id":"p%d"}}`, i, i))
		c.collect(fmt.Sprintf("s%d", i))
	}
	for _, tt := range []struct {
		frame string
		code  protocol.Code
	}{
		{`{"v":1,"type":"subscribe","id":"s3","resource":"todos","conditions":{"project_id":"p3"}}`, protocol.CodeTooManySubscriptions},
		{`{"v":1,"type":"subscribe","id":"s4","resource":"todos","conditions":{"project_id":{"in":["p1","p2","p3","p4"]}}}`, protocol.CodeTooManyConditions},
		{`{"v":1,"type":"subscribe","id":"s5","resource":"todos","conditions":{"project_id":"p1","title":"x"}}`, protocol.CodeTooManyConditions},
	} {
		c.send(tt.frame)
		if f := c.expect(protocol.FrameError); f.Code != tt.code {
			t.Fatalf("%s: got %+v, want %s", tt.frame, f, tt.code)
		}
	}
	// Unsubscribing frees a slot.
	c.send(`{"v":1,"type":"unsubscribe","id":"s1"}`)
	c.send(`{"v":1,"type":"subscribe","id":"s6","resource":"todos","conditions":{"project_id":"p3"}}`)
	c.collect("s6")
}

// readMessage reads the next message that is not a heartbeat ping frame:
// the tests that read the socket raw skip those, as tidetest.Conn does.
func readMessage(ws *websocket.Conn) ([]byte, error) {
	for {
		_, data, err := ws.ReadMessage()
		if err != nil || !bytes.Equal(data, protocol.Ping()) {
			return data, err
		}
	}
}
