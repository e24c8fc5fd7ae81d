package pgfeed

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidesync/tide/core/feed"
)

// scanChanges reads rows of (floor, pos, resource, op, key, scope, data,
// origin, prev, tx); pos 0 marks the empty row of a LEFT JOIN. resource, if not
// empty, overrides the column. Rows (data, prev) are compacted
// (compactJSON), as snapshots render them.
//
// Replay and tail read thousands of these per second, so the values are
// decoded straight from Postgres's binary format instead of through
// Rows.Scan's reflection: that halves the Go side of a replay. The
// statement's result types are checked once per query; anything unexpected
// falls back to Scan.
func scanChanges(rows pgx.Rows, resource string) (int64, []feed.Change, error) {
	defer rows.Close()
	lay, fast := layoutOf(rows.FieldDescriptions())
	lay.resource = resource
	var floor int64
	var out []feed.Change
	var mem slab
	for rows.Next() {
		var c feed.Change
		var p int64
		var err error
		if fast {
			p, err = lay.decode(rows.RawValues(), &floor, &c, &mem)
		} else {
			p, err = scanChange(rows, &floor, &c)
		}
		if err != nil {
			return 0, nil, err
		}
		if p == 0 {
			continue
		}
		c.Pos = feed.Position(p)
		if resource != "" {
			c.Resource = resource
		}
		if c.Scope == nil {
			c.Scope = []string{}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	// The statement's one-row outer side keeps the LATERAL's order, so no
	// outer sort is asked of Postgres (it cost a third of a page's time);
	// checking is cheaper than relying on it.
	if !slices.IsSortedFunc(out, byPos) {
		slices.SortFunc(out, byPos)
	}
	return floor, out, nil
}

func byPos(a, b feed.Change) int { return cmp.Compare(a.Pos, b.Pos) }

// layout is how a change row's values arrive: the formats pgx asked
// Postgres for (binary for integers and arrays, text for text and, as pgx
// does for jsonb, usually text for the row).
type layout struct {
	op4       bool   // op is an int4 (coalesce widens it), else an int2
	binaryRow bool   // data and prev are jsonb in binary format: a version byte, then the text
	resource  string // set: every row is of this resource; the column is not read
}

// layoutOf reports the layout of the columns, or false if decode cannot read
// them.
func layoutOf(fds []pgconn.FieldDescription) (layout, bool) {
	var l layout
	if len(fds) != 10 {
		return l, false
	}
	isText := func(fd pgconn.FieldDescription) bool {
		return fd.DataTypeOID == pgtype.TextOID // text and binary formats of text are the same bytes
	}
	bin := func(fd pgconn.FieldDescription, oid uint32) bool {
		return fd.DataTypeOID == oid && fd.Format == pgtype.BinaryFormatCode
	}
	switch {
	case bin(fds[3], pgtype.Int2OID):
	case bin(fds[3], pgtype.Int4OID):
		l.op4 = true
	default:
		return l, false
	}
	if fds[6].DataTypeOID != pgtype.JSONBOID || fds[8].DataTypeOID != pgtype.JSONBOID || fds[8].Format != fds[6].Format {
		return l, false
	}
	l.binaryRow = fds[6].Format == pgtype.BinaryFormatCode
	ok := bin(fds[0], pgtype.Int8OID) && bin(fds[1], pgtype.Int8OID) && isText(fds[2]) &&
		isText(fds[4]) && bin(fds[5], pgtype.TextArrayOID) && isText(fds[7]) && bin(fds[9], pgtype.Int8OID)
	return l, ok
}

func scanChange(rows pgx.Rows, floor *int64, c *feed.Change) (int64, error) {
	var p int64
	var op int16
	var tx int64
	var data, prev []byte // not json.RawMessage, which pgx would re-validate with encoding/json
	if err := rows.Scan(floor, &p, &c.Resource, &op, &c.Key, &c.Scope, &data, &c.Origin, &prev, &tx); err != nil {
		return 0, err
	}
	c.Row, c.Op, c.Tx = compactJSON(nil, data), feed.Op(op), uint64(tx)
	if prev != nil {
		prev = compactJSON(nil, prev)
	}
	setPrev(c, prev)
	return p, nil
}

// setPrev records the stored previous version: NULL (nil) is not recorded,
// JSON null is none.
func setPrev(c *feed.Change, prev []byte) {
	if prev == nil {
		return
	}
	c.PrevKnown = true
	if string(prev) != "null" {
		c.Prev = prev
	}
}

var errBadBinary = errors.New("pgfeed: unexpected binary value in a change row")

// decode decodes one row's raw values into c, copying what it keeps into
// mem (RawValues are reused by the next row). NULL is a nil value.
func (l layout) decode(vals [][]byte, floor *int64, c *feed.Change, mem *slab) (int64, error) {
	if len(vals) != 10 || len(vals[0]) != 8 || len(vals[1]) != 8 || len(vals[9]) != 8 {
		return 0, errBadBinary
	}
	*floor = int64(binary.BigEndian.Uint64(vals[0]))
	p := int64(binary.BigEndian.Uint64(vals[1]))
	if p == 0 {
		return 0, nil
	}
	if l.resource == "" {
		c.Resource = mem.string(vals[2])
	}
	switch {
	case l.op4 && len(vals[3]) == 4:
		c.Op = feed.Op(int32(binary.BigEndian.Uint32(vals[3])))
	case !l.op4 && len(vals[3]) == 2:
		c.Op = feed.Op(int16(binary.BigEndian.Uint16(vals[3])))
	default:
		return 0, fmt.Errorf("%w: op", errBadBinary)
	}
	c.Key = mem.string(vals[4])
	scope, err := decodeTextArray(vals[5], mem)
	if err != nil {
		return 0, err
	}
	c.Scope = scope
	row, err := l.jsonb(vals[6], mem)
	if err != nil {
		return 0, err
	}
	c.Row = row
	c.Origin = mem.string(vals[7])
	prev, err := l.jsonb(vals[8], mem)
	if err != nil {
		return 0, err
	}
	setPrev(c, prev)
	c.Tx = binary.BigEndian.Uint64(vals[9])
	return p, nil
}

// jsonb returns the text of a jsonb value, compacted into mem (jsonb's
// text output puts a space after every ':' and ','; rows travel without
// them); nil for NULL.
func (l layout) jsonb(d []byte, mem *slab) ([]byte, error) {
	if d == nil {
		return nil, nil
	}
	if l.binaryRow {
		if len(d) == 0 || d[0] != 1 { // jsonb binary format: version 1, then the text
			return nil, fmt.Errorf("%w: jsonb version", errBadBinary)
		}
		d = d[1:]
	}
	return mem.compactJSON(d), nil
}

// decodeTextArray decodes a one-dimensional text[] in binary format:
// ndim, has-null flag, element type, then per dimension its length and
// lower bound, then each element as a length (-1 for NULL) and its bytes.
func decodeTextArray(b []byte, mem *slab) ([]string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) < 12 {
		return nil, errBadBinary
	}
	ndim := int32(binary.BigEndian.Uint32(b))
	if ndim == 0 {
		return []string{}, nil
	}
	if ndim != 1 || len(b) < 20 {
		return nil, fmt.Errorf("%w: text[] of %d dimensions", errBadBinary, ndim)
	}
	n := int32(binary.BigEndian.Uint32(b[12:]))
	if n < 0 || int(n) > len(b) {
		return nil, errBadBinary
	}
	b = b[20:]
	out := mem.strings(int(n))
	for i := range out {
		if len(b) < 4 {
			return nil, errBadBinary
		}
		l := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if l < 0 {
			continue // NULL scope value: no condition matches it
		}
		if int(l) > len(b) {
			return nil, errBadBinary
		}
		out[i] = mem.string(b[:l])
		b = b[l:]
	}
	return out, nil
}
