package natsbus

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tidesync/tide/core/feed"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, c := range []feed.Change{
		{Pos: 7, Resource: "todos", Op: feed.OpUpsert, Key: "t1", Scope: []string{"p7", "3"}, Row: json.RawMessage(`{"id":"t1","title":"<b>&"}`), Origin: "dev-1"},
		{Pos: 8, Resource: "todos", Op: feed.OpDelete, Key: "t1", Scope: []string{"p.7"}, Row: json.RawMessage(`{"id":"t1"}`)},
		{Pos: 9, Resource: "notes", Op: feed.OpUpsert, Key: "", Scope: nil, Row: json.RawMessage(`{}`)},
		{Pos: 10, Resource: "notes", Op: feed.OpDelete, Key: "k"},
		{Pos: 11, Resource: "todos", Op: feed.OpUpsert, Key: "t1", Scope: []string{"p7"}, Row: json.RawMessage(`{"id":"t1","private":true}`), PrevKnown: true, Prev: json.RawMessage(`{"private":false}`)},
		{Pos: 12, Resource: "todos", Op: feed.OpUpsert, Key: "t2", Scope: []string{"p7"}, Row: json.RawMessage(`{"id":"t2"}`), PrevKnown: true},
	} {
		m := msgMeta{Epoch: "E1", Pos: c.Pos, Prev: c.Pos - 2, Base: 1}
		msg, err := encodeMessage("tide", &c, m)
		if err != nil {
			t.Fatal(err)
		}
		tenant := ""
		if len(c.Scope) > 0 {
			tenant = c.Scope[0]
		}
		if want := subject("tide", c.Resource, tenant); msg.Subject != want {
			t.Errorf("subject %q, want %q", msg.Subject, want)
		}
		if got, want := msg.Header.Get(nats.MsgIdHdr), "E1."+strconv.Itoa(int(c.Pos)); got != want {
			t.Errorf("Nats-Msg-Id %q, want %q", got, want)
		}
		gm, gc, err := decodeMessage(msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("decode %s: %v", msg.Data, err)
		}
		if gm != m || !sameChange(gc, c) {
			t.Errorf("round trip:\n got %+v %+v\nwant %+v %+v", gm, gc, m, c)
		}
	}
}

func sameChange(a, b feed.Change) bool {
	ra, rb, pa, pb := a.Row, b.Row, a.Prev, b.Prev
	a.Row, b.Row, a.Prev, b.Prev = nil, nil, nil, nil
	if len(a.Scope) == 0 && len(b.Scope) == 0 {
		a.Scope, b.Scope = nil, nil
	}
	return reflect.DeepEqual(a, b) && compactEq(ra, rb) && compactEq(pa, pb)
}

func compactEq(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	var va, vb any
	_ = json.Unmarshal(ca.Bytes(), &va)
	_ = json.Unmarshal(cb.Bytes(), &vb)
	return reflect.DeepEqual(va, vb)
}

func TestDecodeRejects(t *testing.T) {
	good := func() (nats.Header, []byte) {
		c := change(5, "items", "t1")
		msg, err := encodeMessage("p", &c, msgMeta{Epoch: "E", Pos: 5, Prev: 4, Base: 0})
		if err != nil {
			t.Fatal(err)
		}
		return msg.Header, msg.Data
	}
	for name, mutate := range map[string]func(h nats.Header, b []byte) []byte{
		"no epoch":        func(h nats.Header, b []byte) []byte { h.Del(HeaderEpoch); return b },
		"bad epoch":       func(h nats.Header, b []byte) []byte { h.Set(HeaderEpoch, "a.b"); return b },
		"pos zero":        func(h nats.Header, b []byte) []byte { h.Set(HeaderPos, "0"); return b },
		"prev not below":  func(h nats.Header, b []byte) []byte { h.Set(HeaderPrev, "5"); return b },
		"base above prev": func(h nats.Header, b []byte) []byte { h.Set(HeaderBase, "5"); return b },
		"pos not number":  func(h nats.Header, b []byte) []byte { h.Set(HeaderPos, "x"); return b },
		"body pos differs": func(h nats.Header, b []byte) []byte {
			return bytes.Replace(b, []byte(`"pos":5`), []byte(`"pos":6`), 1)
		},
		"bad op":      func(h nats.Header, b []byte) []byte { return bytes.Replace(b, []byte(`upsert`), []byte(`merge`), 1) },
		"no resource": func(h nats.Header, b []byte) []byte { return bytes.Replace(b, []byte(`"items"`), []byte(`""`), 1) },
		"row array": func(h nats.Header, b []byte) []byte {
			return []byte(`{"pos":5,"resource":"items","op":"upsert","key":"k","scope":["t1"],"row":[1]}`)
		},
		"not json": func(h nats.Header, b []byte) []byte { return []byte(`{`) },
		"prev array": func(h nats.Header, b []byte) []byte {
			return []byte(`{"pos":5,"resource":"items","op":"upsert","key":"k","row":{},"prev_known":true,"prev":[1]}`)
		},
		"prev null": func(h nats.Header, b []byte) []byte {
			return []byte(`{"pos":5,"resource":"items","op":"upsert","key":"k","row":{},"prev_known":true,"prev":null}`)
		},
		"prev without prev_known": func(h nats.Header, b []byte) []byte {
			return []byte(`{"pos":5,"resource":"items","op":"upsert","key":"k","row":{},"prev":{}}`)
		},
		"prev on a delete": func(h nats.Header, b []byte) []byte {
			return []byte(`{"pos":5,"resource":"items","op":"delete","key":"k","prev_known":true}`)
		},
	} {
		h, b := good()
		b = mutate(h, b)
		if _, _, err := decodeMessage(h, b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add("E1", "5", "4", "0", []byte(`{"pos":5,"resource":"items","op":"upsert","key":"k5","scope":["t1"],"row":{"id":"k5"},"origin":"o"}`))
	f.Add("E1", "5", "4", "4", []byte(`{"pos":5,"resource":"items","op":"delete","key":"k5","scope":[]}`))
	f.Add("", "1", "0", "0", []byte(`{}`))
	f.Add("E", "18446744073709551615", "1", "0", []byte(`{"pos":18446744073709551615,"resource":"r","op":"upsert","row":{"a":[1,2,{"b":null}]}}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"upsert","row":"{}"}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"upsert","row":{"a":1},"prev_known":true,"prev":{ "a" : 2 }}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"upsert","row":{"a":1},"prev_known":true}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"delete","prev_known":false,"prev":null}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"upsert","tx":7,"rest":3}`))
	f.Add("E", "3", "2", "1", []byte(`{"pos":3,"resource":"r","op":"upsert","rest":3}`))
	f.Fuzz(func(t *testing.T, epoch, pos, prev, base string, body []byte) {
		h := nats.Header{}
		h.Set(HeaderEpoch, epoch)
		h.Set(HeaderPos, pos)
		h.Set(HeaderPrev, prev)
		h.Set(HeaderBase, base)
		m, c, err := decodeMessage(h, body)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a message that decodes the same.
		msg, err := encodeMessage("p", &c, m)
		if err != nil {
			t.Fatalf("re-encode %+v %+v: %v", m, c, err)
		}
		m2, c2, err := decodeMessage(msg.Header, msg.Data)
		if err != nil || m2 != m || !sameChange(c, c2) {
			t.Fatalf("re-decode: %+v %+v %v; want %+v %+v", m2, c2, err, m, c)
		}
	})
}
