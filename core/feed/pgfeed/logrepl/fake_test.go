package logrepl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// fakeServer speaks just enough of Postgres's protocol to start a
// replication stream, then sends script and reports what the consumer
// sends back: for what a real server will not do on demand (fall silent,
// send bad bytes).
type fakeServer struct {
	url     string
	updates chan []byte // the consumer's CopyData messages
}

func newFakeServer(t *testing.T, script ...[]byte) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fakeServer{
		url:     fmt.Sprintf("postgres://u@%s/db?sslmode=disable", l.Addr()),
		updates: make(chan []byte, 1024),
	}
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if err := f.serve(conn, script); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("fake server: %v", err)
		}
	}()
	return f
}

func (f *fakeServer) serve(conn net.Conn, script [][]byte) error {
	be := pgproto3.NewBackend(conn, conn)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return err
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := be.Flush(); err != nil {
		return err
	}
	answer := func(tag string, values ...string) error {
		var fields []pgproto3.FieldDescription
		var row [][]byte
		for i, v := range values {
			fields = append(fields, pgproto3.FieldDescription{Name: []byte(fmt.Sprint("c", i)), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1})
			row = append(row, []byte(v))
		}
		be.Send(&pgproto3.RowDescription{Fields: fields})
		be.Send(&pgproto3.DataRow{Values: row})
		be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
		be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		return be.Flush()
	}
	for step := 0; ; step++ {
		msg, err := be.Receive()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			switch step {
			case 0: // SHOW wal_level
				err = answer("SHOW", "logical")
			case 1: // the slot
				err = answer("SELECT 1", "0/100", "pgoutput", "true", "reserved")
			default: // START_REPLICATION
				be.Send(&pgproto3.CopyBothResponse{})
				for _, s := range script {
					be.Send(&pgproto3.CopyData{Data: s})
				}
				err = be.Flush()
			}
			if err != nil {
				return err
			}
		case *pgproto3.CopyData:
			f.updates <- append([]byte(nil), m.Data...)
		case *pgproto3.CopyDone: // the consumer ends the stream
			be.Send(&pgproto3.CopyDone{})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("START_REPLICATION")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			if err := be.Flush(); err != nil {
				return err
			}
		case *pgproto3.Terminate:
			return nil
		}
	}
}

func keepalive(walEnd uint64, reply bool) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'k'}, walEnd)
	b = binary.BigEndian.AppendUint64(b, 0)
	if reply {
		return append(b, 1)
	}
	return append(b, 0)
}

func xlog(start uint64, msg []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'w'}, start)
	b = binary.BigEndian.AppendUint64(b, start)
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, msg...)
}

func runFake(t *testing.T, f *fakeServer, tune func(*Config)) error {
	t.Helper()
	cfg := Config{ConnString: f.url, Slot: "s", Publication: "p"}
	if tune != nil {
		tune(&cfg)
	}
	c, err := NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	return c.Run(ctx, func(context.Context, *Tx) error { return nil })
}

// A server that falls silent, even to status updates asking for a reply,
// is given up after three status intervals.
func TestSilentServer(t *testing.T) {
	f := newFakeServer(t)
	err := runFake(t, f, func(c *Config) { c.StatusInterval = 20 * time.Millisecond })
	if !errors.Is(err, ErrSilent) {
		t.Fatalf("Run: %v, want ErrSilent", err)
	}
	var asked bool
	for len(f.updates) > 0 {
		u := <-f.updates
		if len(u) != 34 || u[0] != 'r' || binary.BigEndian.Uint64(u[9:]) != 0x100 {
			t.Fatalf("status update %x", u)
		}
		asked = asked || u[33] == 1
	}
	if !asked {
		t.Fatal("no status update asked the silent server for a reply")
	}
}

// A keepalive asking for a reply is answered with the confirmed position,
// at once: the status interval is far away.
func TestKeepaliveAnswered(t *testing.T) {
	f := newFakeServer(t, keepalive(0x80, true))
	done := make(chan error, 1)
	go func() { done <- runFake(t, f, func(c *Config) { c.StatusInterval = hang / 4 }) }()
	select {
	case u := <-f.updates:
		if len(u) != 34 || u[0] != 'r' || binary.BigEndian.Uint64(u[9:]) != 0x100 || u[33] != 0 {
			t.Fatalf("status update %x, want flushed 0/100", u)
		}
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(hang):
		t.Fatal("keepalive not answered")
	}
}

// Bad bytes from the server end Run with ErrMalformed, never a panic, and
// the stream in order.
func TestMalformedStream(t *testing.T) {
	for name, msg := range map[string][]byte{
		"empty":             {},
		"short keepalive":   {'k', 1},
		"short XLogData":    {'w', 1, 2},
		"bad pgoutput":      xlog(0x200, []byte{'I', 0, 0}),
		"cut relation":      xlog(0x200, relA[:len(relA)-5]),
		"change before any": xlog(0x200, msgInsert(1, "x")),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeServer(t, msg)
			if err := runFake(t, f, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Run: %v, want ErrMalformed", err)
			}
			// It reported its position and ended the stream in order.
			select {
			case u := <-f.updates:
				if u[0] != 'r' || binary.BigEndian.Uint64(u[9:]) != 0x100 {
					t.Fatalf("status update %x, want flushed 0/100", u)
				}
			default:
				t.Fatal("no status update before the end")
			}
		})
	}
}

// A position the handler moved reaches the server at once when the
// progress interval allows, without waiting for the status interval or a
// keepalive (the server sends none here).
func TestProgressReported(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	f := newFakeServer(t,
		xlog(0x200, relA),
		xlog(0x200, msgBegin(0x300, at, 7)),
		xlog(0x210, msgInsert(16384, "1", "a", "b")),
		xlog(0x300, msgCommit(0x300, 0x340, at)),
	)
	c, err := NewConsumer(Config{ConnString: f.url, Slot: "s", Publication: "p", StatusInterval: 10 * hang})
	if err != nil {
		t.Fatal(err)
	}
	c.progress = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunBatches(ctx, func(context.Context, []*Tx) error { return nil }) }()
	defer func() { cancel(); <-done }()
	select {
	case u := <-f.updates:
		if len(u) != 34 || u[0] != 'r' || binary.BigEndian.Uint64(u[1:]) != 0x340 {
			t.Fatalf("status update %x, want written 0/340", u)
		}
	case err := <-done:
		t.Fatalf("RunBatches: %v", err)
	case <-time.After(hang):
		t.Fatal("the moved position was not reported")
	}
}
