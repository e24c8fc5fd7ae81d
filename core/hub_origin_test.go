package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// TestBatchViewsShowOriginsOnlyToTheirDevice: whatever the origins of a
// dispatched batch's changes, the batch a device gets names an origin on an
// entry exactly when that device wrote its change, and the fan-out still
// encodes each form of a change once: every device that wrote none of the
// batch gets one shared batch, and entries are the change's shared bytes.
// Seeded: TIDE_SEED=<n> replays a run's choices.
func TestBatchViewsShowOriginsOnlyToTheirDevice(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (TIDE_SEED=%d go test -run TestBatchViewsShowOriginsOnlyToTheirDevice ./core/ reproduces it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	origins := []string{"", "dev-a", "dev-b", "dev-c"}
	devices := append(origins, "dev-other")
	for run := 0; run < 300; run++ {
		named := rng.IntN(2) == 0
		g := &group{}
		for i := range 1 + rng.IntN(6) {
			c := &feed.Change{Pos: feed.Position(i + 1), Resource: "todos", Key: fmt.Sprint("k", i), Origin: origins[rng.IntN(len(origins))]}
			if rng.IntN(3) == 0 {
				c.Op = feed.OpDelete
			} else {
				c.Op, c.Row = feed.OpUpsert, []byte(fmt.Sprintf(`{"id":"k%d"}`, i))
			}
			enc := encodeEntries(c)
			g.pend = append(g.pend, pending{c, &enc})
		}
		v := g.views(named)
		var strangers liveBatch // the batch of the first device that wrote none of it
		for _, d := range devices[rng.IntN(2):] {
			b := v.of(d)
			if b.len() != len(g.pend) {
				t.Fatalf("run %d: device %q got %d entries of %d", run, d, b.len(), len(g.pend))
			}
			wrote := false
			for i, pc := range g.pend {
				var e protocol.Entry
				if err := json.Unmarshal(b.entries[i], &e); err != nil {
					t.Fatalf("run %d: %s: %v", run, b.entries[i], err)
				}
				want := ""
				if pc.c.Origin == d {
					want = d
				}
				if e.Origin != want || e.Key != pc.c.Key || b.pos[i] != pc.c.Pos {
					t.Fatalf("run %d: device %q got %s for a change of origin %q", run, d, b.entries[i], pc.c.Origin)
				}
				wrote = wrote || d != "" && pc.c.Origin == d
				if !sameBytes(b.entries[i], sharedEntry(pc, d, named)) {
					t.Fatalf("run %d: device %q got a copy of the change's entry %s", run, d, b.entries[i])
				}
			}
			if wrote {
				continue
			}
			if strangers.entries == nil {
				strangers = b
			} else if !sameBytes(b.entries[0], strangers.entries[0]) || &b.entries[0] != &strangers.entries[0] {
				t.Fatalf("run %d: devices that wrote none of the batch do not share one", run)
			}
		}
	}
}

// sharedEntry returns the change's shared entry for device d.
func sharedEntry(pc pending, d string, named bool) []byte {
	own := pc.c.Origin == "" || pc.c.Origin == d
	switch {
	case named && own:
		return pc.enc.named
	case named:
		return pc.enc.bare.named
	case own:
		return pc.enc.of(pc.c)
	case pc.c.Op == feed.OpUpsert:
		return pc.enc.bare.upsert
	}
	return pc.enc.bare.delete
}
