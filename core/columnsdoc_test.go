package core_test

// The Go example of "Column visibility" in docs/authorization.md,
// compiled and run: the region below (between "authorization.md begins"
// and "authorization.md ends", one tab in) is a go block of the page,
// which TestColumnVisibilityDocExample checks.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/docsample"
	routes "github.com/tidesync/tide/internal/transport"
)

// Member is the docs' row with columns only some principals see.
type Member struct {
	ID     string `tide:"id,pk"`
	TeamID string `tide:"team_id,scope"`
	UserID string `tide:"user_id"`
	Name   string `tide:"name"`
	Email  string `tide:"email"`
	Salary int64  `tide:"salary"`
}

func registerMembers(engine *core.Engine) (*core.Table[Member], error) {
	// authorization.md begins
	members, err := core.Register(engine, core.Resource[Member]{
		Table:     "members",
		Authorize: authz.RequireClaim("team_id", "teams"),
		ColumnPolicies: map[string]authz.ColumnPolicy[Member]{
			// The member and admins see the email; everyone else gets rows without it.
			"email":  func(p authz.Principal, m *Member) bool { return m.UserID == p.ID || p.Claims["admin"] == true },
			"salary": func(p authz.Principal, m *Member) bool { return p.Claims["admin"] == true },
		},
	})
	// authorization.md ends
	return members, err
}

// TestColumnVisibilityDocExample: the docs' resource shows ann her own
// email and no salary, bob neither of ann's, and an admin everything.
func TestColumnVisibilityDocExample(t *testing.T) {
	docsample.Contained(t, "authorization.md")

	e, err := core.New(core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	members, err := registerMembers(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := members.Upsert(ctx, Member{ID: "m1", TeamID: "t1", UserID: "ann", Name: "Ann", Email: "ann@example.com", Salary: 7}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    authz.Principal
		want string
	}{
		{authz.Principal{ID: "ann", Claims: map[string]any{"teams": "t1"}}, `{"id":"m1","team_id":"t1","user_id":"ann","name":"Ann","email":"ann@example.com"}`},
		{authz.Principal{ID: "bob", Claims: map[string]any{"teams": "t1"}}, `{"id":"m1","team_id":"t1","user_id":"ann","name":"Ann"}`},
		{authz.Principal{ID: "boss", Claims: map[string]any{"teams": "t1", "admin": true}}, `{"id":"m1","team_id":"t1","user_id":"ann","name":"Ann","email":"ann@example.com","salary":7}`},
	} {
		out, err := routes.Of(e).Poll(ctx, tc.p, "", protocol.PollRequest{V: 1, Resource: "members", Conditions: map[string]json.RawMessage{"team_id": json.RawMessage(`"t1"`)}})
		if err != nil {
			t.Fatal(err)
		}
		var f protocol.ServerFrame
		if err := json.Unmarshal(out, &f); err != nil || len(f.Entries) != 1 || string(f.Entries[0].Row) != tc.want {
			t.Fatalf("%s polled %s, want the row %s", tc.p.ID, out, tc.want)
		}
	}
}
