package feed_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

func TestBroadcastRoundTrip(t *testing.T) {
	for _, b := range []feed.Broadcast{
		{Kind: feed.BroadcastMessage, Node: "n1", Topic: "board:b1", From: "alice", Data: json.RawMessage(`{"x":1}`)},
		{Kind: feed.BroadcastJoin, Node: "n1", Topic: "board:b1", Members: []protocol.Member{{ID: "n1.1", Principal: "alice", State: json.RawMessage(`"typing"`)}}},
		{Kind: feed.BroadcastLeave, Node: "n1", Topic: "board:b1", Members: []protocol.Member{{ID: "n1.1", Principal: "alice"}}},
		{Kind: feed.BroadcastAnnounce, Node: "n1", Topic: "board:b1", TTL: 30000, Members: []protocol.Member{{ID: "n1.1"}}},
		{Kind: feed.BroadcastSync, Node: "n2", Topic: "board:b1"},
	} {
		data, err := feed.EncodeBroadcast(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := feed.DecodeBroadcast(data)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Errorf("%s:\n got %+v\nwant %+v", data, got, b)
		}
	}
	html := feed.Broadcast{Kind: feed.BroadcastMessage, Node: "n", Topic: "t", Data: json.RawMessage(`"` + strings.Repeat("<", 5000) + `"`)}
	if data, err := feed.EncodeBroadcast(html); err != nil || len(data) > 5100 {
		t.Errorf("a message of 5000 '<' encodes to %d bytes (%v): HTML characters must not be escaped", len(data), err)
	}
	big := feed.Broadcast{Kind: feed.BroadcastMessage, Node: "n", Topic: "t", Data: json.RawMessage(`"` + strings.Repeat("x", feed.MaxBroadcastBytes) + `"`)}
	if _, err := feed.EncodeBroadcast(big); !errors.Is(err, feed.ErrBroadcastTooLarge) {
		t.Errorf("oversized broadcast: %v", err)
	}
	for _, bad := range []string{``, `[]`, `{"k":0,"n":"n","t":"t"}`, `{"k":9,"n":"n","t":"t"}`, `{"k":1,"n":"n","t":"t"}`, `{"k":2,"t":"t"}`,
		`{"k":2,"n":"n","t":"t","m":[{"id":""}]}`, `{"k":4,"n":"n","t":"t","ttl":-1}`, `{"k":1,"n":"n","t":"t","d":nul}`} {
		if _, err := feed.DecodeBroadcast([]byte(bad)); err == nil {
			t.Errorf("DecodeBroadcast(%q) accepted", bad)
		}
	}
}

// FuzzDecodeBroadcast checks that DecodeBroadcast never panics, that what
// it accepts is well formed, and that it encodes back to an equal value.
func FuzzDecodeBroadcast(f *testing.F) {
	for _, s := range []string{
		`{"k":1,"n":"n1","t":"board:b1","f":"alice","d":{"x":1}}`,
		`{"k":2,"n":"n1","t":"board:b1","m":[{"id":"n1.1","principal":"a","state":[1]}]}`,
		`{"k":4,"n":"n1","t":"board:b1","m":[{"id":"n1.1","principal":"a"}],"ttl":30000}`,
		`{"k":5,"n":"n1","t":"x"}`, `{"k":3}`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := feed.DecodeBroadcast(data)
		if err != nil {
			return
		}
		if b.Node == "" || b.Topic == "" || b.Kind < feed.BroadcastMessage || b.Kind > feed.BroadcastSync {
			t.Fatalf("accepted %+v", b)
		}
		enc, err := feed.EncodeBroadcast(b)
		if errors.Is(err, feed.ErrBroadcastTooLarge) {
			return // escaping grew it
		}
		if err != nil {
			t.Fatalf("re-encode %+v: %v", b, err)
		}
		if _, err := feed.DecodeBroadcast(enc); err != nil {
			t.Fatalf("re-decode %s: %v", enc, err)
		}
	})
}
