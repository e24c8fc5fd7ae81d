package protocol

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// decodeChangesFast decodes a changes frame in exactly the layout tide's
// server writes (fields in its order, no whitespace), which is nearly every
// frame a client receives, without encoding/json's reflection: rows are
// located by a validating scan and returned as slices of data, not copies.
// It reports false for anything else (another frame type, another layout,
// escapes it does not handle), and the caller falls back to encoding/json;
// FuzzDecodeChangesFast checks the two agree wherever it answers.
func decodeChangesFast(data []byte) (ServerFrame, bool) {
	var f ServerFrame
	p := scanner{b: data}
	if !p.lit(`{"v":1,"type":"changes"`) {
		return f, false
	}
	f.V, f.Type = 1, FrameChanges
	if p.lit(`,"id":`) {
		var ok bool
		if f.ID, ok = p.str(); !ok {
			return f, false
		}
	}
	if !p.lit(`,"cursor":`) {
		return f, false
	}
	var ok bool
	if f.Cursor, ok = p.str(); !ok {
		return f, false
	}
	// Polling responses carry "more".
	if p.lit(`,"more":true`) {
		f.More = true
	} else {
		p.lit(`,"more":false`)
	}
	if !p.lit(`,"entries":[`) {
		return f, false
	}
	if !p.lit(`]`) {
		for {
			e, ok := p.entry()
			if !ok {
				return f, false
			}
			f.Entries = append(f.Entries, e)
			if p.lit(`]`) {
				break
			}
			if !p.lit(`,`) {
				return f, false
			}
		}
	}
	if !p.lit(`}`) || p.i != len(p.b) {
		return f, false
	}
	return f, true
}

type scanner struct {
	b []byte
	i int
}

// lit consumes s if the input continues with it.
func (p *scanner) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str consumes a JSON string without escapes and returns its value.
// Strings with escapes or invalid UTF-8 are left to encoding/json, which
// decodes the one and replaces the other.
func (p *scanner) str() (string, bool) {
	s, ok := p.strBytes()
	return string(s), ok
}

// strBytes is str, returning the string's bytes in the input.
func (p *scanner) strBytes() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	end := bytes.IndexByte(p.b[start:], '"')
	if end < 0 {
		return nil, false
	}
	s := p.b[start : start+end]
	plain, ascii := plainBytes(s)
	if !plain || !ascii && !utf8.Valid(s) {
		return nil, false
	}
	p.i = start + end + 1
	return s, true
}

func (p *scanner) entry() (Entry, bool) {
	var e Entry
	var ok bool
	switch {
	case p.lit(`{"op":"upsert","key":`):
		e.Op = "upsert"
	case p.lit(`{"op":"delete","key":`):
		e.Op = "delete"
	default:
		return e, false
	}
	if e.Key, ok = p.str(); !ok {
		return e, false
	}
	if p.lit(`,"row":`) {
		start := p.i
		if p.i < len(p.b) && p.b[p.i] == 'n' {
			return e, false // null: encoding/json's RawMessage rules decide
		}
		if !p.value(0) {
			return e, false
		}
		e.Row = json.RawMessage(p.b[start:p.i])
	}
	if p.lit(`,"origin":`) {
		if e.Origin, ok = p.str(); !ok {
			return e, false
		}
	}
	if p.lit(`,"resource":`) {
		if e.Resource, ok = p.str(); !ok {
			return e, false
		}
	}
	return e, p.lit(`}`)
}

// maxScanDepth bounds nesting in rows; deeper rows go to encoding/json.
const maxScanDepth = 64

// value consumes one JSON value, checking its grammar, with whitespace
// allowed where JSON allows it (rows from Postgres have some).
func (p *scanner) value(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	p.space()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		p.space()
		if p.lit(`}`) {
			return true
		}
		for {
			p.space()
			if !p.anyString() {
				return false
			}
			p.space()
			if !p.lit(`:`) || !p.value(depth+1) {
				return false
			}
			p.space()
			if p.lit(`}`) {
				return true
			}
			if !p.lit(`,`) {
				return false
			}
		}
	case c == '[':
		p.i++
		p.space()
		if p.lit(`]`) {
			return true
		}
		for {
			if !p.value(depth + 1) {
				return false
			}
			p.space()
			if p.lit(`]`) {
				return true
			}
			if !p.lit(`,`) {
				return false
			}
		}
	case c == '"':
		return p.anyString()
	case c == 't':
		return p.lit("true")
	case c == 'f':
		return p.lit("false")
	case c == 'n':
		return p.lit("null")
	default:
		return p.number()
	}
}

func (p *scanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// anyString consumes a JSON string, escapes included, checking them.
func (p *scanner) anyString() bool {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return false
	}
	start := p.i + 1
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			if !utf8.Valid(p.b[start:i]) {
				return false // encoding/json would replace it: leave it to it
			}
			p.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(p.b) {
				return false
			}
			switch p.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.b) {
					return false
				}
				for _, h := range p.b[i+1 : i+5] {
					if !isHex(h) {
						return false
					}
				}
				i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *scanner) number() bool {
	b, i := p.b, p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	p.i = i
	return true
}
