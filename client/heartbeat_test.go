package client

// Honest connection state: the server's ping frames are answered, and a
// connection that brings nothing for two heartbeats is given up and
// replaced.

import (
	"errors"
	"testing"

	"github.com/tidesync/tide/core/protocol"
)

func TestPingFrameAnsweredWithPong(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.nextOf(ctx, t, protocol.FrameHello)
	fc.send(t, map[string]any{"v": 1, "type": "welcome", "heartbeat_ms": 60000, "limits": map[string]any{"max_frame_bytes": 65536}})
	r.events.waitKind(ctx, t, EventConnected, 1)
	for range 3 {
		fc.send(t, map[string]any{"v": 1, "type": "ping"})
		fc.nextOf(ctx, t, protocol.FramePong)
	}
}

// After a welcome with heartbeat_ms H, a connection on which nothing
// arrives for 2·H is dead: the client closes it, reports it and connects
// again.
func TestSilentConnectionIsGivenUp(t *testing.T) {
	ctx := testCtx(t)
	r := newFakeRig(t, Config{})
	sub := r.subscribe(t, scopeA, newRecorder())
	start(t, r.c)
	fc := r.fs.accept(ctx, t)
	fc.nextOf(ctx, t, protocol.FrameHello)
	fc.send(t, map[string]any{"v": 1, "type": "welcome", "heartbeat_ms": 50, "limits": map[string]any{"max_frame_bytes": 65536}})
	id := fc.nextOf(ctx, t, protocol.FrameSubscribe).ID
	fc.send(t, caughtUp(id, cur(1)))
	// Then the server says nothing at all.
	es := r.events.waitKind(ctx, t, EventDisconnected, 1)
	if !errors.Is(es[0].Err, ErrDeadConnection) {
		t.Errorf("disconnected: %v, want ErrDeadConnection", es[0])
	}
	fc.waitClosed(ctx, t)
	fc2 := r.fs.accept(ctx, t) // reconnected
	if sub.State() == SubLive {
		t.Error("the scope says live without a connection")
	}
	fc2.handshake(ctx, t)
	if s := fc2.nextOf(ctx, t, protocol.FrameSubscribe); s.Cursor != cur(1) {
		t.Errorf("resubscribed %+v", s)
	}
}
