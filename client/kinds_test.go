package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// kindMood is a named string type for an enum column.
type kindMood string

// kindItem has a field of each value kind beyond the plain scalars.
type kindItem struct {
	ID     string             `tide:"id,pk"`
	Tenant string             `tide:"tenant,scope"`
	Price  protocol.Decimal   `tide:"price"`
	Maybe  *protocol.Decimal  `tide:"maybe"`
	Tags   []string           `tide:"tags"`
	Ns     []*int64           `tide:"ns"`
	Fs     []float64          `tide:"fs"`
	Ts     []time.Time        `tide:"ts"`
	Ds     []protocol.Decimal `tide:"ds"`
	Mood   kindMood           `tide:"mood"`
	Moods  []kindMood         `tide:"moods"`
	UID    string             `tide:"uid"`
	Addr   netip.Addr         `tide:"addr"`
	Net    netip.Prefix       `tide:"net"`
	Span   string             `tide:"span"`
	At     time.Time          `tide:"at"`
}

const kindItemsDDL = `CREATE TYPE kind_mood AS ENUM ('happy', 'sad');
CREATE TABLE kind_items (id text PRIMARY KEY, tenant text NOT NULL, price numeric(12,2) NOT NULL, maybe numeric,
  tags text[], ns bigint[], fs double precision[], ts timestamptz[], ds numeric[], mood kind_mood NOT NULL,
  moods kind_mood[], uid uuid NOT NULL, addr inet NOT NULL, net cidr NOT NULL, span interval NOT NULL, at timestamptz NOT NULL)`

// TestE2EValueKinds: rows with decimals, arrays, enums, uuid, inet, cidr,
// intervals and microsecond times written through a Table reach a Go
// client, from the snapshot and live, and decode into the same Go values,
// on the memory feed and on Postgres (where they go through real columns
// of those types and the capture).
func TestE2EValueKinds(t *testing.T) {
	seven, big := int64(7), protocol.Decimal("90071992547409931.000001")
	at := time.Date(2026, 12, 2, 14, 30, 0, 123456000, time.UTC)
	rows := []kindItem{
		{
			ID: "k1", Tenant: "t1", Price: "12.30", Maybe: &big, Tags: []string{"a", "", `"q"`, "é,{}"},
			Ns: []*int64{&seven, nil}, Fs: []float64{0.1, -2.5, 1e-7}, Ts: []time.Time{at, at.Add(time.Microsecond)},
			Ds: []protocol.Decimal{"0.10", "NaN", "-Infinity"}, Mood: "sad", Moods: []kindMood{"happy", "sad"},
			UID: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", Addr: netip.MustParseAddr("2001:db8::1"),
			Net: netip.MustParsePrefix("10.0.0.0/8"), Span: "1 day 02:03:04.5", At: at,
		},
		{
			ID: "k2", Tenant: "t1", Price: "0.00", Tags: []string{}, Ns: []*int64{}, Fs: []float64{}, Ts: []time.Time{},
			Ds: []protocol.Decimal{}, Mood: "happy", Moods: []kindMood{}, UID: "00000000-0000-0000-0000-000000000000",
			Addr: netip.MustParseAddr("10.1.2.3"), Net: netip.MustParsePrefix("2001:db8::/32"), Span: "00:00:00", At: at.Add(-time.Microsecond),
		},
	}
	live := kindItem{
		ID: "k3", Tenant: "t1", Price: "-99999999.99", Tags: nil, Mood: "happy", UID: "ffffffff-ffff-ffff-ffff-ffffffffffff",
		Addr: netip.MustParseAddr("192.168.0.1"), Net: netip.MustParsePrefix("192.168.0.0/16"), Span: "-3 days", At: at,
	}
	for _, backend := range []string{"memory", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx := testCtx(t)
			cfg := core.Config{Logger: slog.New(slog.DiscardHandler)}
			var f *pgfeed.Feed
			if backend == "postgres" {
				pool, schema := testenv.PostgresSchema(t)
				if _, err := pool.Exec(ctx, kindItemsDDL); err != nil {
					t.Fatal(err)
				}
				var err error
				if f, err = pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: cfg.Logger}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Close() })
				cfg.Feed = f
			}
			e, err := core.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := core.Register(e, core.Resource[kindItem]{Table: "kind_items", Authorize: authz.Allow})
			if err != nil {
				t.Fatal(err)
			}
			if f != nil {
				if err := f.Migrate(ctx, e.Schemas()...); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
			}
			srv := httptest.NewServer(middleware.Middleware(e)(http.NotFoundHandler()))
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(context.Background(), failAfter)
				defer cancel()
				_ = e.Shutdown(sctx)
				srv.Close()
			})
			if err := tbl.Upsert(ctx, rows...); err != nil {
				t.Fatalf("Upsert: %v", err)
			}
			c, _ := newTestClient(t, Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/tide/ws", Store: NewMemoryStore()})
			rec := newRecorder()
			if _, err := c.Subscribe(Scope{Resource: "kind_items", Conditions: map[string]any{"tenant": "t1"}}, rec); err != nil {
				t.Fatal(err)
			}
			start(t, c)
			want := map[string]kindItem{}
			for _, r := range rows {
				want[r.ID] = r
			}
			expectKindRows(ctx, t, &rec.mirror, want)
			if err := tbl.Upsert(ctx, live); err != nil {
				t.Fatalf("Upsert: %v", err)
			}
			want[live.ID] = live
			expectKindRows(ctx, t, &rec.mirror, want)
		})
	}
}

// expectKindRows waits until m's rows decode into exactly want.
func expectKindRows(ctx context.Context, t *testing.T, m *testRows, want map[string]kindItem) {
	t.Helper()
	var last string
	err := m.Wait(ctx, func(rows map[string]json.RawMessage) bool {
		if len(rows) != len(want) {
			return false
		}
		for k, raw := range rows {
			got, err := protocol.DecodeRow[kindItem](raw)
			if err != nil || !reflect.DeepEqual(got, want[k]) {
				last = string(raw)
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("rows did not arrive as written; last differing row %s", last)
	}
}
