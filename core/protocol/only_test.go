package protocol

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// checkOnly decodes data with c and with c.Only(cols), sharing and not:
// both fail or neither, and the columns cols get the same values.
func checkOnly(t *testing.T, c *RowCodec, cols []int, data []byte) {
	t.Helper()
	o := c.Only(cols)
	for _, share := range []bool{false, true} {
		var full, only goodRow
		errFull := c.decode(data, valueOf(&full).Elem(), share)
		errOnly := o.decode(data, valueOf(&only).Elem(), share)
		if (errFull == nil) != (errOnly == nil) {
			t.Fatalf("%q, columns %v, share %v: full decode: %v, Only: %v", data, cols, share, errFull, errOnly)
		}
		if errFull != nil {
			continue
		}
		fv, ov := valueOf(&full).Elem(), valueOf(&only).Elem()
		for _, i := range cols {
			f := c.fields[i]
			a, b := fv.Field(f.field).Interface(), ov.Field(f.field).Interface()
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%q, columns %v: column %s: full decode %#v, Only %#v", data, cols, f.col.Name, a, b)
			}
		}
	}
}

// columnsOf picks a subset of the codec's columns from bits.
func columnsOf(c *RowCodec, bits uint32) []int {
	var cols []int
	for i := range c.fields {
		if bits&(1<<i) != 0 {
			cols = append(cols, i)
		}
	}
	return cols
}

// TestOnlyAgreesWithFullDecode: for random rows, some valid, some with
// escapes, invalid UTF-8, control characters, wrong types or broken
// syntax, a codec from Only fails exactly when the full codec fails and
// gives its columns the full decode's values.
func TestOnlyAgreesWithFullDecode(t *testing.T) {
	c, err := CodecFor(typeOf[goodRow]())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{`""`, `"plain"`, `"t\u00e9"`, `"a\"b"`, `"a\\b"`, "\"\xff\xfe\"", "\"tab\there\"", `"2026-11-30T15:04:05Z"`, `"AAEC/w=="`, `"é"`}
	vals := []string{`1`, `-3`, `70000`, `1.5`, `1e3`, `9223372036854775807`, `9223372036854775808`, `true`, `false`, `null`, `{"a":[1,2]}`, `[1,"x"]`}
	value := func() string {
		if rng.IntN(2) == 0 {
			return strs[rng.IntN(len(strs))]
		}
		return vals[rng.IntN(len(vals))]
	}
	names := []string{"id", "project_id", "owner", "title", "done", "score", "at", "note", "blob", "meta", "count", "extra"}
	for range 20000 {
		var b strings.Builder
		b.WriteString("{")
		for j := range rng.IntN(8) {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(names[rng.IntN(len(names))]))
			b.WriteString(":")
			b.WriteString(value())
		}
		b.WriteString("}")
		data := []byte(b.String())
		switch rng.IntN(10) {
		case 0:
			data = data[:rng.IntN(len(data)+1)] // broken syntax
		case 1:
			data = append(data, " "...)
		}
		checkOnly(t, c, columnsOf(c, rng.Uint32()), data)
	}
	// Rows as feeds render them.
	note := "n\"ote"
	for i := range 1000 {
		row := goodRow{ID: "t" + strconv.Itoa(i), ProjectID: "p\u00e9", Owner: int64(i), Title: strings.Repeat("x", i%70), Note: &note, Meta: json.RawMessage(`{"k":1}`)}
		_, _, data, err := c.Encode(valueOf(row))
		if err != nil {
			t.Fatal(err)
		}
		checkOnly(t, c, columnsOf(c, rng.Uint32()), data)
	}
}

// FuzzDecodeOnly: whatever the row, a codec from Only agrees with the full
// decode (TestOnlyAgreesWithFullDecode).
func FuzzDecodeOnly(f *testing.F) {
	f.Add([]byte(`{"id":"t1","project_id":"p7","owner":-3,"title":"hi","done":true}`), uint32(1<<3))
	f.Add([]byte("{\"title\":\"\xff\",\"id\":\"a\\\"b\"}"), uint32(1))
	c, err := CodecFor(typeOf[goodRow]())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, bits uint32) {
		checkOnly(t, c, columnsOf(c, bits), data)
	})
}
