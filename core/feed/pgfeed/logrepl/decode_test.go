package logrepl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Encoders of pgoutput (proto_version 1) messages, as the server writes
// them, for tests that need no server.

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func pgTime(t time.Time) uint64 { return uint64(t.Sub(pgEpoch).Microseconds()) }

func msgBegin(final uint64, at time.Time, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, final)
	b = binary.BigEndian.AppendUint64(b, pgTime(at))
	return binary.BigEndian.AppendUint32(b, xid)
}

func msgCommit(commit, end uint64, at time.Time) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, commit)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, pgTime(at))
}

func msgRelation(id uint32, ns, name string, cols ...relColumn) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		var flags byte
		if c.key {
			flags = 1
		}
		b = append(b, flags)
		b = append(append(b, c.name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.typ)
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

// A tuple value: text, or null, or toast (unchanged).
const (
	null  = "\x00null"
	toast = "\x00toast"
)

func tuple(b []byte, vals ...string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		switch v {
		case null:
			b = append(b, 'n')
		case toast:
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

func msgInsert(id uint32, vals ...string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, id)
	return tuple(append(b, 'N'), vals...)
}

func msgUpdate(id uint32, kind byte, old []string, vals ...string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'U'}, id)
	if kind != 0 {
		b = tuple(append(b, kind), old...)
	}
	return tuple(append(b, 'N'), vals...)
}

func msgDelete(id uint32, kind byte, old ...string) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'D'}, id)
	return tuple(append(b, kind), old...)
}

func msgTruncate(ids ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(ids)))
	b = append(b, 0)
	for _, id := range ids {
		b = binary.BigEndian.AppendUint32(b, id)
	}
	return b
}

var (
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	relA = msgRelation(16384, "app", "todos", relColumn{"id", 23, true}, relColumn{"title", 25, false}, relColumn{"body", 25, false})
	relB = msgRelation(16390, "app", "tags", relColumn{"id", 23, true})
)

// stream feeds msgs to a fresh assembler and returns the pieces, the ends
// of transactions without a piece, and the first error.
func stream(maxChanges, maxBytes int, confirmed uint64, msgs ...[]byte) (pieces []*Tx, ends []uint64, err error) {
	a := newAssembler(maxChanges, maxBytes)
	for _, m := range msgs {
		p, end, err := a.message(m, confirmed)
		if err != nil {
			return pieces, ends, err
		}
		if p != nil {
			pieces = append(pieces, p)
		}
		if end != 0 {
			ends = append(ends, end)
		}
	}
	return pieces, ends, nil
}

func TestAssemble(t *testing.T) {
	pieces, ends, err := stream(100, 1<<20, 0,
		relA, relB,
		msgBegin(0x200, t0, 7),
		msgInsert(16384, "1", "a", null),
		msgUpdate(16384, 0, nil, "1", "b", toast),
		msgUpdate(16384, 'K', []string{"1", null, null}, "2", "b", toast),
		msgUpdate(16384, 'O', []string{"2", "b", "long"}, "2", "c", toast),
		msgDelete(16384, 'K', "2", null, null),
		msgDelete(16384, 'O', "3", "x", "y"),
		msgTruncate(16384, 16390),
		msgCommit(0x200, 0x230, t0),
		msgBegin(0x300, t0, 8), msgCommit(0x300, 0x330, t0), // empty
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 1 || len(ends) != 1 || ends[0] != 0x330 {
		t.Fatalf("pieces %d, ends %v", len(pieces), ends)
	}
	tx := pieces[0]
	if tx.XID != 7 || tx.CommitLSN != 0x200 || tx.EndLSN != 0x230 || !tx.CommitTime.Equal(t0) || tx.More || tx.Part != 0 {
		t.Fatalf("tx %+v", tx)
	}
	want := []string{
		"insert todos id=1 title=a body=NULL",
		"update todos id=1 title=b body=<unchanged>",
		"update todos id=2 title=b body=<unchanged> key: id=1",
		"update todos id=2 title=c body=<unchanged> old: id=2 title=b body=long",
		"delete todos key: id=2",
		"delete todos old: id=3 title=x body=y",
		"truncate todos",
		"truncate tags",
	}
	if got := showTx(tx); !equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	c := tx.Changes[0]
	if c.Table != "app.todos" || c.New[0].Type != 23 || !c.New[0].Key || c.New[1].Key {
		t.Fatalf("change %+v", c)
	}
	if col, ok := Find(c.New, "title"); !ok || *col.Value != "a" {
		t.Fatalf("Find: %+v %v", col, ok)
	}
	if _, ok := Find(c.New, "nope"); ok {
		t.Fatal("Find found a column that is not there")
	}
	if k := tx.Changes[4].Old[1]; k.Value != nil || k.Unchanged {
		t.Fatalf("non-key column of a key-only old row: %+v", k)
	}
}

func TestAssemblePieces(t *testing.T) {
	msgs := [][]byte{relA, msgBegin(0x200, t0, 7)}
	for range 25 {
		msgs = append(msgs, msgInsert(16384, "1", "a", null))
	}
	msgs = append(msgs, msgCommit(0x200, 0x230, t0))
	for _, tc := range []struct {
		name          string
		changes, size int
		want          []int // changes per piece
	}{
		{"whole", 100, 1 << 20, []int{25}},
		{"by changes", 10, 1 << 20, []int{10, 10, 5}},
		{"exact multiple", 5, 1 << 20, []int{5, 5, 5, 5, 5}},
		{"by bytes", 100, 10 * (changeOverhead + 3*columnOverhead + 2), []int{10, 10, 5}},
		{"by bytes, one change too many", 100, 10*(changeOverhead+3*columnOverhead+2) - 1, []int{9, 9, 7}},
		{"a change larger than the limit", 100, 1, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pieces, _, err := stream(tc.changes, tc.size, 0, msgs...)
			if err != nil {
				t.Fatal(err)
			}
			if len(pieces) != len(tc.want) {
				t.Fatalf("%d pieces, want %d", len(pieces), len(tc.want))
			}
			for i, p := range pieces {
				last := i == len(pieces)-1
				if len(p.Changes) != tc.want[i] || p.Part != i || p.More == last || p.XID != 7 || p.CommitLSN != 0x200 || (p.EndLSN == 0x230) != last {
					t.Fatalf("piece %d: %d changes, Part %d, More %v, EndLSN %x", i, len(p.Changes), p.Part, p.More, p.EndLSN)
				}
			}
		})
	}
}

// A transaction that committed below the confirmed position is dropped,
// its end reported.
func TestAssembleSkipsConfirmed(t *testing.T) {
	pieces, ends, err := stream(100, 1<<20, 0x210, relA,
		msgBegin(0x200, t0, 7), msgInsert(16384, "1", "a", null), msgCommit(0x200, 0x230, t0),
		msgBegin(0x300, t0, 8), msgInsert(16384, "2", "a", null), msgCommit(0x300, 0x330, t0))
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 1 || pieces[0].XID != 8 || len(ends) != 1 || ends[0] != 0x230 {
		t.Fatalf("pieces %v, ends %v", pieces, ends)
	}
}

// Malformed messages and sequences are ErrMalformed, never a panic.
func TestAssembleMalformed(t *testing.T) {
	begin := msgBegin(0x200, t0, 7)
	ins := msgInsert(16384, "1", "a", null)
	noNew := msgUpdate(16384, 'K', []string{"1", null, null})
	noNew = noNew[:len(noNew)-3]
	bigLen := msgInsert(16384, "1", "a", null)
	binary.BigEndian.PutUint32(bigLen[1+4+1+2+1:], 0xfffffff0)
	for _, tc := range []struct {
		name string
		msgs [][]byte
		want string
	}{
		{"empty message", [][]byte{{}}, "empty"},
		{"unknown type", [][]byte{{'?'}}, "not supported"},
		{"short begin", [][]byte{{'B', 1, 2}}, "BeginMessage"},
		{"change outside a transaction", [][]byte{relA, ins}, "outside a transaction"},
		{"unknown relation", [][]byte{begin, ins}, "before its Relation"},
		{"column count", [][]byte{relA, begin, msgInsert(16384, "1")}, "1 columns"},
		{"commit outside", [][]byte{msgCommit(0x200, 0x230, t0)}, "outside a transaction"},
		{"begin inside", [][]byte{begin, begin}, "inside transaction"},
		{"commit of another", [][]byte{begin, msgCommit(0x300, 0x330, t0)}, "begun for"},
		{"huge value length", [][]byte{relA, begin, bigLen}, "column 0 of"},
		{"truncated row", [][]byte{relA, begin, ins[:len(ins)-3]}, "column"},
		{"bad column kind", [][]byte{relA, begin, append(msgInsert(16384)[:6:6], 0, 1, 'z')}, "kind"},
		{"binary value", [][]byte{relA, begin, append(msgInsert(16384)[:6:6], 0, 3, 'b', 0, 0, 0, 0, 'n', 'n')}, "format"},
		{"truncate count", [][]byte{relA, begin, append(msgTruncate(16384), 1)}, "Truncate of 1 tables"},
		{"short relation", [][]byte{relA[:12]}, "RelationName"},
		{"relation cut in its columns", [][]byte{relA[:len(relA)-5]}, "index out of range"},
		{"insert cut in its row", [][]byte{relA, begin, ins[:8]}, "ends at column 0"},
		{"update without new row", [][]byte{relA, begin, noNew}, "without a new row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := stream(100, 1<<20, 0, tc.msgs...)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrMalformed mentioning %q", err, tc.want)
			}
		})
	}
}

// FuzzAssemble feeds arbitrary message sequences to the assembler: it
// returns pieces that hold together, or ErrMalformed; it never panics nor
// allocates what a length field claims without the bytes to back it.
//
// The input is a sequence of messages, each a 2-byte length and that many
// bytes.
func FuzzAssemble(f *testing.F) {
	frame := func(msgs ...[]byte) []byte {
		var b []byte
		for _, m := range msgs {
			b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
			b = append(b, m...)
		}
		return b
	}
	begin := msgBegin(0x200, t0, 7)
	f.Add(frame(relA, relB, begin, msgInsert(16384, "1", "a", null), msgUpdate(16384, 'O', []string{"1", "a", null}, "1", "b", toast),
		msgDelete(16384, 'K', "1", null, null), msgTruncate(16384, 16390), msgCommit(0x200, 0x230, t0)))
	f.Add(frame(relA, begin, msgInsert(16384, "1", "a", null), msgInsert(16384, "2", "b", null), msgInsert(16384, "3", "c", null), msgCommit(0x200, 0x230, t0)))
	f.Add(frame(begin, msgCommit(0x200, 0x230, t0), msgBegin(0x300, t0, 8)))
	f.Add(frame(relA, begin, msgMessage(true, 0x1f0, "tide.origin", "dev"), msgInsert(16384, "1", "a", null), msgMessage(false, 0x1f8, "x", "y"), msgCommit(0x200, 0x230, t0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := newAssembler(2, 1<<10)
		part := 0
		for len(data) >= 2 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				n = len(data)
			}
			msg := data[:n]
			data = data[n:]
			p, _, err := a.message(msg, 0x100)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v is not ErrMalformed", err)
				}
				return
			}
			if p == nil {
				continue
			}
			if p.Part != part || p.More && p.EndLSN != 0 {
				t.Fatalf("piece Part %d (want %d), More %v, EndLSN %d", p.Part, part, p.More, p.EndLSN)
			}
			part++
			if !p.More {
				part = 0
			}
			for _, c := range p.Changes {
				if c.Table == "" || c.Op < OpInsert || c.Op > OpTruncate {
					t.Fatalf("change %+v", c)
				}
				for _, col := range append(c.New, c.Old...) {
					if col.Unchanged && col.Value != nil {
						t.Fatalf("unchanged column with a value: %+v", col)
					}
				}
			}
		}
	})
}

func BenchmarkAssemble(b *testing.B) {
	msgs := [][]byte{relA, msgBegin(0x200, t0, 7)}
	for range 1000 {
		msgs = append(msgs, msgInsert(16384, "12345", "a todo title of some length", null))
	}
	msgs = append(msgs, msgCommit(0x200, 0x230, t0))
	b.ReportAllocs()
	for b.Loop() {
		a := newAssembler(DefaultMaxPieceChanges, DefaultMaxPieceBytes)
		for _, m := range msgs {
			if _, _, err := a.message(m, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "changes/s")
}

// msgMessage is a logical decoding message (pg_logical_emit_message).
func msgMessage(transactional bool, lsn uint64, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

// Transactional messages arrive in their transaction, with the number of
// changes before them, across pieces; a transaction with only messages
// arrives too; messages outside a transaction, or not transactional, do
// not.
func TestAssembleMessages(t *testing.T) {
	pieces, ends, err := stream(2, 1<<20, 0,
		relA,
		msgMessage(false, 0x100, "tide.origin", "outside"),
		msgBegin(0x200, t0, 7),
		msgMessage(true, 0x110, "tide.origin", "dev-1"),
		msgInsert(16384, "1", "a", null),
		msgMessage(false, 0x120, "tide.origin", "not transactional"),
		msgInsert(16384, "2", "b", null),
		msgInsert(16384, "3", "c", null),
		msgMessage(true, 0x130, "tide.origin", "dev-2"),
		msgCommit(0x200, 0x230, t0),
		msgBegin(0x300, t0, 8),
		msgMessage(true, 0x2f0, "tide.mark", ""),
		msgCommit(0x300, 0x330, t0),
		msgBegin(0x400, t0, 9),
		msgCommit(0x400, 0x430, t0),
	)
	if err != nil {
		t.Fatal(err)
	}
	show := func(ms []Message) string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s=%s@%d", m.Prefix, m.Content, m.Changes))
		}
		return strings.Join(out, ",")
	}
	if len(pieces) != 3 || show(pieces[0].Messages) != "tide.origin=dev-1@0" || show(pieces[1].Messages) != "tide.origin=dev-2@3" ||
		!pieces[0].More || pieces[1].More || show(pieces[2].Messages) != "tide.mark=@0" || len(pieces[2].Changes) != 0 {
		for _, p := range pieces {
			t.Logf("piece %d more %v changes %d messages %s", p.Part, p.More, len(p.Changes), show(p.Messages))
		}
		t.Fatalf("%d pieces", len(pieces))
	}
	if len(ends) != 1 || ends[0] != 0x430 {
		t.Fatalf("ends %v, want the empty transaction's", ends)
	}
}
