package client

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
)

// freezeProxy forwards TCP connections to a target. Frozen, it forwards
// nothing either way, and closes nothing, on the connections it holds
// and on new ones, as a network that went silent: bytes wait until it
// thaws.
type freezeProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen chan struct{} // while frozen: closed on thaw
	conns  []net.Conn
}

func newFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		p.thaw()
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// gate waits while the proxy is frozen.
func (p *freezeProxy) gate() {
	p.mu.Lock()
	ch := p.frozen
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *freezeProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *freezeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			p.gate()
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				return
			}
			p.track(up)
			go p.pipe(up, c)
			go p.pipe(c, up)
		}()
	}
}

// pipe copies src to dst through the gate, the end of src included.
func (p *freezeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.gate()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			_ = dst.Close()
			return
		}
	}
}

// TestFrozenNetworkIsNoticedAndSurvived: a connection through a network
// that goes silent (a proxy that stops forwarding both ways, closing
// nothing) is given up after two heartbeats of the server, with the scope
// no longer live; once the network forwards again the client reconnects
// and the scope is live again, with what changed meanwhile.
func TestFrozenNetworkIsNoticedAndSurvived(t *testing.T) {
	ctx := testCtx(t)
	srv := newRealServer(t, core.Config{Heartbeat: 200 * time.Millisecond})
	srv.upsert(t, ctx, todo{ID: "t1", ProjectID: "p1", Title: "one"})
	host := strings.TrimSuffix(strings.TrimPrefix(srv.url, "ws://"), "/tide/ws")
	proxy := newFreezeProxy(t, host)
	c, events := newTestClient(t, Config{URL: "ws://" + proxy.addr() + "/tide/ws"})
	sub, err := c.Sync(p1)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if err := sub.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	lost := events.count(EventDisconnected) // a loaded machine may have lost one already
	connected := events.count(EventConnected)

	proxy.freeze()
	es := events.waitKind(ctx, t, EventDisconnected, lost+1)
	if e := es[len(es)-1]; !errors.Is(e.Err, ErrDeadConnection) {
		t.Errorf("the frozen connection ended with %v, want ErrDeadConnection", e)
	}
	if sub.State() == SubLive {
		t.Error("the scope says live while the connection is dead")
	}
	srv.upsert(t, ctx, todo{ID: "t2", ProjectID: "p1", Title: "while frozen"})

	proxy.thaw()
	events.waitKind(ctx, t, EventConnected, connected+1)
	waitState(ctx, t, sub, SubLive)
	for {
		ch := sub.Changed()
		if rows := decodeRows(t, sub.Rows()); rows["t2"].Title == "while frozen" {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("the change made while frozen never arrived: %v", sub.Rows())
		}
	}
}
