package protocol

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

// spannedRow renders a JSON object of the columns of c that vals holds
// (column index → JSON value text), in the given key order, and the spans
// a correct feed reports for it: each value's place, Verbatim for a string
// without escape or control character whose content is valid UTF-8.
func spannedRow(c *RowCodec, order []int, vals map[int]string) ([]byte, []ValueSpan) {
	row := []byte{'{'}
	spans := make([]ValueSpan, len(c.fields))
	first := true
	for _, i := range order {
		v, ok := vals[i]
		if !ok {
			continue
		}
		if !first {
			row = append(row, ',')
		}
		first = false
		row = append(row, c.fields[i].name...)
		start := len(row)
		row = append(row, v...)
		sp := ValueSpan{Start: uint32(start), End: uint32(len(row))}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			s := []byte(v[1 : len(v)-1])
			sp.Verbatim = !bytes.ContainsAny(s, "\"\\") && utf8.Valid(s) && bytes.IndexFunc(s, func(r rune) bool { return r < 0x20 }) < 0
		}
		spans[i] = sp
	}
	return append(row, '}'), spans
}

// checkSpans decodes row with c (and with codecs from Only) both ways:
// DecodeSpans fails exactly when DecodeShared does, and gives every field
// the same value.
func checkSpans(t *testing.T, c *RowCodec, row []byte, spans []ValueSpan, cols []int) {
	t.Helper()
	for _, codec := range []*RowCodec{c, c.Only(cols)} {
		var want, got goodRow
		errWant := codec.DecodeShared(row, valueOf(&want).Elem())
		errGot := codec.DecodeSpans(row, spans, valueOf(&got).Elem())
		if (errWant == nil) != (errGot == nil) {
			t.Fatalf("%s: DecodeShared: %v, DecodeSpans: %v", row, errWant, errGot)
		}
		if errWant != nil {
			continue
		}
		for i, f := range codec.fields {
			if f.skip {
				continue
			}
			a, b := valueOf(&want).Elem().Field(f.field).Interface(), valueOf(&got).Elem().Field(f.field).Interface()
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s: column %d (%s): DecodeShared %#v, DecodeSpans %#v", row, i, f.col.Name, a, b)
			}
		}
	}
}

// TestDecodeSpansAgrees: for random rows (values of every type, right and
// wrong for their column, strings with escapes, control characters and
// invalid UTF-8, keys in random order, some missing) with the spans a feed
// would report, DecodeSpans decodes what DecodeShared does; with spans
// that do not fit the row it still does, by decoding the whole row.
func TestDecodeSpansAgrees(t *testing.T) {
	c, err := CodecFor(typeOf[goodRow]())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	pool := []string{`""`, `"plain"`, `"t\u00e9"`, `"a\"b"`, `"a\\b"`, "\"\xff\xfe\"", "\"tab\there\"", `"2026-11-30T15:04:05Z"`, `"AAEC/w=="`, `"é"`,
		`1`, `-3`, `70000`, `1.5`, `1e3`, `9223372036854775807`, `9223372036854775808`, `true`, `false`, `null`, `{"a":[1,2]}`, `[1,"x"]`}
	for range 20000 {
		vals := map[int]string{}
		for i := range c.fields {
			if rng.IntN(5) > 0 {
				vals[i] = pool[rng.IntN(len(pool))]
			}
		}
		order := rng.Perm(len(c.fields))
		row, spans := spannedRow(c, order, vals)
		cols := columnsOf(c, rng.Uint32())
		checkSpans(t, c, row, spans, cols)
		// Spans that do not fit: the whole row is decoded instead.
		bad := append([]ValueSpan(nil), spans...)
		j := rng.IntN(len(bad))
		switch rng.IntN(3) {
		case 0:
			bad[j].End = uint32(len(row) + 1)
		case 1:
			bad = bad[:j]
		case 2:
			bad[j] = ValueSpan{Start: 0, End: 1, Verbatim: true}
		}
		checkSpans(t, c, row, bad, cols)
	}
	// Rows as Encode renders them, strings verbatim or not.
	note := "n\"ote"
	for i := range 500 {
		r := goodRow{ID: "t" + strconv.Itoa(i), ProjectID: "p\u00e9", Owner: int64(i), Title: string(rune(i)), Note: &note}
		_, _, row, err := c.Encode(valueOf(r))
		if err != nil {
			t.Fatal(err)
		}
		var got goodRow
		if err := c.DecodeSpans(row, nil, valueOf(&got).Elem()); err != nil || got.ID != r.ID || *got.Note != note {
			t.Fatalf("%s without spans: %+v, %v", row, got, err)
		}
	}
}

// FuzzDecodeSpans: whatever the values and spans, DecodeSpans agrees with
// DecodeShared for rows with the spans a feed would report.
func FuzzDecodeSpans(f *testing.F) {
	f.Add(`"t1"`, `"p7"`, `-3`, "\"hi\"", uint32(7), uint64(1))
	f.Add("\"a\\\"b\"", "\"\xff\"", `1e3`, `null`, uint32(0), uint64(2))
	c, err := CodecFor(typeOf[goodRow]())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b, n, d string, bits uint32, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		vals := map[int]string{0: a, 1: b, 2: n, 3: d}
		for k, v := range vals {
			if !validJSONValue(v) {
				delete(vals, k)
			}
		}
		row, spans := spannedRow(c, rng.Perm(len(c.fields)), vals)
		checkSpans(t, c, row, spans, columnsOf(c, bits))
	})
}

// validJSONValue reports whether v is one JSON value, so that a row built
// of such values is a JSON object with the spans spannedRow reports.
func validJSONValue(v string) bool {
	p := scanner{b: []byte(v)}
	return p.value(0) && p.i == len(v)
}
