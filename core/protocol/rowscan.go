package protocol

import (
	"bytes"
	"encoding"
	"encoding/base64"
	"math"
	"reflect"
	"strconv"
	"time"
	"unsafe"
)

// decodeFast fills the struct v from a JSON row without encoding/json: row
// filters decode every row a subscriber is shown, and reflection through
// encoding/json cost ten times this. It reports false, having possibly set
// some fields, for anything it does not handle the way encoding/json would
// (escaped strings, numbers a field cannot hold, odd layouts); the caller
// then decodes again, from zero, the slow way. FuzzDecodeRowFast checks
// that the two agree.
//
// With share, string and json.RawMessage fields refer to row's bytes
// instead of copies (DecodeShared).
func (c *RowCodec) decodeFast(row []byte, v reflect.Value, share bool) bool {
	p := scanner{b: row}
	p.space()
	if !p.lit("{") {
		return false
	}
	p.space()
	if p.lit("}") {
		p.space()
		return p.i == len(p.b)
	}
	prev := -1 // the field of the last key
	for {
		p.space()
		// Rows nearly always list the columns in one of the orders
		// guesses knows: try the key expected next as a literal before
		// scanning it.
		var f *fieldCodec
		for _, g := range c.guesses[prev+1] {
			if g >= 0 && p.lit(c.fields[g].name) {
				f, prev = &c.fields[g], g
				break
			}
		}
		if f == nil {
			key, ok := p.strBytes()
			if !ok {
				return false
			}
			p.space()
			if !p.lit(":") {
				return false
			}
			if i := c.fieldIndex(key); i >= 0 {
				f, prev = &c.fields[i], i
			}
		}
		p.space()
		if f == nil {
			if !p.value(0) {
				return false
			}
		} else if f.skip && p.skipValue(f) {
			// Left as it is: it decodes, whatever its value.
		} else if !p.decodeField(f, v.Field(f.field), share) {
			return false
		}
		p.space()
		if p.lit(",") {
			continue
		}
		if !p.lit("}") {
			return false
		}
		p.space()
		return p.i == len(p.b)
	}
}

// fieldIndex returns the index in c.fields of the column named name, or -1.
func (c *RowCodec) fieldIndex(name []byte) int {
	for i := range c.fields {
		if c.fields[i].col.Name == string(name) {
			return i
		}
	}
	return -1
}

// skipValue skips the value of a column the codec need not decode (skip),
// and reports whether it did: a string without escapes or control
// characters for a text column (any string decodes into one: encoding/json
// replaces invalid UTF-8), an integer short enough for any value of its
// digits to fit the field (maxDigits). Else it moves nothing.
func (p *scanner) skipValue(f *fieldCodec) bool {
	switch f.col.Kind {
	case KindString:
		return p.plainString()
	case KindInt, KindUint:
		b, i := p.b, p.i
		if i < len(b) && b[i] == '-' && f.col.Kind == KindInt {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		n := i - start
		if n == 0 || n > f.maxDigits || (n > 1 && b[start] == '0') {
			return false
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return false
		}
		p.i = i
		return true
	}
	return false
}

// plainString skips a string without escapes or control characters, and
// reports whether it did (else it moves nothing).
func (p *scanner) plainString() bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	start := p.i + 1
	end := bytes.IndexByte(p.b[start:], '"')
	if end < 0 {
		return false
	}
	if plain, _ := plainBytes(p.b[start : start+end]); !plain {
		return false
	}
	p.i = start + end + 1
	return true
}

// decodeField decodes one value into the field fv; with share, strings
// and raw JSON refer to the input.
func (p *scanner) decodeField(f *fieldCodec, fv reflect.Value, share bool) bool {
	if p.lit("null") {
		if f.isPtr || f.col.Kind.IsArray() {
			fv.SetZero() // as encoding/json does for pointers and slices
		}
		// encoding/json leaves other fields as they are on null.
		return true
	}
	if f.isPtr {
		if fv.IsNil() {
			fv.Set(reflect.New(fv.Type().Elem()))
		}
		fv = fv.Elem()
	}
	if f.col.Kind.IsArray() {
		return p.decodeArray(f, fv, share)
	}
	return p.decodeScalar(f.col.Kind, fv, share)
}

// decodeArray decodes a JSON array into the slice field fv, as a new
// slice (encoding/json's result for a field that was nil): a null element
// is a nil pointer, or the element's zero value.
func (p *scanner) decodeArray(f *fieldCodec, fv reflect.Value, share bool) bool {
	if !p.lit("[") {
		return false
	}
	et, ek := fv.Type().Elem(), f.col.Kind.Elem()
	out := reflect.MakeSlice(fv.Type(), 0, 4)
	p.space()
	if !p.lit("]") {
		for {
			p.space()
			out = reflect.Append(out, reflect.Zero(et))
			if !p.lit("null") {
				ev := out.Index(out.Len() - 1)
				if f.elemPtr {
					ev.Set(reflect.New(et.Elem()))
					ev = ev.Elem()
				}
				if !p.decodeScalar(ek, ev, share) {
					return false
				}
			}
			p.space()
			if p.lit(",") {
				continue
			}
			if !p.lit("]") {
				return false
			}
			break
		}
	}
	fv.Set(out)
	return true
}

// decodeScalar decodes one value of kind k (not an array, not null) into
// fv.
func (p *scanner) decodeScalar(k Kind, fv reflect.Value, share bool) bool {
	switch k {
	case KindString:
		s, ok := p.strBytes()
		if !ok {
			return false
		}
		if share && len(s) > 0 {
			fv.SetString(unsafe.String(&s[0], len(s)))
		} else {
			fv.SetString(string(s))
		}
		return true
	case KindBool:
		switch {
		case p.lit("true"):
			fv.SetBool(true)
		case p.lit("false"):
			fv.SetBool(false)
		default:
			return false
		}
		return true
	case KindInt, KindUint, KindFloat:
		start := p.i
		if !p.number() {
			return false
		}
		// The token is parsed in place: nothing keeps it but an error,
		// which is dropped.
		tok := unsafe.String(&p.b[start], p.i-start)
		bits := fv.Type().Bits()
		switch k {
		case KindInt:
			n, ok := parseInt(tok, bits)
			if !ok {
				return false
			}
			fv.SetInt(n)
		case KindUint:
			n, ok := parseUint(tok, bits)
			if !ok {
				return false
			}
			fv.SetUint(n)
		default:
			x, err := strconv.ParseFloat(tok, bits)
			if err != nil {
				return false
			}
			fv.SetFloat(x)
		}
		return true
	case KindTime:
		start := p.i
		if _, ok := p.str(); !ok {
			return false
		}
		t, ok := fv.Addr().Interface().(*time.Time)
		return ok && t.UnmarshalJSON(p.b[start:p.i]) == nil
	case KindDecimal:
		s, ok := p.strBytes()
		if !ok || !validDecimal(string(s)) {
			return false
		}
		fv.SetString(string(s))
		return true
	case KindText:
		s, ok := p.strBytes()
		if !ok {
			return false
		}
		return fv.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText(s) == nil
	case KindBytes:
		s, ok := p.str()
		if !ok {
			return false
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return false
		}
		fv.SetBytes(b)
		return true
	case KindJSON:
		start := p.i
		if !p.value(0) {
			return false
		}
		if share {
			fv.SetBytes(p.b[start:p.i:p.i])
		} else {
			fv.SetBytes(append([]byte(nil), p.b[start:p.i]...))
		}
		return true
	}
	return false
}

// parseInt is strconv.ParseInt(tok, 10, bits), reporting only whether it
// succeeded. A token of at most 19 decimal digits (every integer a row's
// JSON holds, in practice, nanosecond timestamps included) is parsed in
// one loop without strconv's checks; any other is left to strconv.
func parseInt(tok string, bits int) (int64, bool) {
	d, neg := tok, len(tok) > 0 && tok[0] == '-'
	if neg {
		d = tok[1:]
	}
	u, ok := digits19(d)
	if !ok {
		n, err := strconv.ParseInt(tok, 10, bits)
		return n, err == nil
	}
	var n int64
	switch {
	case !neg && u <= math.MaxInt64:
		n = int64(u)
	case neg && u <= 1<<63:
		n = int64(-u) // two's complement: -(1<<63) is math.MinInt64
	default:
		return 0, false
	}
	if bits < 64 && (n < -1<<(bits-1) || n >= 1<<(bits-1)) {
		return 0, false
	}
	return n, true
}

// parseUint is strconv.ParseUint(tok, 10, bits), reporting only whether it
// succeeded, with parseInt's fast path.
func parseUint(tok string, bits int) (uint64, bool) {
	n, ok := digits19(tok)
	if !ok {
		n, err := strconv.ParseUint(tok, 10, bits)
		return n, err == nil
	}
	if bits < 64 && n >= 1<<bits {
		return 0, false
	}
	return n, true
}

// digits19 returns the value of d when it is 1 to 19 decimal digits (which
// no uint64 overflows).
func digits19(d string) (uint64, bool) {
	if len(d) == 0 || len(d) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(d); i++ {
		c := d[i] - '0'
		if c > 9 {
			return 0, false
		}
		n = n*10 + uint64(c)
	}
	return n, true
}
