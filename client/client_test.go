package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewValidatesConfig(t *testing.T) {
	bad := map[string]struct {
		cfg  Config
		want string
	}{
		"no URL":            {Config{}, "URL is required"},
		"http scheme":       {Config{URL: "http://h/tide/ws"}, "scheme must be ws or wss"},
		"no host":           {Config{URL: "ws:///tide/ws"}, "no host"},
		"unparsable URL":    {Config{URL: "ws://h/%zz"}, "URL"},
		"negative backoff":  {Config{URL: "ws://h/", MinBackoff: -1}, "must not be negative"},
		"min above max":     {Config{URL: "ws://h/", MinBackoff: time.Minute, MaxBackoff: time.Second}, "exceeds MaxBackoff"},
		"origin too long":   {Config{URL: "ws://h/", Origin: strings.Repeat("o", 129)}, "Origin is longer"},
		"control in build":  {Config{URL: "ws://h/", Build: "b\x00"}, "Build contains a control character"},
		"several problems!": {Config{MinBackoff: -1}, "URL is required"},
	}
	for name, tt := range bad {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New error = %v, want it to mention %q", name, err, tt.want)
		}
	}

	c1, err := New(Config{URL: "wss://example.com/tide/ws"})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := New(Config{URL: "wss://example.com/tide/ws"})
	if c1.Origin() == "" || c1.Origin() == c2.Origin() {
		t.Errorf("generated origins %q and %q: want distinct random ids", c1.Origin(), c2.Origin())
	}
	if c1.cfg.MinBackoff != 100*time.Millisecond || c1.cfg.MaxBackoff != 30*time.Second {
		t.Errorf("default backoff %v..%v", c1.cfg.MinBackoff, c1.cfg.MaxBackoff)
	}
	if c1.dialer.HandshakeTimeout != 10*time.Second {
		t.Errorf("default handshake timeout %v", c1.dialer.HandshakeTimeout)
	}
	c3, _ := New(Config{URL: "ws://h/", Origin: "dev-1"})
	if c3.Origin() != "dev-1" {
		t.Errorf("Origin() = %q", c3.Origin())
	}
}

func TestSubscribeValidatesAndRecords(t *testing.T) {
	store := NewMemoryStore()
	c, err := New(Config{URL: "ws://127.0.0.1:1/tide/ws", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestRows()
	if _, err := c.Subscribe(Scope{}, h); !errors.Is(err, ErrInvalidScope) {
		t.Errorf("subscribing to nothing: %v, want ErrInvalidScope", err)
	}
	if _, err := c.Subscribe(Scope{Resource: "todos", Conditions: map[string]any{"p": nil}}, h); !errors.Is(err, ErrInvalidScope) {
		t.Errorf("bad condition: %v, want ErrInvalidScope", err)
	}
	if _, err := c.Subscribe(Scope{Resource: "todos"}, nil); err == nil {
		t.Error("nil handler accepted")
	}
	scope := Scope{Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"a", "b"}}}}
	sub, err := c.Subscribe(scope, h)
	if err != nil {
		t.Fatal(err)
	}
	same := Scope{Resource: "todos", Conditions: map[string]any{"p": map[string]any{"in": []string{"b", "a"}}}}
	if _, err := c.Subscribe(same, newTestRows()); !errors.Is(err, ErrDuplicateScope) {
		t.Errorf("same scope twice: %v, want ErrDuplicateScope", err)
	}

	digest, _ := scope.Digest()
	r, ok, _ := store.Load(context.Background(), digest)
	if !ok || r.State != StateNew || r.Resource != "todos" || string(r.Conditions) != `{"p":{"in":["a","b"]}}` || r.Cursor != "" {
		t.Fatalf("record after Subscribe = %+v, %v", r, ok)
	}
	r.Cursor = cur(5)
	_ = store.Save(context.Background(), r)

	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Errorf("second Unsubscribe: %v", err)
	}
	r, ok, _ = store.Load(context.Background(), digest)
	if !ok || r.State != StateUnsubscribed || r.Cursor != cur(5) {
		t.Errorf("record after Unsubscribe = %+v, %v; want it kept, marked unsubscribed", r, ok)
	}
	if _, err := c.Subscribe(same, newTestRows()); err != nil {
		t.Errorf("subscribing again after Unsubscribe: %v", err)
	}
}

func TestRunReturnsOnContextAndRefusesConcurrentRun(t *testing.T) {
	fs := newFakeServer(t)
	c, _ := newTestClient(t, Config{URL: fs.url})
	ctx := testCtx(t)
	h := start(t, c)
	fc := fs.accept(ctx, t)
	fc.handshake(ctx, t)
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("concurrent Run = %v, want ErrRunning", err)
	}
	if err := h.stop(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
	// The client said goodbye with 1000 rather than just vanishing.
	fc.waitClosed(ctx, t)
	if code := fc.closeCode(); code != 1000 {
		t.Errorf("client closed with %d, want 1000", code)
	}
}
