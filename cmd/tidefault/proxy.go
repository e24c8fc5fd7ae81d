package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// proxy is one client's network: a loopback TCP listener that forwards each
// connection to a live node (the client's home node first) and that the
// run can stall: while paused it neither reads nor writes either side, so
// the client's reads stop as on a dead link, and the node's idle timeout
// closes the connection.
type proxy struct {
	ln       net.Listener
	upstream func(attempt int) (string, bool) // the node to try on attempt n, if any is up

	mu      sync.Mutex
	resume  chan struct{} // non-nil while paused; closed by unpause
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	dialErr int
}

func newProxy(upstream func(attempt int) (string, bool)) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track records c so close can cut it; false once the proxy is closed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// serve forwards one client connection to the first node that accepts it.
func (p *proxy) serve(down net.Conn) {
	defer p.wg.Done()
	defer p.untrack(down)
	var up net.Conn
	for attempt := 0; attempt < 3 && up == nil; attempt++ {
		addr, ok := p.upstream(attempt)
		if !ok {
			break
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			up = c
		}
	}
	if up == nil {
		p.mu.Lock()
		p.dialErr++
		p.mu.Unlock()
		return // the client sees its dial fail and retries with backoff
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pump(up, down); done <- struct{}{} }()
	go func() { p.pump(down, up); done <- struct{}{} }()
	<-done
	// One side ended: cut both, so the other pump returns too.
	_ = down.Close()
	_ = up.Close()
	<-done
}

// pump copies src to dst, waiting at every read and write while paused.
func (p *proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.gate() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// gate waits while the proxy is paused; false once it is closed.
func (p *proxy) gate() bool {
	p.mu.Lock()
	resume, closed := p.resume, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	if resume != nil {
		<-resume
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// stall pauses the proxy for d, or until ctx ends.
func (p *proxy) stall(ctx context.Context, d time.Duration) {
	p.mu.Lock()
	if p.resume != nil || p.closed {
		p.mu.Unlock()
		return
	}
	p.resume = make(chan struct{})
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	p.unpause()
}

func (p *proxy) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

// close stops the proxy and cuts every connection.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
