package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/jsontext"
)

// Benchmarks of the fan-out's hot paths, below the socket (cmd/tideload
// measures the whole path over real WebSockets, and BenchmarkFanout in
// bench_fanout_test.go the live path in one process):
//
//	go test ./core -run '^$' -bench 'EncodeEntries|LiveFrame|Match|RowFilter' -benchmem
//
// The row is the one cmd/tideload writes: five columns, a 64-byte body.

type hpItem struct {
	ID     string `tide:"id,pk"`
	Scope  string `tide:"scope,scope"`
	Tenant string `tide:"tenant"`
	Body   string `tide:"body"`
	SentNS int64  `tide:"sent_ns"`
}

const hpBody = "lorem ipsum dolor sit amet lorem ipsum dolor sit amet lorem ipsu"

func hpChange(tb testing.TB, pos int, scope string) feed.Change {
	tb.Helper()
	key, row, err := protocol.EncodeRow(hpItem{ID: strconv.Itoa(pos), Scope: scope, Tenant: "acme", Body: hpBody, SentNS: 1764518400123456789})
	if err != nil {
		tb.Fatal(err)
	}
	return feed.Change{Pos: feed.Position(pos), Resource: "items", Op: feed.OpUpsert, Key: key, Scope: []string{scope}, Row: row}
}

// hpTenantFilter is the row filter of cmd/tideload's server: a row is
// visible if its tenant equals the principal's tenant claim.
func hpTenantFilter(p authz.Principal, row *hpItem) bool {
	t, _ := p.Claims["tenant"].(string)
	return row.Tenant == t
}

func hpPrincipal(i int) authz.Principal {
	return authz.Principal{ID: "u" + strconv.Itoa(i), Claims: map[string]any{"scopes": []string{"s0"}, "tenant": "acme"}}
}

// hpEngine returns an engine with the items resource, with or without the
// tenant filter. It starts no goroutines.
func hpEngine(tb testing.TB, filter bool, filterColumns ...string) (*Engine, *resource) {
	tb.Helper()
	e, err := New(Config{})
	if err != nil {
		tb.Fatal(err)
	}
	r := Resource[hpItem]{Name: "items", Table: "items", Authorize: authz.RequireClaim("scope", "scopes")}
	if filter {
		r.Filter, r.FilterColumns = hpTenantFilter, filterColumns
	}
	t, err := Register(e, r)
	if err != nil {
		tb.Fatal(err)
	}
	return e, t.res
}

// BenchmarkEncodeEntries encodes one change for the wire: done once per
// change, whatever the number of subscribers.
func BenchmarkEncodeEntries(b *testing.B) {
	c := hpChange(b, 123456, "s0")
	b.ReportAllocs()
	b.SetBytes(int64(len(c.Row)))
	for b.Loop() {
		enc := encodeEntries(&c)
		if len(enc.upsert) == 0 {
			b.Fatal("no upsert entry")
		}
	}
}

// BenchmarkLiveFrame assembles one live changes frame per socket from
// already encoded entries, as the socket writer does for each subscription:
// the frame head with the subscription id and cursor, the entries, the end.
func BenchmarkLiveFrame(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			entries := make([][]byte, n)
			size := 0
			for i := range entries {
				c := hpChange(b, 1000+i, "s0")
				entries[i] = encodeEntries(&c).upsert
				size += len(entries[i])
			}
			id := jsontext.AppendString(nil, "1")
			buf := make([]byte, 0, size+256)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				frame := protocol.AppendLiveChangesStart(buf[:0], id, "KaGaJCWMN0nIGBtf", uint64(1000+n))
				for i, e := range entries {
					if i > 0 {
						frame = append(frame, ',')
					}
					frame = append(frame, e...)
				}
				frame = protocol.AppendChangesEnd(frame)
				buf = frame
			}
		})
	}
}

// BenchmarkMatch matches changes to subscriptions: the hub's index lookup,
// the scope match, the change's encoding (once) and, per recipient, the
// authorization decision (resource.entryFor with its row filter) and the
// subscription's lock. The subscriptions are desynced, so nothing is queued
// to a socket: what is left is the work of deciding who gets what.
//
//   - scopes=1000/subs=1: the change's scope is one of 1000 with one
//     subscriber each; the cost should not grow with the other scopes.
//   - scopes=1/subs=1000: one scope with 1000 subscribers; ns/recipient is
//     the per-subscriber cost of the fan-out.
//   - scopes=1/subs=1000/origin: the same, with changes that carry a
//     device's origin that no subscriber has: each change is also encoded
//     without it, once, for all of them.
func BenchmarkMatch(b *testing.B) {
	for _, filter := range []bool{false, true} {
		for _, sh := range []struct{ scopes, subs int }{{1000, 1}, {1, 1000}, {50, 100}} {
			name := fmt.Sprintf("filter=%v/scopes=%d/subs=%d", filter, sh.scopes, sh.subs)
			b.Run(name, func(b *testing.B) { benchMatch(b, filter, sh.scopes, sh.subs, "") })
		}
		b.Run(fmt.Sprintf("filter=%v/scopes=1/subs=1000/origin", filter), func(b *testing.B) { benchMatch(b, filter, 1, 1000, "web-writer") })
	}
}

func benchMatch(b *testing.B, filter bool, scopes, subsPerScope int, origin string) {
	e, r := hpEngine(b, filter)
	defer e.cancel()
	for s := range scopes {
		sc := hpScope(r.schema, "scope", "s"+strconv.Itoa(s))
		for i := range subsPerScope {
			c := &conn{e: e, subs: map[string]*subscription{}}
			p := hpPrincipal(s*subsPerScope + i)
			c.principal.Store(&p)
			c.out.init(e.cfg.SendBuffer)
			sub := newSubscription(c, "1", r, sc, e.cfg.PageSize)
			sub.state = subDesynced
			e.hub.add(sub)
		}
	}
	// A batch of changes to scope s0, in position order, as the tailer
	// hands them to the hub.
	batch := make([]feed.Change, 64)
	for i := range batch {
		batch[i] = hpChange(b, i+1, "s0")
		batch[i].Origin = origin
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		// Each change is dispatched once: positions move on, and the
		// per-change caches (encoding, decoded row) are fresh.
		for i := range batch {
			batch[i].Pos = feed.Position(n*len(batch) + i + 1)
		}
		e.hub.dispatch(batch)
		n++
	}
	b.StopTimer()
	changes := float64(n * len(batch))
	b.ReportMetric(b.Elapsed().Seconds()*1e9/changes, "ns/change")
	b.ReportMetric(b.Elapsed().Seconds()*1e9/(changes*float64(subsPerScope)), "ns/recipient")
}

// hpScope returns the scope of s with one equality condition.
func hpScope(s *feed.Schema, col, value string) feed.Scope {
	return feed.NewScope(s, []feed.Cond{{Col: s.ScopeIndex(col), Values: []string{value}}})
}

// BenchmarkRowFilter measures per-row authorization on the fan-out path.
//
//   - per-change: the first subscriber of a change decodes the row into the
//     resource's struct (once per change) and runs the filter;
//   - per-subscriber: every further subscriber runs the filter on the
//     cached row: the cost multiplied by the subscribers of a scope;
//   - no-filter: what a subscriber costs without a filter (the shared
//     encoding is returned).
func BenchmarkRowFilter(b *testing.B) {
	c := hpChange(b, 42, "s0")
	p := hpPrincipal(1)
	b.Run("per-change", func(b *testing.B) {
		_, r := hpEngine(b, true)
		b.ReportAllocs()
		for b.Loop() {
			enc := encodeEntries(&c)
			if r.entryFor(p, c.Origin, &c, &enc) == nil {
				b.Fatal("row hidden")
			}
		}
	})
	b.Run("per-subscriber", func(b *testing.B) {
		_, r := hpEngine(b, true)
		enc := encodeEntries(&c)
		r.entryFor(p, c.Origin, &c, &enc) // decode once
		ps := make([]authz.Principal, 1000)
		for i := range ps {
			ps[i] = hpPrincipal(i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if r.entryFor(ps[i%len(ps)], c.Origin, &c, &enc) == nil {
				b.Fatal("row hidden")
			}
			i++
		}
	})
	b.Run("no-filter", func(b *testing.B) {
		_, r := hpEngine(b, false)
		enc := encodeEntries(&c)
		b.ReportAllocs()
		for b.Loop() {
			if r.entryFor(p, c.Origin, &c, &enc) == nil {
				b.Fatal("no entry")
			}
		}
	})
}

// BenchmarkSnapshotEntries encodes a snapshot page of 1,000 rows for one
// principal, as catch-up does for every page it sends (replay pages take
// the same path): with the tenant filter, every row is decoded and
// checked (filter-spans: where the page's spans say its values are, as the
// Postgres feed's pages; filter-columns: the filter declares
// FilterColumns, so only its column is decoded); without, only encoded.
func BenchmarkSnapshotEntries(b *testing.B) {
	sp := feed.SnapshotPage{Pos: 1}
	for i := range 1000 {
		sp.Rows = append(sp.Rows, hpChange(b, i+1, "s0"))
	}
	p := hpPrincipal(1)
	spanned := sp
	spanned.Spans = rowSpans(b, sp.Rows)
	for _, name := range []string{"filter", "filter-spans", "filter-columns", "no-filter"} {
		b.Run(name, func(b *testing.B) {
			var r *resource
			sp := sp
			switch name {
			case "filter":
				_, r = hpEngine(b, true)
			case "filter-spans":
				_, r = hpEngine(b, true)
				sp = spanned
			case "filter-columns":
				_, r = hpEngine(b, true, "tenant")
			default:
				_, r = hpEngine(b, false)
			}
			b.ReportAllocs()
			for b.Loop() {
				if pg := snapshotEntries(r, p, "", sp, "", false); pg.n != len(sp.Rows) {
					b.Fatalf("%d entries", pg.n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(sp.Rows)), "ns/row")
		})
	}
}

// rowSpans returns the spans of rows rendered by protocol.EncodeRow (keys
// in declared order, each once), as a feed that renders rows reports them.
func rowSpans(tb testing.TB, rows []feed.Change) []protocol.ValueSpan {
	tb.Helper()
	var out []protocol.ValueSpan
	for _, c := range rows {
		dec := json.NewDecoder(bytes.NewReader(c.Row))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			tb.Fatalf("row %s: %v %v", c.Row, tok, err)
		}
		for dec.More() {
			if _, err := dec.Token(); err != nil { // the key
				tb.Fatal(err)
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				tb.Fatal(err)
			}
			end := int(dec.InputOffset())
			sp := protocol.ValueSpan{Start: uint32(end - len(v)), End: uint32(end)}
			if v[0] == '"' && !bytes.ContainsAny(v[1:len(v)-1], "\\") {
				sp.Verbatim = true
			}
			out = append(out, sp)
		}
	}
	return out
}
