package core

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/gorilla/websocket"
)

// TestFrameTextRoundTrip: messages framed by frames.begin/end and add
// (every header length: up to 125 bytes, up to 64 KiB, beyond) are read
// back, in order and byte for byte, by gorilla's client: collected in one
// buffer (flushDirect's frames), and written by blocking writes (the
// writer's, where add writes large payloads without copying them).
func TestFrameTextRoundTrip(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		var want [][]byte
		var out bytes.Buffer
		f := frames{direct: true, blocking: blocking, out: &out}
		for range 200 {
			var n int
			switch rng.IntN(4) {
			case 0:
				n = rng.IntN(126)
			case 1:
				n = 126 + rng.IntN(0x10000-126)
			case 2:
				n = 0x10000 + rng.IntN(100_000)
			default:
				n = []int{0, 125, 126, 127, directPayload - 1, directPayload, 0xffff, 0x10000}[rng.IntN(8)]
			}
			p := make([]byte, n)
			for i := range p {
				p[i] = 'a' + byte(rng.IntN(26))
			}
			want = append(want, p)
			if rng.IntN(2) == 0 {
				if err := f.add(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			b, at := f.begin()
			if err := f.end(append(b, p...), at); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.flush(); err != nil {
			t.Fatal(err)
		}
		client := pipeClient(t, out.Bytes())
		for i, w := range want {
			mt, got, err := client.ReadMessage()
			if err != nil {
				t.Fatalf("blocking %v, message %d (%d bytes): %v", blocking, i, len(w), err)
			}
			if mt != websocket.TextMessage || !bytes.Equal(got, w) {
				t.Fatalf("blocking %v, message %d: type %d, %d bytes, want text of %d bytes", blocking, i, mt, len(got), len(w))
			}
		}
	}
}

// pipeClient returns a gorilla client connection whose server side
// answers the handshake and then sends stream.
func pipeClient(t *testing.T, stream []byte) *websocket.Conn {
	t.Helper()
	cs, ss := net.Pipe()
	t.Cleanup(func() { cs.Close(); ss.Close() })
	go func() {
		req, err := http.ReadRequest(bufio.NewReader(ss))
		if err != nil {
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(h[:]) + "\r\n\r\n"
		if _, err := ss.Write([]byte(resp)); err != nil {
			return
		}
		_, _ = ss.Write(stream)
	}()
	u, _ := url.Parse("ws://pipe/")
	//lint:ignore SA1019 a client over an in-memory pipe needs NewClient: Dialer only dials
	c, _, err := websocket.NewClient(cs, u, nil, 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	return c
}

// BenchmarkFrameText: framing a 200-byte changes frame into a drain's
// buffer (what flushDirect does per subscription and wave).
func BenchmarkFrameText(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 200)
	f := frames{direct: true}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		f.buf = f.buf[:0]
		for range 4 {
			bb, at := f.begin()
			_ = f.end(append(bb, payload...), at)
		}
	}
}

// BenchmarkFramePage: a drain of one 170 KB page frame (a snapshot page of
// 1,000 rows), copied into the drain's buffer (flushDirect's frames) or
// written from where it is (the writer's).
func BenchmarkFramePage(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 170_000)
	for _, blocking := range []bool{false, true} {
		b.Run(map[bool]string{false: "copied", true: "vectored"}[blocking], func(b *testing.B) {
			f := frames{direct: true, blocking: blocking, out: io.Discard}
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if err := f.add(payload); err != nil {
					b.Fatal(err)
				}
				if err := f.flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDeliveryWrite: what one write of a 200-byte frame costs the
// sender in the kernel, which is most of a live delivery's cost (a CPU
// profile of the fan-out at 1,000 subscribers spends three quarters of the
// server's time in write system calls): to a loopback TCP socket whose peer
// drains it, one frame or four per write, against a pipe and /dev/null (the
// system call alone). ns/op is per frame.
func BenchmarkDeliveryWrite(b *testing.B) {
	frame := bytes.Repeat([]byte("x"), 200)
	drain := func(r io.Reader) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64<<10)
			for {
				if _, err := r.Read(buf); err != nil {
					return
				}
			}
		}()
		return done
	}
	run := func(b *testing.B, w io.Writer, perWrite int) {
		msg := bytes.Repeat(frame, perWrite)
		b.SetBytes(int64(len(frame)))
		b.ResetTimer()
		for i := 0; i < b.N; i += perWrite {
			if _, err := w.Write(msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, perWrite := range []int{1, 4} {
		b.Run("tcp-loopback/frames-per-write="+strconv.Itoa(perWrite), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					close(accepted)
					return
				}
				accepted <- c
			}()
			w, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			r, ok := <-accepted
			if !ok {
				b.Fatal("accept failed")
			}
			done := drain(r)
			run(b, w, perWrite)
			b.StopTimer()
			w.Close()
			<-done
			r.Close()
		})
	}
	b.Run("pipe", func(b *testing.B) {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		done := drain(r)
		run(b, w, 1)
		b.StopTimer()
		w.Close()
		<-done
		r.Close()
	})
	b.Run("devnull", func(b *testing.B) {
		w, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		run(b, w, 1)
	})
}
