package pgfeed

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
)

// Snapshots read a row's columns and encode its JSON in Go rather than
// build it in SQL with jsonb_build_object, which costs Postgres several
// times a plain read of the row. The JSON must be byte for byte what a
// change of the same row carries (the capture's rowExpr, compacted by
// compactJSON), so that a row is one text whether a client got it from a
// snapshot or a replay: the keys in jsonb's order (shorter names first,
// then bytewise), values as to_jsonb renders them, no spaces. Column types
// whose to_jsonb text is simple are read raw (mostly in binary) and
// rendered here; any other type is read as the text of the capture's own
// expression (valueExpr) and compacted, which is identical by
// construction.

// Type OIDs of the columns a snapshot renders itself.
const (
	oidBool    = 16
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidText    = 25
	oidJSON    = 114
	oidVarchar = 1043
	oidUUID    = 2950
	oidJSONB   = 3802
)

// colEnc is how a snapshot renders one column's value.
type colEnc uint8

const (
	encRaw    colEnc = iota // the text of valueExpr: JSON, compacted
	encString               // text or varchar: a JSON string
	encInt                  // int2, int4, int8: a JSON number
	encBool                 // boolean
	encBase64               // bytea of a KindBytes column: a base64 string
	encUUID                 // uuid: a JSON string of its canonical text
	encTime                 // the to_char text of a KindTime column: a JSON string, NULL as null
	encJSON                 // json or jsonb, read as jsonb: its text, compacted
)

// snapCol is one column of a snapshot row, in JSON key order.
type snapCol struct {
	col    int    // index in Schema.Columns
	prefix []byte // `"name":`, with a leading comma except for the first key
	expr   string // what the snapshot selects for it from the table aliased t
	enc    colEnc
}

// snapshotColumns returns the columns of p's rows in jsonb's key order and
// how each is read and rendered.
func (p *plan) snapshotColumns() []snapCol {
	order := make([]int, len(p.cols))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return jsonbKeyCompare(p.s.Columns[a].Name, p.s.Columns[b].Name) })
	out := make([]snapCol, len(order))
	for j, i := range order {
		var prefix []byte
		if j > 0 {
			prefix = append(prefix, ',')
		}
		prefix = jsontext.AppendString(prefix, p.s.Columns[i].Name)
		prefix = append(prefix, ':')
		col := "t." + p.cols[i]
		sc := snapCol{col: i, prefix: prefix, expr: col}
		kind := p.s.Columns[i].Kind
		switch typ := p.types[i]; {
		case kind == protocol.KindTime && (typ == oidTimestamptz || typ == oidTimestamp || typ == oidDate):
			sc.enc, sc.expr = encTime, p.timeText(col, typ)
		case kind.IsArray() || kind == protocol.KindDecimal || kind == protocol.KindText && typ != oidText && typ != oidVarchar:
			// Rendered as the capture's expression renders them.
			sc.enc, sc.expr = encRaw, "("+p.valueExpr("t", i)+")::text"
		case kind == protocol.KindBytes && typ == oidBytea:
			sc.enc = encBase64
		case typ == oidText || typ == oidVarchar:
			sc.enc = encString
		case typ == oidInt2 || typ == oidInt4 || typ == oidInt8:
			sc.enc = encInt
		case typ == oidBool:
			sc.enc = encBool
		case typ == oidUUID:
			sc.enc = encUUID
		case typ == oidJSON:
			sc.enc, sc.expr = encJSON, col+"::jsonb"
		case typ == oidJSONB:
			sc.enc = encJSON
		default:
			sc.enc, sc.expr = encRaw, "("+p.valueExpr("t", i)+")::text"
		}
		out[j] = sc
	}
	return out
}

// jsonbKeyCompare orders object keys as jsonb stores them: shorter first,
// equal lengths bytewise.
func jsonbKeyCompare(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendSnapshotRow appends the JSON object of one row whose values (the
// raw values of cols, in order, in the formats fds say) are vals. With
// spans (one per column of the schema, in its order), it also records
// where each value is in the object (see protocol.ValueSpan).
func appendSnapshotRow(dst []byte, cols []snapCol, fds []pgconn.FieldDescription, vals [][]byte, spans []protocol.ValueSpan) ([]byte, error) {
	base := len(dst)
	dst = append(dst, '{')
	for j := range cols {
		c := &cols[j]
		dst = append(dst, c.prefix...)
		start := len(dst)
		if v := vals[j]; v != nil && (c.enc == encString || c.enc == encUUID && fds[j].Format != pgtype.BinaryFormatCode) {
			var verbatim bool
			dst, verbatim = appendJSONBStringVerbatim(dst, v)
			if spans != nil {
				spans[c.col] = protocol.ValueSpan{Start: uint32(start - base), End: uint32(len(dst) - base), Verbatim: verbatim}
			}
			continue
		}
		var err error
		if dst, err = appendValue(dst, c.enc, fds[j].Format, vals[j]); err != nil {
			return nil, fmt.Errorf("pgfeed: snapshot column %s: %w", c.prefix, err)
		}
		if spans != nil {
			// A uuid read in binary renders as plain hex, but is no
			// string's text here: no verbatim claim is needed.
			spans[c.col] = protocol.ValueSpan{Start: uint32(start - base), End: uint32(len(dst) - base)}
		}
	}
	return append(dst, '}'), nil
}

// appendValue appends one column's JSON value, read in format (text or
// binary); nil is SQL NULL.
func appendValue(dst []byte, enc colEnc, format int16, v []byte) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	bin := format == pgtype.BinaryFormatCode
	switch enc {
	case encString, encTime:
		return appendJSONBString(dst, v), nil
	case encInt:
		if !bin {
			return append(dst, v...), nil
		}
		switch len(v) {
		case 2:
			return strconv.AppendInt(dst, int64(int16(binary.BigEndian.Uint16(v))), 10), nil
		case 4:
			return strconv.AppendInt(dst, int64(int32(binary.BigEndian.Uint32(v))), 10), nil
		case 8:
			return strconv.AppendInt(dst, int64(binary.BigEndian.Uint64(v)), 10), nil
		}
		return nil, errBadBinary
	case encBool:
		if len(v) != 1 {
			return nil, errBadBinary
		}
		if v[0] == 1 || v[0] == 't' {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case encBase64:
		if !bin {
			// The text format is hex (bytea_output = hex): \x, then two
			// digits a byte.
			if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
				return nil, fmt.Errorf("%w: bytea text is not hex", errBadBinary)
			}
			raw := make([]byte, hex.DecodedLen(len(v)-2))
			if _, err := hex.Decode(raw, v[2:]); err != nil {
				return nil, err
			}
			v = raw
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v)
		return append(dst, '"'), nil
	case encUUID:
		if !bin {
			return appendJSONBString(dst, v), nil
		}
		if len(v) != 16 {
			return nil, errBadBinary
		}
		var buf [36]byte
		hex.Encode(buf[0:8], v[0:4])
		buf[8] = '-'
		hex.Encode(buf[9:13], v[4:6])
		buf[13] = '-'
		hex.Encode(buf[14:18], v[6:8])
		buf[18] = '-'
		hex.Encode(buf[19:23], v[8:10])
		buf[23] = '-'
		hex.Encode(buf[24:], v[10:])
		dst = append(dst, '"')
		dst = append(dst, buf[:]...)
		return append(dst, '"'), nil
	case encJSON:
		if bin {
			if len(v) == 0 || v[0] != 1 { // jsonb binary format: version 1, then the text
				return nil, fmt.Errorf("%w: jsonb version", errBadBinary)
			}
			v = v[1:]
		}
		return compactJSON(dst, v), nil
	}
	return compactJSON(dst, v), nil // encRaw
}

// appendJSONBString appends s as a JSON string escaped as Postgres's
// escape_json does: quote, backslash and the control characters, the five
// with short escapes as those, the others as \u00xx in lower-case hex;
// everything else (non-ASCII included) as is.
func appendJSONBString(dst, s []byte) []byte {
	i, _ := jsontext.EscapeIndex(s)
	return appendJSONBStringFrom(dst, s, i)
}

// appendJSONBStringVerbatim is appendJSONBString, also reporting whether it
// wrote s verbatim: between quotes without an escape, and valid UTF-8 (a
// protocol.ValueSpan's Verbatim). One scan finds both for ASCII text.
func appendJSONBStringVerbatim(dst, s []byte) ([]byte, bool) {
	i, ascii := jsontext.EscapeIndex(s)
	if i < len(s) {
		return appendJSONBStringFrom(dst, s, i), false
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), ascii || utf8.Valid(s)
}

// appendJSONBStringFrom is appendJSONBString of s whose first byte to
// escape is at first (len(s) if none).
func appendJSONBStringFrom(dst, s []byte, first int) []byte {
	dst = append(dst, '"')
	start := 0
	for i := first; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			const digits = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', digits[c>>4], digits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compactJSON appends src, a JSON text, without the whitespace outside its
// strings: what encoding/json.Compact does for valid JSON, in one pass and
// without validating. jsonb's text output has a space after every ':' and
// ',' and none elsewhere; rows are sent compact.
func compactJSON(dst, src []byte) []byte {
	start := 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '"':
			// Skip the string: to the next quote not escaped.
			for i++; i < len(src) && src[i] != '"'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case ' ', '\t', '\n', '\r':
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[min(start, len(src)):]...)
}
