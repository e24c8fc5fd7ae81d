package pgfeed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

type pgconnFD = pgconn.FieldDescription

// testSchema is cmd/tideload's items resource.
func testSchema() *feed.Schema {
	return &feed.Schema{Name: "items", Table: "items", Columns: []protocol.Column{
		{Name: "id", Kind: protocol.KindString}, {Name: "scope", Kind: protocol.KindString}, {Name: "tenant", Kind: protocol.KindString},
		{Name: "body", Kind: protocol.KindString}, {Name: "sent_ns", Kind: protocol.KindInt},
	}, Keys: []int{0}, Scope: []int{1}}
}

// FuzzCompactJSON: for valid JSON, compactJSON is encoding/json.Compact;
// for anything else it does not crash and never grows its input.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{
		`{"a": 1, "b": [1, 2, {"c": "x, y: z"}], "d": null}`,
		`{"id": "k\"1\\", "s": " : , ", "t": "\u00e9 \n"}`,
		"[1,\t2,\n3,\r4 ]", `"  "`, `{}`, `{"a":"\\"}`, `"\\\""`, ``, `"unterminated`, `{"a": "\`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := compactJSON(nil, data)
		if len(got) > len(data) {
			t.Fatalf("compactJSON(%q) = %q grew", data, got)
		}
		if !json.Valid(data) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compactJSON(%q) = %q, json.Compact %q", data, got, want.Bytes())
		}
		// Appending to a prefix keeps the prefix.
		if got := compactJSON([]byte("x"), data); string(got) != "x"+want.String() {
			t.Fatalf("compactJSON after a prefix = %q", got)
		}
	})
}

// escapeJSONRef is Postgres's escape_json, written out one character at a
// time.
func escapeJSONRef(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c < ' ' {
				fmt.Fprintf(&b, `\u%04x`, int(c))
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// checkVerbatim checks appendJSONBStringVerbatim against appendJSONBString
// and the definition of a verbatim span: s between quotes, valid UTF-8.
func checkVerbatim(t *testing.T, s string) {
	t.Helper()
	got, verbatim := appendJSONBStringVerbatim([]byte("x"), []byte(s))
	if want := appendJSONBString([]byte("x"), []byte(s)); !bytes.Equal(got, want) {
		t.Fatalf("appendJSONBStringVerbatim(%q) = %s; appendJSONBString wrote %s", s, got, want)
	}
	if want := string(got[1:]) == `"`+s+`"` && utf8.ValidString(s); verbatim != want {
		t.Fatalf("appendJSONBStringVerbatim(%q) = %s, verbatim %v; want %v", s, got[1:], verbatim, want)
	}
}

func TestAppendJSONBStringVerbatim(t *testing.T) {
	for _, tc := range []struct {
		s        string
		verbatim bool
	}{
		{"", true}, {"acme", true}, {"caf\xc3\xa9", true}, {"a\"b", false}, {"a\\b", false}, {"tab\t", false}, {"\xff", false},
		{"lorem ipsum dolor sit amet lorem ipsum", true}, {"lorem ipsum dolor sit amet lorem ipsum\n", false}, {"12345678\xe2\x82", false},
	} {
		_, verbatim := appendJSONBStringVerbatim(nil, []byte(tc.s))
		if verbatim != tc.verbatim {
			t.Errorf("appendJSONBStringVerbatim(%q): verbatim %v, want %v", tc.s, verbatim, tc.verbatim)
		}
		checkVerbatim(t, tc.s)
	}
}

// FuzzAppendJSONBString: the string escaping of snapshot rows is
// Postgres's, decodes back to the text, and is called verbatim exactly
// when it is the text between quotes.
func FuzzAppendJSONBString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"b\s`, "\x01\x1f\x7f\b\f\n\r\t", "é€😀", "a\u2028b", "</script>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendJSONBString([]byte("x"), []byte(s))
		if string(got[1:]) != escapeJSONRef(s) {
			t.Fatalf("appendJSONBString(%q) = %s, want %s", s, got[1:], escapeJSONRef(s))
		}
		checkVerbatim(t, s)
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return // Postgres text holds neither
		}
		var back string
		if err := json.Unmarshal(got[1:], &back); err != nil || back != s {
			t.Fatalf("%s decodes to %q, %v; want %q", got[1:], back, err, s)
		}
	})
}

// FuzzAppendValue: whatever bytes a column's value arrives as, rendering
// it never panics, and what it renders for a well-formed value is JSON.
func FuzzAppendValue(f *testing.F) {
	f.Add(uint8(encInt), true, []byte{0, 0, 0, 42})
	f.Add(uint8(encInt), true, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})
	f.Add(uint8(encInt), false, []byte("-12"))
	f.Add(uint8(encBool), true, []byte{1})
	f.Add(uint8(encBool), false, []byte("f"))
	f.Add(uint8(encBase64), true, []byte{0, 1, 2, 250, 255})
	f.Add(uint8(encBase64), false, []byte(`\x0001ff`))
	f.Add(uint8(encUUID), true, []byte("0123456789abcdef"))
	f.Add(uint8(encUUID), false, []byte("6f1c1f0e-8a51-4a5e-9a3e-6f5a3b2f1c00"))
	f.Add(uint8(encJSON), true, []byte("\x01{\"a\": [1, 2]}"))
	f.Add(uint8(encJSON), false, []byte(`{"a": "b"}`))
	f.Add(uint8(encRaw), false, []byte(`[1, 2]`))
	f.Add(uint8(encString), false, []byte("a\"b"))
	f.Add(uint8(encTime), false, []byte("2026-12-01T14:00:00.000000Z"))
	f.Fuzz(func(t *testing.T, enc uint8, binary bool, v []byte) {
		format := int16(pgtype.TextFormatCode)
		if binary {
			format = pgtype.BinaryFormatCode
		}
		e := colEnc(enc % (uint8(encJSON) + 1))
		out, err := appendValue(nil, e, format, v)
		if err != nil {
			return
		}
		wellFormed := true
		switch e {
		case encInt:
			wellFormed = binary
		case encBool:
			wellFormed = binary && v[0] <= 1
		case encUUID:
			wellFormed = binary
		case encString, encTime:
			wellFormed = utf8.Valid(v) && bytes.IndexByte(v, 0) < 0
		case encJSON, encRaw:
			in := v
			if binary && e == encJSON {
				in = v[1:]
			}
			wellFormed = json.Valid(in)
		}
		if wellFormed && !json.Valid(out) {
			t.Fatalf("appendValue(%d, binary %v, %q) = %q, not JSON", e, binary, v, out)
		}
	})
}

// TestJSONBKeyOrder: jsonb orders keys shorter first, then bytewise.
func TestJSONBKeyOrder(t *testing.T) {
	keys := []string{"bb", "a", "ab", "b", "abc", "z", "aa"}
	want := []string{"a", "b", "z", "aa", "ab", "bb", "abc"}
	for i := range keys {
		for j := range keys {
			if (jsonbKeyCompare(keys[i], keys[j]) < 0) != (indexOf(want, keys[i]) < indexOf(want, keys[j])) {
				t.Fatalf("jsonbKeyCompare(%q, %q) = %d", keys[i], keys[j], jsonbKeyCompare(keys[i], keys[j]))
			}
		}
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// BenchmarkCompactJSON compacts a jsonb text rendering of a typical row.
func BenchmarkCompactJSON(b *testing.B) {
	row := []byte(`{"id": "12345", "body": "lorem ipsum dolor sit amet lorem ipsum dolor sit amet lorem ipsu", "scope": "s0", "tenant": "acme", "sent_ns": 12345}`)
	dst := make([]byte, 0, len(row))
	b.SetBytes(int64(len(row)))
	b.ReportAllocs()
	for b.Loop() {
		dst = compactJSON(dst[:0], row)
	}
}

// typicalSnapshotRow is the plan of a typical resource (four text columns,
// one bigint) and one row's raw values as a snapshot reads them: in the
// plan's key order, text in text format and the bigint in binary. The key
// and scope are text columns, so the plan selects nothing more.
func typicalSnapshotRow(b *testing.B) (*plan, []pgconnFD, [][]byte) {
	p := newPlan(testSchema(), []uint32{oidText, oidText, oidText, oidText, oidInt8})
	vals := [][]byte{[]byte("12345"), []byte("s0"), []byte("acme"), []byte("lorem ipsum dolor sit amet lorem ipsum dolor sit amet lorem ipsu"), {0, 0, 0, 0, 0, 0, 0x30, 0x39}}
	if len(p.snapSel) != len(p.snap) {
		b.Fatalf("the key and scope are text columns, yet the plan selects %d more values", len(p.snapSel)-len(p.snap))
	}
	// vals are in schema order; the snapshot reads them in key order.
	sel := make([][]byte, len(p.snap))
	fds := make([]pgconnFD, len(p.snap))
	for j, c := range p.snap {
		sel[j] = vals[c.col]
		fds[j].Format = pgtype.TextFormatCode
		if c.enc == encInt {
			fds[j].Format = pgtype.BinaryFormatCode
		}
	}
	return p, fds, sel
}

// BenchmarkAppendSnapshotRow renders a typical row from its raw values.
func BenchmarkAppendSnapshotRow(b *testing.B) {
	p, fds, sel := typicalSnapshotRow(b)
	var dst []byte
	spans := make([]protocol.ValueSpan, len(p.cols))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = appendSnapshotRow(dst[:0], p.snap, fds, sel, spans); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSnapshotRow decodes a typical row of a snapshot page as the
// reader does: its JSON rendered into the page's slab, its key and scope,
// its spans; a fresh page every 1,000 rows.
func BenchmarkDecodeSnapshotRow(b *testing.B) {
	p, fds, sel := typicalSnapshotRow(b)
	var mem slab
	page := feed.SnapshotPage{Rows: make([]feed.Change, 0, 1000)}
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.decodeSnapshotRow(fds, sel, &mem, &page)
		if err != nil {
			b.Fatal(err)
		}
		if page.Rows = append(page.Rows, c); len(page.Rows) == 1000 {
			page, mem = feed.SnapshotPage{Rows: make([]feed.Change, 0, 1000)}, slab{}
		}
	}
}
