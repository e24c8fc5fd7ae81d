package logrepl

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// relation is what a Relation message told about a table: its name and
// columns, which later row messages refer to by the relation's id.
type relation struct {
	name string // schema.table
	cols []relColumn
}

type relColumn struct {
	name string
	typ  uint32
	key  bool
}

// assembler turns the pgoutput messages of a stream (proto_version 1) into
// transactions, cut into pieces at the piece limits.
//
// With proto_version 1 the server sends a transaction only once it has
// committed, whole, between a Begin and a Commit message, in commit order;
// a transaction that rolled back is never sent.
type assembler struct {
	maxChanges int
	maxBytes   int

	rels map[uint32]*relation

	inTx  bool
	skip  bool // the transaction is at or below the confirmed position
	tx    *Tx  // the piece being filled
	bytes int  // the piece's approximate size
	part  int
	seen  int // changes of the transaction in earlier pieces
}

func newAssembler(maxChanges, maxBytes int) *assembler {
	return &assembler{maxChanges: maxChanges, maxBytes: maxBytes, rels: map[uint32]*relation{}}
}

// message reads one pgoutput message. It returns a piece to deliver when
// the message completes one (a commit, or a change that reaches a piece
// limit), and end > 0 when the message ends a transaction that has nothing
// to deliver (no changes, or one already confirmed): its position may then
// be confirmed without a handler. confirmed is the consumer's confirmed
// position: a transaction that committed below it was accepted before and
// is dropped.
func (a *assembler) message(data []byte, confirmed uint64) (piece *Tx, end uint64, err error) {
	m, err := parse(data)
	if err != nil {
		return nil, 0, err
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		if a.inTx {
			return nil, 0, malformed("Begin of transaction %d inside transaction %d", m.Xid, a.tx.XID)
		}
		a.inTx, a.part, a.bytes, a.seen = true, 0, 0, 0
		a.skip = uint64(m.FinalLSN) < confirmed
		a.tx = &Tx{XID: m.Xid, CommitLSN: uint64(m.FinalLSN), CommitTime: m.CommitTime}
	case *pglogrepl.CommitMessage:
		if !a.inTx {
			return nil, 0, malformed("Commit at %s outside a transaction", m.CommitLSN)
		}
		if uint64(m.CommitLSN) != a.tx.CommitLSN {
			return nil, 0, malformed("Commit at %s of the transaction begun for %s", m.CommitLSN, pglogrepl.LSN(a.tx.CommitLSN))
		}
		tx := a.tx
		a.inTx, a.tx = false, nil
		tx.EndLSN = uint64(m.TransactionEndLSN)
		tx.CommitTime = m.CommitTime
		if a.skip || (a.part == 0 && len(tx.Changes) == 0 && len(tx.Messages) == 0) {
			return nil, tx.EndLSN, nil
		}
		tx.Part = a.part
		return tx, 0, nil
	case *pglogrepl.RelationMessage:
		r := &relation{name: m.Namespace + "." + m.RelationName, cols: make([]relColumn, len(m.Columns))}
		for i, c := range m.Columns {
			r.cols[i] = relColumn{name: c.Name, typ: c.DataType, key: c.Flags&1 != 0}
		}
		a.rels[m.RelationID] = r
	case *pglogrepl.InsertMessage:
		r, err := a.relation(m.RelationID)
		if err != nil {
			return nil, 0, err
		}
		row, err := r.row(m.Tuple, false)
		if err != nil {
			return nil, 0, err
		}
		return a.add(Change{Table: r.name, Op: OpInsert, New: row})
	case *pglogrepl.UpdateMessage:
		r, err := a.relation(m.RelationID)
		if err != nil {
			return nil, 0, err
		}
		c := Change{Table: r.name, Op: OpUpdate}
		if c.New, err = r.row(m.NewTuple, false); err != nil {
			return nil, 0, err
		}
		if m.OldTuple != nil {
			c.OldKeyOnly = m.OldTupleType == pglogrepl.UpdateMessageTupleTypeKey
			if c.Old, err = r.row(m.OldTuple, c.OldKeyOnly); err != nil {
				return nil, 0, err
			}
		}
		return a.add(c)
	case *pglogrepl.DeleteMessage:
		r, err := a.relation(m.RelationID)
		if err != nil {
			return nil, 0, err
		}
		c := Change{Table: r.name, Op: OpDelete, OldKeyOnly: m.OldTupleType == pglogrepl.DeleteMessageTupleTypeKey}
		if c.Old, err = r.row(m.OldTuple, c.OldKeyOnly); err != nil {
			return nil, 0, err
		}
		return a.add(c)
	case *pglogrepl.TruncateMessage:
		if !a.inTx {
			return nil, 0, malformed("Truncate outside a transaction")
		}
		var piece *Tx
		for _, id := range m.RelationIDs {
			r, err := a.relation(id)
			if err != nil {
				return nil, 0, err
			}
			// A TRUNCATE of many tables is one message, so it cuts at
			// most one piece: the rest may pass a limit by the number of
			// tables it names.
			p, _, _ := a.add(Change{Table: r.name, Op: OpTruncate})
			if piece == nil {
				piece = p
			}
		}
		return piece, 0, nil
	case *pglogrepl.LogicalDecodingMessage:
		// Only transactional messages belong to a transaction; the others
		// are delivered by the server as they are emitted, whatever
		// becomes of their transaction, and carry nothing for the
		// consumer.
		if !m.Transactional || !a.inTx || a.skip {
			return nil, 0, nil
		}
		a.tx.Messages = append(a.tx.Messages, Message{Prefix: m.Prefix, Content: append([]byte(nil), m.Content...), Changes: a.seen + len(a.tx.Changes)})
		a.bytes += changeOverhead + len(m.Prefix) + len(m.Content)
	default:
		// Type and Origin messages carry nothing the consumer delivers.
	}
	return nil, 0, nil
}

// changeOverhead is what a change costs beyond its values, roughly, in
// the piece size count; columnOverhead, per column.
const (
	changeOverhead = 64
	columnOverhead = 48
)

// add appends c to the current piece. When the piece is full, it is
// returned, and c starts the next one: a piece is cut only when a change
// does not fit, so the last piece of a transaction is never empty.
func (a *assembler) add(c Change) (*Tx, uint64, error) {
	if !a.inTx {
		return nil, 0, malformed("%s of %s outside a transaction", c.Op, c.Table)
	}
	if a.skip {
		return nil, 0, nil
	}
	size := changeOverhead
	for _, row := range [][]Column{c.New, c.Old} {
		for _, col := range row {
			size += columnOverhead
			if col.Value != nil {
				size += len(*col.Value)
			}
		}
	}
	var piece *Tx
	if n := len(a.tx.Changes); n > 0 && (n >= a.maxChanges || a.bytes+size > a.maxBytes) {
		piece = a.tx
		piece.Part, piece.More = a.part, true
		a.part++
		a.bytes = 0
		a.seen += len(piece.Changes)
		a.tx = &Tx{XID: piece.XID, CommitLSN: piece.CommitLSN, CommitTime: piece.CommitTime}
	}
	a.tx.Changes = append(a.tx.Changes, c)
	a.bytes += size
	return piece, 0, nil
}

func (a *assembler) relation(id uint32) (*relation, error) {
	r, ok := a.rels[id]
	if !ok {
		return nil, malformed("row of relation %d before its Relation message", id)
	}
	return r, nil
}

// row converts a tuple of r. keyOnly tuples carry r's key columns; the
// server sends the others as NULL, which row reports as not sent (nil).
func (r *relation) row(t *pglogrepl.TupleData, keyOnly bool) ([]Column, error) {
	if t == nil {
		return nil, malformed("row change of %s without a row", r.name)
	}
	if len(t.Columns) != len(r.cols) {
		return nil, malformed("row of %s with %d columns; its Relation message had %d", r.name, len(t.Columns), len(r.cols))
	}
	row := make([]Column, len(r.cols))
	for i, c := range t.Columns {
		rc := r.cols[i]
		col := Column{Name: rc.name, Type: rc.typ, Key: rc.key}
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			col.Unchanged = true
		case pglogrepl.TupleDataTypeText:
			s := string(c.Data)
			col.Value = &s
		default:
			// 'b' (binary) comes only when asked for, which this package
			// does not do.
			return nil, malformed("column %s of %s in format %q", rc.name, r.name, c.DataType)
		}
		row[i] = col
	}
	return row, nil
}

// parse decodes one pgoutput message with pglogrepl.
//
// pglogrepl trusts the server: it indexes messages without bounds checks
// and allocates what a length field says. So parse first checks the length
// fields that size an allocation (tuple values, a Truncate's table list)
// against the message, and turns any other out-of-range read into a
// CodeMalformed error: bad bytes are an error, never a crash.
func parse(data []byte) (m pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, malformed("empty pgoutput message")
	}
	if err := checkSizes(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, malformed("pgoutput message %q of %d bytes: %v", data[0], len(data), r)
		}
	}()
	m, err = pglogrepl.Parse(data)
	if err != nil {
		return nil, malformed("pgoutput message %q of %d bytes: %v", data[0], len(data), err)
	}
	return m, nil
}

// checkSizes checks the length fields of data that pglogrepl would
// allocate by.
func checkSizes(data []byte) error {
	body := data[1:]
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeInsert: // relation id, 'N', tuple
		if len(body) < 5 {
			return malformed("Insert of %d bytes", len(data))
		}
		_, err := checkTuple(body[5:])
		return err
	case pglogrepl.MessageTypeUpdate: // relation id, ['K'|'O' tuple], 'N' tuple
		if len(body) < 5 {
			return malformed("Update of %d bytes", len(data))
		}
		rest := body[4:]
		if rest[0] == 'K' || rest[0] == 'O' {
			n, err := checkTuple(rest[1:])
			if err != nil {
				return err
			}
			rest = rest[1+n:]
			if len(rest) == 0 || rest[0] != 'N' {
				return malformed("Update without a new row")
			}
		}
		_, err := checkTuple(rest[1:])
		return err
	case pglogrepl.MessageTypeDelete: // relation id, 'K'|'O', tuple
		if len(body) < 5 {
			return malformed("Delete of %d bytes", len(data))
		}
		_, err := checkTuple(body[5:])
		return err
	case pglogrepl.MessageTypeTruncate: // count, options, relation ids
		if len(body) < 5 {
			return malformed("Truncate of %d bytes", len(data))
		}
		if n := uint64(binary.BigEndian.Uint32(body)); n*4 != uint64(len(body)-5) {
			return malformed("Truncate of %d tables in %d bytes", n, len(data))
		}
	}
	return nil
}

// checkTuple checks a TupleData's value lengths against b and returns its
// size.
func checkTuple(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, malformed("row of %d bytes", len(b))
	}
	n := int(binary.BigEndian.Uint16(b))
	at := 2
	for i := range n {
		if at >= len(b) {
			return 0, malformed("row of %d columns ends at column %d", n, i)
		}
		kind := b[at]
		at++
		switch kind {
		case 'n', 'u':
		case 't', 'b':
			if len(b)-at < 4 {
				return 0, malformed("row ends in the length of column %d", i)
			}
			size := uint64(binary.BigEndian.Uint32(b[at:]))
			at += 4
			if size > uint64(len(b)-at) {
				return 0, malformed("column %d of %d bytes in a row of %d", i, size, len(b))
			}
			at += int(size)
		default:
			return 0, malformed("column %d of kind %q", i, kind)
		}
	}
	return at, nil
}

// formatLSN writes a WAL position as Postgres does (%X/%X).
func formatLSN(lsn uint64) string { return fmt.Sprint(pglogrepl.LSN(lsn)) }
