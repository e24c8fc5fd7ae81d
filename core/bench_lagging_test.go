package core

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/tidesync/tide/core/feed"
)

// BenchmarkLaggingSubscriptions measures the status page's list of the
// subscriptions most behind (Engine.LaggingSubscriptions, top 20) over
// 10,000 subscriptions: one per connection, and four per connection, with
// a live batch queued on every tenth connection.
//
//	go test ./core -run '^$' -bench LaggingSubscriptions -benchmem
func BenchmarkLaggingSubscriptions(b *testing.B) {
	for _, perConn := range []int{1, 4} {
		b.Run(fmt.Sprintf("subs=10000/per_conn=%d", perConn), func(b *testing.B) {
			e, r := hpEngine(b, false)
			defer e.cancel()
			sc := hpScope(r.schema, "scope", "s0")
			for i := range 10_000 / perConn {
				c := &conn{e: e, subs: map[string]*subscription{}, origin: "web-" + strconv.Itoa(i)}
				p := hpPrincipal(i)
				c.principal.Store(&p)
				c.out.init(e.cfg.SendBuffer)
				for k := range perConn {
					s := newSubscription(c, strconv.Itoa(k), r, sc, e.cfg.PageSize)
					s.state, s.delivered = subLive, feed.Position(1_000_000-(i*perConn+k)%5000)
					c.subs[s.id] = s
					if i%10 == 0 && k == 0 {
						c.out.push(outItem{sub: s, live: liveBatch{entries: make([][]byte, 3), pos: []feed.Position{1, 2, 3}, bytes: 300}})
					}
				}
				e.conns[c] = struct{}{}
			}
			b.ReportAllocs()
			for b.Loop() {
				if got := e.LaggingSubscriptions(1_000_000, 20); len(got) != 20 {
					b.Fatalf("%d subscriptions, want 20", len(got))
				}
			}
		})
	}
}
