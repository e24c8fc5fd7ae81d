package feedtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// RunBroadcaster is the conformance suite of feed.Broadcaster: b is a
// transport shared by the nodes of a cluster (one value may stand for all
// of them). It checks that a broadcast sent after a watch began reaches
// every watcher once, in the sender's order and unchanged, that a
// broadcast above feed.MaxBroadcastBytes is refused with
// feed.ErrBroadcastTooLarge, and that a watcher whose context ended
// receives nothing more.
func RunBroadcaster(t *testing.T, b feed.Broadcaster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure bound only
	defer cancel()
	topic := fmt.Sprintf("conformance:%d", time.Now().UnixNano())
	type watcher struct {
		mu   sync.Mutex
		got  []feed.Broadcast
		more chan struct{}
	}
	watch := func(wctx context.Context) *watcher {
		w := &watcher{more: make(chan struct{}, 1)}
		err := b.WatchBroadcasts(wctx, func(bc feed.Broadcast) {
			if bc.Topic != topic {
				return // another test's
			}
			w.mu.Lock()
			w.got = append(w.got, bc)
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Fatalf("WatchBroadcasts: %v", err)
		}
		return w
	}
	wait := func(w *watcher, n int) []feed.Broadcast {
		t.Helper()
		for {
			w.mu.Lock()
			got := append([]feed.Broadcast(nil), w.got...)
			w.mu.Unlock()
			if len(got) >= n {
				return got
			}
			select {
			case <-w.more:
			case <-ctx.Done():
				t.Fatalf("received %d of %d broadcasts", len(got), n)
			}
		}
	}
	w1, w2 := watch(ctx), watch(ctx)
	stopped, stop := context.WithCancel(ctx)
	defer stop()
	w3 := watch(stopped)
	const n = 50
	var sent []feed.Broadcast
	for i := range n {
		bc := feed.Broadcast{Kind: feed.BroadcastMessage, Node: "n1", Topic: topic, From: "p", Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if i%5 == 4 {
			bc = feed.Broadcast{Kind: feed.BroadcastAnnounce, Node: "n1", Topic: topic, TTL: 1000,
				Members: []protocol.Member{{ID: fmt.Sprint("n1.", i), Principal: "p", State: json.RawMessage(`{"x":1}`)}}}
		}
		if err := b.Broadcast(ctx, bc); err != nil {
			t.Fatalf("Broadcast: %v", err)
		}
		sent = append(sent, bc)
		if i == 9 {
			wait(w3, 10)
			stop() // w3 hears nothing after this
		}
	}
	last := feed.Broadcast{Kind: feed.BroadcastSync, Node: "n1", Topic: topic}
	if err := b.Broadcast(ctx, last); err != nil {
		t.Fatalf("Broadcast: %v", err)
	}
	sent = append(sent, last)
	for i, w := range []*watcher{w1, w2} {
		got := wait(w, len(sent))
		if len(got) != len(sent) {
			t.Fatalf("watcher %d received %d broadcasts, want %d", i, len(got), len(sent))
		}
		for k := range sent {
			g, _ := feed.EncodeBroadcast(got[k])
			s, _ := feed.EncodeBroadcast(sent[k])
			if string(g) != string(s) {
				t.Fatalf("watcher %d: broadcast %d is %s, want %s", i, k, g, s)
			}
		}
	}
	// w1 has seen the last broadcast, sent after w3 stopped; w3 may have
	// been between two deliveries when it stopped, never past the end.
	w3.mu.Lock()
	n3 := len(w3.got)
	w3.mu.Unlock()
	if n3 == len(sent) {
		t.Errorf("a watcher whose context ended received every broadcast")
	}

	big := feed.Broadcast{Kind: feed.BroadcastMessage, Node: "n1", Topic: topic, Data: json.RawMessage(`"` + strings.Repeat("x", feed.MaxBroadcastBytes) + `"`)}
	if err := b.Broadcast(ctx, big); !errors.Is(err, feed.ErrBroadcastTooLarge) {
		t.Errorf("Broadcast of %d bytes: %v, want ErrBroadcastTooLarge", feed.MaxBroadcastBytes, err)
	}
}
