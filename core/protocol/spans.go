package protocol

import (
	"reflect"
	"unsafe"
)

// A ValueSpan locates one column's value in a row's JSON text, for feeds
// that render rows themselves and so know where each value is (see
// RowCodec.DecodeSpans): row[Start:End] is the value's JSON text. Verbatim
// reports that the value is a JSON string whose content, row[Start+1:End-1],
// is the string itself: no escape, valid UTF-8. End zero: the row has no
// key for the column.
type ValueSpan struct {
	Start, End uint32
	Verbatim   bool
}

// DecodeSpans is DecodeShared for a row whose values spans locates, one
// per column in Columns order: each column is decoded where its value is,
// without reading the keys, and a Verbatim string is taken as it is. Any
// value it cannot decode that way (or spans that do not fit the row) makes
// it decode the whole row as DecodeShared does. For a row that is a JSON
// object with each column's key at most once, and spans that locate those
// keys' values, it decodes exactly what DecodeShared does; other keys are
// not looked at.
func (c *RowCodec) DecodeSpans(row []byte, spans []ValueSpan, v reflect.Value) error {
	if len(spans) == len(c.fields) && c.decodeSpans(row, spans, v) {
		return nil
	}
	v.SetZero()
	return c.decode(row, v, true)
}

func (c *RowCodec) decodeSpans(row []byte, spans []ValueSpan, v reflect.Value) bool {
	for i := range c.fields {
		f, sp := &c.fields[i], spans[i]
		if sp.End == 0 {
			continue // no key: left as it is
		}
		start, end := int(sp.Start), int(sp.End)
		if start >= end || end > len(row) {
			return false
		}
		if sp.Verbatim && f.col.Kind == KindString {
			if end-start < 2 || row[start] != '"' || row[end-1] != '"' {
				return false
			}
			if f.skip {
				continue // any string decodes into a string
			}
			fv := v.Field(f.field)
			if f.isPtr {
				if fv.IsNil() {
					fv.Set(reflect.New(fv.Type().Elem()))
				}
				fv = fv.Elem()
			}
			if s := row[start+1 : end-1]; len(s) > 0 {
				fv.SetString(unsafe.String(&s[0], len(s)))
			} else {
				fv.SetString("")
			}
			continue
		}
		p := scanner{b: row[:end], i: start}
		if f.skip && p.skipValue(f) {
			// Left as it is: it decodes, whatever its value.
		} else if !p.decodeField(f, v.Field(f.field), true) {
			return false
		}
		if p.i != end {
			return false
		}
	}
	return true
}
