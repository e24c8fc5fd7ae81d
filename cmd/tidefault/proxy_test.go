package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer accepts connections and echoes what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a failure bound
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

// TestProxy: a connection goes to the first upstream that accepts it (a
// node that is down is skipped), bytes written during a stall arrive once
// it ends, and close cuts every connection.
func TestProxy(t *testing.T) {
	up := echoServer(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close() // nothing listens there any more
	p, err := newProxy(func(attempt int) (string, bool) {
		if attempt == 0 {
			return deadAddr, true
		}
		return up, true
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, "hello")

	ctx, cancel := context.WithCancel(context.Background())
	stalled := make(chan struct{})
	go func() { defer close(stalled); p.stall(ctx, time.Hour) }()
	if _, err := c.Write([]byte("during")); err != nil {
		t.Fatal(err)
	}
	cancel() // the stall ends early
	<-stalled
	buf := make([]byte, len("during"))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "during" {
		t.Fatalf("after the stall: read %q, %v", buf, err)
	}
	p.close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %d bytes after close, want the connection cut", n)
	}
}
