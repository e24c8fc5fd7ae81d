package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// idle measures the server memory one idle, subscribed connection costs: RSS
// and heap before and after opening n connections that each subscribe to a
// scope and then stay silent.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	n := fs.Int("n", 10000, "connections (at most 50000)")
	scopes := fs.Int("scopes", 100, "distinct scopes the connections spread over")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	hold := fs.Bool("hold", false, "keep the connections open until the timeout, for profiling the server")
	_ = fs.Parse(args)
	if *n < 1 || *n > 50000 {
		return fmt.Errorf("-n must be in [1, 50000]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.stop()
	before, err := srv.stats(true)
	if err != nil {
		return err
	}
	conns, err := openSubscribed(ctx, srv.addr, *n, *scopes)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	after, err := srv.stats(false)
	if err != nil {
		return err
	}
	if *hold {
		fmt.Printf("holding the connections; server at http://%s (Ctrl-C to end)\n", srv.addr)
		<-ctx.Done()
	}
	settled, err := srv.stats(true)
	if err != nil {
		return err
	}
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(*n) / 1024 }
	fmt.Printf("connections: %d subscribed idle (over %d scopes), server engine: %d connections, %d subscriptions\n",
		*n, *scopes, after.Engine.Connections, after.Engine.Subscriptions)
	fmt.Printf("server RSS:        %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection\n", mib(before.RSS), mib(after.RSS), per(before.RSS, after.RSS))
	fmt.Printf("server RSS settled:%7.1f MiB -> %7.1f MiB   %5.2f KiB per connection (after GC and returning freed pages)\n", mib(before.RSS), mib(settled.RSS), per(before.RSS, settled.RSS))
	fmt.Printf("server heap alloc: %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection\n", mib(before.HeapAlloc), mib(after.HeapAlloc), per(before.HeapAlloc, after.HeapAlloc))
	fmt.Printf("server stacks:     %7.1f MiB -> %7.1f MiB   %5.2f KiB per connection (%.2f settled)\n", mib(before.StackInuse), mib(after.StackInuse), per(before.StackInuse, after.StackInuse), per(before.StackInuse, settled.StackInuse))
	fmt.Printf("server goroutines: %d -> %d   %.2f per connection\n", before.Goroutines, after.Goroutines, float64(after.Goroutines-before.Goroutines)/float64(*n))
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// openSubscribed opens n WebSocket connections, each hello + one
// subscription, and waits until every one is caught up. Connections spread
// over loopback source addresses 127.0.0.2… so more than one address's
// ephemeral ports are available.
func openSubscribed(ctx context.Context, addr string, n, scopes int) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dialSubscribed(ctx, addr, i, fmt.Sprintf("s%d", i%scopes))
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("connection %d: %w", i, err)
			}
			conns[i] = c
		}(i)
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	out := conns[:0]
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	runtime.GC()
	return out, firstErr
}

func dialSubscribed(ctx context.Context, addr string, i int, scope string) (*websocket.Conn, error) {
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i/20000))}
	d := websocket.Dialer{
		NetDialContext:   (&net.Dialer{LocalAddr: src}).DialContext,
		HandshakeTimeout: 30 * time.Second,
		ReadBufferSize:   512,
		WriteBufferSize:  512,
	}
	c, _, err := d.DialContext(ctx, "ws://"+addr+"/tide/ws", nil)
	if err != nil {
		return nil, err
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"hello","build":"tideload"}`)); err != nil {
		c.Close()
		return nil, err
	}
	sub := fmt.Sprintf(`{"v":1,"type":"subscribe","id":"1","resource":"items","conditions":{"scope":%q}}`, scope)
	if err := c.WriteMessage(websocket.TextMessage, []byte(sub)); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(data) > 20 && string(data[:25]) == `{"v":1,"type":"caught-up"` {
			_ = c.SetReadDeadline(time.Time{})
			return c, nil
		}
	}
}
