package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
)

// TestHeartbeat: a welcomed connection that nothing else is sent to
// receives ping frames, each tick with the WebSocket ping it had before;
// welcome announces the interval; a connection that has not said hello
// gets WebSocket pings but no ping frame, so welcome is its first frame;
// a pong frame is taken silently.
func TestHeartbeat(t *testing.T) {
	s := newServer(t, core.Config{Heartbeat: 10 * time.Millisecond})
	c := tidetest.Dial(t, s.url, tidetest.WithPingFrames(), tidetest.WithHeader("X-User", "u"), tidetest.WithHeader("X-Projects", "p7"))
	ws := c.WebSocket()

	// One reader on its own goroutine reports, in the order read, the
	// WebSocket pings (its ping handler runs inside the read) and the frames.
	type event struct {
		control bool // a WebSocket ping
		f       protocol.ServerFrame
	}
	events := make(chan event, 64)
	ws.SetPingHandler(func(data string) error {
		events <- event{control: true}
		_ = ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(10*time.Second))
		return nil
	})
	go func() {
		defer close(events)
		for {
			f, _, err := c.ReadFrame()
			if err != nil {
				return
			}
			events <- event{f: f}
		}
	}()
	const controlPing = "websocket ping"
	var last protocol.ServerFrame
	next := func() string {
		t.Helper()
		ev, ok := <-events
		if !ok {
			t.Fatal("the connection ended")
		}
		if ev.control {
			return controlPing
		}
		last = ev.f
		return ev.f.Type
	}

	if ev := next(); ev != controlPing {
		t.Fatalf("before hello: %s, want only WebSocket pings", ev)
	}
	c.Send(tidetest.HelloFrame(protocol.ClientFrame{}))
	for ev := next(); ev != protocol.FrameWelcome; ev = next() {
		if ev != controlPing {
			t.Fatalf("before welcome: %s frame", ev)
		}
	}
	if w := last; w.HeartbeatMS != 10 || w.Principal != "u" {
		t.Fatalf("welcome: heartbeat_ms %d, principal %q; want 10, u", w.HeartbeatMS, w.Principal)
	}
	pings, controls := 0, 0
	for pings < 5 {
		switch ev := next(); ev {
		case controlPing:
			// Two ticks may share a WebSocket ping if the writer is slow,
			// never a ping frame.
			if controls++; controls > pings+2 {
				t.Fatalf("%d WebSocket pings since welcome, %d ping frames", controls, pings)
			}
		case protocol.FramePing:
			if controls == 0 {
				t.Fatal("a ping frame came without its tick's WebSocket ping")
			}
			pings++
		default:
			t.Fatalf("an idle connection got a %s frame", ev)
		}
	}

	// pong is answered by nothing: the probe's answer is the next frame
	// that is not a ping.
	for range 3 {
		c.Send(`{"v":1,"type":"pong"}`)
	}
	c.Unsubscribe("probe")
	for ev := next(); ev != protocol.FrameError; ev = next() {
		if ev != controlPing && ev != protocol.FramePing {
			t.Fatalf("after pong: %s frame", ev)
		}
	}
	if f := last; f.Code != protocol.CodeUnknownSub || f.ID != "probe" {
		t.Fatalf("pong was answered: %+v", f)
	}
	c.Close()
	for range events { // the reader ends with the connection
	}
}

// TestHeartbeatConfig: the heartbeat welcome announces is the configured
// one, 10 s by default or a third of a shorter idle timeout; one that is
// negative or not below the idle timeout is refused.
func TestHeartbeatConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  core.Config
		ms   int
	}{
		{"default", core.Config{}, 10000},
		{"a short idle timeout", core.Config{IdleTimeout: 3 * time.Second}, 1000},
		{"set", core.Config{Heartbeat: 2500 * time.Millisecond}, 2500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.cfg)
			c := s.dial(t, "u", "p7")
			if w := c.Hello(protocol.ClientFrame{}); w.HeartbeatMS != tt.ms {
				t.Fatalf("heartbeat_ms %d, want %d", w.HeartbeatMS, tt.ms)
			}
		})
	}
	for _, cfg := range []core.Config{
		{Heartbeat: -time.Second},
		{Heartbeat: 2 * time.Minute},
		{Heartbeat: 5 * time.Second, IdleTimeout: 5 * time.Second},
	} {
		if _, err := core.New(cfg); err == nil || !strings.Contains(err.Error(), "Heartbeat") && !strings.Contains(err.Error(), "negative") {
			t.Errorf("Heartbeat %v, IdleTimeout %v: %v, want an error", cfg.Heartbeat, cfg.IdleTimeout, err)
		}
	}
}
