package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
)

// BenchmarkChannelFanout measures app channel messages delivered through
// real WebSockets on loopback: b.N messages published on one topic, each
// delivered to every subscriber. Subscribers are spread over the nodes of
// a cluster sharing the in-memory bus. At most a window of messages is in
// flight, so no subscriber's queue overflows. Compare with BenchmarkFanout
// (synced rows) in the same run.
func BenchmarkChannelFanout(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("subs=1000/nodes=%d", nodes), func(b *testing.B) { benchChannelFanout(b, "memory", nodes, 1000) })
	}
	b.Run("subs=1000/nodes=3/postgres", func(b *testing.B) { benchChannelFanout(b, "postgres", 3, 1000) })
	b.Run("subs=1000/nodes=3/nats", func(b *testing.B) { benchChannelFanout(b, "nats", 3, 1000) })
}

func benchChannelFanout(b *testing.B, kind string, n, subs int) {
	nodes := channelCluster(b, kind, n, core.ChannelConfig{})
	var received atomic.Int64
	target := int64(b.N) * int64(subs)
	done := make(chan struct{})
	progress := make(chan struct{}, 1) // a delivery arrived: the publisher looks at received again
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, subs)
	for i := range conns {
		c := dialRaw(b, nodes[i%n].url, fmt.Sprint("u", i), "b1")
		c.Hello(protocol.ClientFrame{})
		joinRaw(c, "chat:b1", false)
		conns[i] = c.WebSocket()
	}
	marker := []byte(`"type":"message"`)
	for _, c := range conns {
		wg.Add(1)
		go func(c *websocket.Conn) {
			defer wg.Done()
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				if !bytes.Contains(data, marker) {
					continue
				}
				if received.Add(1) == target {
					close(done)
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}(c)
	}
	msg := json.RawMessage(`{"text":"` + strings.Repeat("x", 100) + `"}`)
	const window = 256 // messages in flight
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for need := int64(i-window) * int64(subs); received.Load() < need; {
			<-progress // at most window messages in flight: wait for deliveries
		}
		if err := nodes[i%n].e.Publish(ctx, "chat:b1", msg); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		var st []core.ChannelStats
		for _, nd := range nodes {
			st = append(st, nd.e.ChannelStats())
		}
		b.Fatalf("received %d of %d; channel stats per node %+v", received.Load(), target, st)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(target)/el.Seconds(), "deliveries/s")
	b.ReportMetric(float64(b.N)/el.Seconds(), "messages/s")
	var dropped int64
	for _, nd := range nodes {
		dropped += nd.e.ChannelStats().Dropped
	}
	b.ReportMetric(float64(dropped), "dropped")
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}

// BenchmarkPresenceLeave measures how long the other nodes take to show
// that a connection left: a connection on node 0 joins a presence topic
// watched from nodes 1 and 2, then its TCP connection is cut; the time is
// from the cut until both watchers received the leave. Reported: the
// median and the slowest of b.N rounds.
func BenchmarkPresenceLeave(b *testing.B) {
	for _, kind := range busKinds {
		b.Run(kind, func(b *testing.B) { benchPresenceLeave(b, kind) })
	}
}

func benchPresenceLeave(b *testing.B, kind string) {
	nodes := channelCluster(b, kind, 3, core.ChannelConfig{PublishRate: 1 << 20})
	const topic = "board:b1"
	join := func(c *tidetest.Conn) { joinRaw(c, topic, true) }
	watchers := []*tidetest.Conn{dialRaw(b, nodes[1].url, "w1", "b1"), dialRaw(b, nodes[2].url, "w2", "b1")}
	for _, w := range watchers {
		w.Hello(protocol.ClientFrame{})
		join(w)
	}
	// until reads w's frames until a presence-diff names principal in
	// joins (leave false) or leaves (leave true).
	until := func(w *tidetest.Conn, principal string, leave bool) {
		for {
			f := w.Next()
			if f.Type != protocol.FramePresenceDiff {
				continue
			}
			list := f.Joins
			if leave {
				list = f.Leaves
			}
			if slices.ContainsFunc(list, func(m protocol.Member) bool { return m.Principal == principal }) {
				return
			}
		}
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		who := fmt.Sprint("p", i)
		c := dialRaw(b, nodes[0].url, who, "b1")
		c.Hello(protocol.ClientFrame{})
		join(c)
		for _, w := range watchers {
			until(w, who, false)
		}
		b.StartTimer()
		start := time.Now()
		_ = c.WebSocket().NetConn().Close()
		for _, w := range watchers {
			until(w, who, true)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "ms-max")
}

// BenchmarkPresenceNodeExpiry measures how long a node keeps the members
// of a node that died (stopped announcing without saying goodbye): a
// member announced once by a node that then says nothing, until the
// watcher receives its leave. With PresenceInterval 100 ms and PresenceTTL
// 300 ms it is the TTL plus at most half an interval.
func BenchmarkPresenceNodeExpiry(b *testing.B) {
	f := memfeed.New(memfeed.Options{})
	node := startChanNode(b, core.Config{Feed: f, Logger: slog.New(slog.DiscardHandler), Channels: core.ChannelConfig{PresenceInterval: 100 * time.Millisecond, PresenceTTL: 300 * time.Millisecond}})
	w := dialRaw(b, node.url, "w", "b1")
	w.Hello(protocol.ClientFrame{})
	joinRaw(w, "board:b1", true)
	times := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint("ghost.", i)
		start := time.Now()
		err := f.Broadcast(context.Background(), feed.Broadcast{Kind: feed.BroadcastAnnounce, Node: "ghost", Topic: "board:b1", TTL: 300,
			Members: []protocol.Member{{ID: id, Principal: "ghost"}}})
		if err != nil {
			b.Fatal(err)
		}
		for left := false; !left; {
			fr := w.Next()
			left = slices.ContainsFunc(fr.Leaves, func(m protocol.Member) bool { return m.ID == id })
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "ms-max")
}
