package feedtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core/feed"
)

// testTransactWritten checks feed.WriteLister on the transactions of a feed
// that implements both feed.Transactor and it: the listing holds every
// change written so far, a delete with the deleted row's scope, a move
// between scopes as its delete in the old scope and upsert in the new (a
// row moved twice in one transaction included), an update in place as one
// upsert, and nothing for the delete of a missing row; a transaction that
// then fails commits none of it.
func (s *suite) testTransactWritten(t *testing.T) {
	e := s.setup(t)
	tr, ok := e.f.(feed.Transactor)
	if !ok {
		t.Skip("the feed does not run mutations (feed.Transactor)")
	}
	a := item{ID: "a", Tenant: "t1", Grp: 1, Title: "a"}
	b := item{ID: "b", Tenant: "t1", Grp: 2, Title: "b"}
	c := item{ID: "c", Tenant: "t2", Grp: 1, Title: "c"}
	e.apply("", a.upsert(), b.upsert(), c.upsert())
	h := e.head()

	fmtWritten := func(ws []feed.Written) string {
		out := make([]string, len(ws))
		for i, w := range ws {
			op := "upsert"
			if w.Op == feed.OpDelete {
				op = "delete"
			}
			out[i] = op + " " + w.Resource + " " + strings.Join(w.Scope, "/")
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	rollback := errors.New("feedtest: roll back")
	skipped := false
	id := feed.MutationID{Principal: "p", Origin: "o", Key: "written", At: time.Now()}
	_, _, err := tr.Transact(e.ctx, id, func(ctx context.Context, tx feed.Tx) ([]byte, error) {
		wl, ok := tx.(feed.WriteLister)
		if !ok {
			skipped = true
			return nil, rollback
		}
		check := func(what, want string) {
			t.Helper()
			got, err := wl.Written(ctx)
			if err != nil {
				t.Fatalf("%s: Written: %v", what, err)
			}
			if fmtWritten(got) != want {
				t.Fatalf("%s: Written lists\n  %s\nwant\n  %s", what, fmtWritten(got), want)
			}
		}
		check("nothing written", "")
		d := item{ID: "d", Tenant: "t1", Grp: 1, Title: "d"}
		a2, b2, d2 := a, b, d
		a2.Tenant = "t2"
		b2.Title = "b in place"
		d2.Tenant, d2.Grp = "t3", 5
		if err := tx.Apply(ctx, d.upsert(), a2.upsert(), b2.upsert(), delItem("c"), delItem("missing"), d2.upsert()); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		check("after the writes", strings.Join([]string{
			"delete items t1/1", // a moved out of t1/1
			"delete items t1/1", // d moved out of t1/1
			"delete items t2/1", // c deleted
			"upsert items t1/1", // d inserted
			"upsert items t1/2", // b updated in place
			"upsert items t2/1", // a moved into t2/1
			"upsert items t3/5", // d moved into t3/5
		}, ", "))
		return nil, rollback
	})
	if skipped {
		t.Skip("the feed's transactions do not list their writes (feed.WriteLister)")
	}
	if !errors.Is(err, rollback) {
		t.Fatalf("Transact: %v, want the function's error", err)
	}
	e.noChangesAfter(h, "a transaction rolled back after listing its writes")
}
