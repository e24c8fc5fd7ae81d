package natsbus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Message headers, part of the stream's wire format (see the package doc)
// for tools that read the stream. Nats-Msg-Id ("<epoch>.<pos>") is
// JetStream's de-duplication id; the Tide-* headers carry what a node needs
// without decoding the body.
const (
	HeaderEpoch = "Tide-Epoch" // the change log's epoch (feed.Feed.Epoch)
	HeaderPos   = "Tide-Pos"   // the change's position, decimal
	HeaderPrev  = "Tide-Prev"  // the position of the change published before it in its chain, decimal
	HeaderBase  = "Tide-Base"  // the position after which its chain started, decimal
)

// msgMeta is what a message's headers say about its place in the stream.
//
// A chain is a run of messages published without a hole: it starts after
// Base (the feed's head when a replicator found the stream empty, or had to
// restart past the feed's retention) and holds every change of the change
// log after Base, in position order; Prev is the position of the change
// before this one in the chain (Base for the first). Successive replicator
// terms continue the chain of the stream's last message.
type msgMeta struct {
	Epoch string        // the change log's epoch
	Pos   feed.Position // the change's position
	Prev  feed.Position // the position of the change before it in its chain
	Base  feed.Position // the position after which its chain starts

	// Rest is how many changes of the change's commit group (Change.Tx)
	// the chain holds after it (they are the next ones): a node that read
	// the change has its whole group, as far as its interest goes, once it
	// has read the messages up to Rest stream sequences after it. Carried
	// in the body; zero for a change without a group or the last of one.
	Rest int
}

// body is the JSON body of a message: the change as feed.Change holds it.
type body struct {
	Pos      uint64          `json:"pos"`
	Resource string          `json:"resource"`
	Op       string          `json:"op"`
	Key      string          `json:"key"`
	Scope    []string        `json:"scope"`
	Row      json.RawMessage `json:"row,omitempty"`
	Origin   string          `json:"origin,omitempty"`
	// PrevKnown and Prev carry Change.PrevKnown and Change.Prev (upserts
	// only), left out when false and empty.
	PrevKnown bool            `json:"prev_known,omitempty"`
	Prev      json.RawMessage `json:"prev,omitempty"`
	// Tx carries Change.Tx (its commit group) and Rest msgMeta.Rest, left
	// out when zero: a message without tx is a group of its own.
	Tx   uint64 `json:"tx,omitempty"`
	Rest int    `json:"rest,omitempty"`
}

// tenantOf returns the tenant of a change: its first scope value, "" if its
// resource has no scope columns.
func tenantOf(c *feed.Change) string {
	if len(c.Scope) == 0 {
		return ""
	}
	return c.Scope[0]
}

// encodeMessage returns the message that publishes c under prefix:
//
//	subject  <prefix>.change.<token(resource)>.<token(tenant)>
//	headers  Nats-Msg-Id: <epoch>.<pos>   Tide-Epoch, Tide-Pos, Tide-Prev, Tide-Base
//	body     {"pos":42,"resource":"todos","op":"upsert","key":"t1",
//	          "scope":["p7"],"row":{...},"origin":"dev-1",
//	          "prev_known":true,"prev":{...},"tx":981,"rest":2}
//
// op is "upsert" or "delete"; row (the new row, or the old one of a delete),
// origin, prev_known and prev (the feed's record of an upsert's previous
// version, Change.PrevKnown and Change.Prev), tx (Change.Tx, the commit
// group) and rest (m.Rest, the changes of the group after this one) are left
// out when empty. m.Pos must equal c.Pos.
func encodeMessage(prefix string, c *feed.Change, m msgMeta) (*nats.Msg, error) {
	if m.Pos != c.Pos {
		return nil, fmt.Errorf("natsbus: meta position %d for a change at %d", m.Pos, c.Pos)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	if c.Op != feed.OpUpsert && c.Op != feed.OpDelete {
		return nil, fmt.Errorf("natsbus: change at %d has invalid op %d", c.Pos, c.Op)
	}
	if c.Resource == "" {
		return nil, fmt.Errorf("natsbus: change at %d has no resource", c.Pos)
	}
	if (c.PrevKnown || len(c.Prev) > 0) && (c.Op != feed.OpUpsert || !c.PrevKnown) {
		return nil, fmt.Errorf("natsbus: change at %d has a previous version, which only an upsert with PrevKnown has", c.Pos)
	}
	if err := checkRest(c.Tx, m.Rest); err != nil {
		return nil, fmt.Errorf("natsbus: change at %d: %w", c.Pos, err)
	}
	data, err := json.Marshal(body{
		Pos: uint64(c.Pos), Resource: c.Resource, Op: c.Op.String(), Key: c.Key,
		Scope: c.Scope, Row: c.Row, Origin: c.Origin, PrevKnown: c.PrevKnown, Prev: c.Prev,
		Tx: c.Tx, Rest: m.Rest,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbus: encode change at %d: %w", c.Pos, err)
	}
	msg := nats.NewMsg(subject(prefix, c.Resource, tenantOf(c)))
	msg.Header.Set(nats.MsgIdHdr, m.Epoch+"."+strconv.FormatUint(uint64(m.Pos), 10))
	msg.Header.Set(HeaderEpoch, m.Epoch)
	msg.Header.Set(HeaderPos, strconv.FormatUint(uint64(m.Pos), 10))
	msg.Header.Set(HeaderPrev, strconv.FormatUint(uint64(m.Prev), 10))
	msg.Header.Set(HeaderBase, strconv.FormatUint(uint64(m.Base), 10))
	msg.Data = data
	return msg, nil
}

// decodeMeta reads a message's headers.
func decodeMeta(h nats.Header) (msgMeta, error) {
	var m msgMeta
	m.Epoch = h.Get(HeaderEpoch)
	var err error
	num := func(name string) feed.Position {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(h.Get(name), 10, 64)
		if err != nil {
			err = fmt.Errorf("natsbus: header %s: %w", name, err)
		}
		return feed.Position(v)
	}
	m.Pos, m.Prev, m.Base = num(HeaderPos), num(HeaderPrev), num(HeaderBase)
	if err != nil {
		return msgMeta{}, err
	}
	return m, m.check()
}

func (m msgMeta) check() error {
	if !protocol.ValidEpoch(m.Epoch) {
		return fmt.Errorf("natsbus: invalid epoch %q", m.Epoch)
	}
	if m.Pos == 0 || m.Prev >= m.Pos || m.Base > m.Prev {
		return fmt.Errorf("natsbus: inconsistent positions: base %d, prev %d, pos %d (want base <= prev < pos)", m.Base, m.Prev, m.Pos)
	}
	return nil
}

var errNotObject = errors.New("row is not a JSON object")

// checkRest checks a message's rest: only a change of a group (tx not
// zero) has others after it, at most feed.MaxCommitGroup-1.
func checkRest(tx uint64, rest int) error {
	switch {
	case rest < 0 || rest >= feed.MaxCommitGroup:
		return fmt.Errorf("rest %d out of range [0, %d)", rest, feed.MaxCommitGroup)
	case rest > 0 && tx == 0:
		return fmt.Errorf("rest %d without a tx", rest)
	}
	return nil
}

// decodeMessage decodes a message made by encodeMessage. It checks the
// headers (decodeMeta), that the body is a change at the headers' position
// with a resource, a valid op and, if present, a row that is a JSON object,
// a previous version only on an upsert that says it is known, as a
// JSON object, and a rest in range, only with a tx. A body without tx (a
// message of an earlier version) decodes with Tx zero: a group of its own.
// The subject is routing only and is not read: the body is the truth that
// fan-out matches.
func decodeMessage(h nats.Header, data []byte) (msgMeta, feed.Change, error) {
	m, err := decodeMeta(h)
	if err != nil {
		return msgMeta{}, feed.Change{}, err
	}
	var b body
	if err := json.Unmarshal(data, &b); err != nil {
		return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body: %w", err)
	}
	c := feed.Change{Pos: feed.Position(b.Pos), Resource: b.Resource, Key: b.Key, Scope: b.Scope, Origin: b.Origin, Tx: b.Tx}
	switch b.Op {
	case "upsert":
		c.Op = feed.OpUpsert
	case "delete":
		c.Op = feed.OpDelete
	default:
		return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body: invalid op %q", b.Op)
	}
	switch {
	case c.Pos != m.Pos:
		return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body at %d, headers at %d", c.Pos, m.Pos)
	case c.Resource == "":
		return msgMeta{}, feed.Change{}, errors.New("natsbus: body: no resource")
	}
	if len(b.Row) > 0 {
		if !isObject(b.Row) {
			return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body: %w", errNotObject)
		}
		c.Row = b.Row
	}
	if b.PrevKnown || len(b.Prev) > 0 {
		switch {
		case c.Op != feed.OpUpsert || !b.PrevKnown:
			return msgMeta{}, feed.Change{}, errors.New("natsbus: body: a previous version on a delete, or without prev_known")
		case len(b.Prev) > 0 && !isObject(b.Prev):
			return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body: prev: %w", errNotObject)
		}
		c.PrevKnown, c.Prev = true, b.Prev
	}
	if err := checkRest(b.Tx, b.Rest); err != nil {
		return msgMeta{}, feed.Change{}, fmt.Errorf("natsbus: body: %w", err)
	}
	m.Rest = b.Rest
	return m, c, nil
}

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}
