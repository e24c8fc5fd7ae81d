package pgfeed_test

import (
	"strings"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
)

// TestFollowedNotCaptured: a subscription to a resource whose policy
// depends on a resource the feed does not capture is refused with
// not_captured naming that resource, since nothing would re-check it;
// once Migrate captures it, the subscription is served.
func TestFollowedNotCaptured(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := lateNotesFeed(t)
	e, err := core.New(core.Config{Feed: f, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[lateNote]{Table: "late_notes"}); err != nil {
		t.Fatal(err)
	}
	items, err := core.Register(e, core.Resource[tItem]{Name: "items", Table: "e2e_items", Authorize: authz.Allow,
		DependsOn: []core.Dependency{{Resource: "late_notes"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Migrate(ctx, items.Schema()); err != nil { // not late_notes
		t.Fatal(err)
	}
	c := tidetest.Dial(t, serveEngine(t, e))
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("i", "items", nil)
	if fr := c.ExpectErrorFor("i", protocol.CodeNotCaptured); !strings.Contains(fr.Message, "late_notes") {
		t.Fatalf("error frame %+v does not name the followed resource", fr)
	}
	if err := f.Migrate(ctx, e.Schemas()...); err != nil {
		t.Fatal(err)
	}
	c.Subscribe("i2", "items", nil)
	c.Expect(protocol.FrameCaughtUp)
}
