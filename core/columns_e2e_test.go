package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/testenv"
	routes "github.com/tidesync/tide/internal/transport"
	"github.com/tidesync/tide/middleware"
)

// staffRow is a row with columns some principals may not see: email (its
// owner and admins), salary (admins); private rows are hidden (row filter)
// from all but their owner and admins.
type staffRow struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Owner     string `tide:"owner"`
	Private   bool   `tide:"private"`
	Email     string `tide:"email"`
	Salary    int64  `tide:"salary"`
	Note      string `tide:"note"`
}

const staffDDL = "CREATE TABLE staff (id text PRIMARY KEY, project_id text NOT NULL, owner text NOT NULL, private boolean NOT NULL, email text NOT NULL, salary bigint NOT NULL, note text NOT NULL)"

func isAdmin(p authz.Principal) bool { return p.Claims["admin"] == true }

// staffPolicies are the column policies of staffRow.
func staffPolicies() map[string]authz.ColumnPolicy[staffRow] {
	return map[string]authz.ColumnPolicy[staffRow]{
		"email":  func(p authz.Principal, r *staffRow) bool { return r.Owner == p.ID || isAdmin(p) },
		"salary": func(p authz.Principal, r *staffRow) bool { return isAdmin(p) },
	}
}

func staffFilter(p authz.Principal, r *staffRow) bool {
	return !r.Private || r.Owner == p.ID || isAdmin(p)
}

// staffPrincipal is headerPrincipal where the user "root" is an admin.
func staffPrincipal(r *http.Request) (authz.Principal, error) {
	p, err := headerPrincipal(r)
	if p.ID == "root" {
		p.Claims["admin"] = true
	}
	return p, err
}

// staffServer serves a staff resource with column policies (and the row
// filter) on the in-memory feed (cfg.Feed, or the default) or Postgres.
type staffServer struct {
	e   *core.Engine
	tbl *core.Table[staffRow]
	url string
}

// newStaffServer starts a staffServer; policies, if given, replace
// staffPolicies on the server.
func newStaffServer(t *testing.T, backend string, cfg core.Config, policies ...map[string]authz.ColumnPolicy[staffRow]) *staffServer {
	t.Helper()
	var pf *pgfeed.Feed
	if backend == "postgres" {
		pool, name := testenv.PostgresSchema(t)
		if _, err := pool.Exec(context.Background(), staffDDL); err != nil {
			t.Fatal(err)
		}
		pf = newPgFeed(t, pool, name, pgfeed.Options{})
		cfg.Feed = pf
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pols := staffPolicies()
	if len(policies) > 0 {
		pols = policies[0]
	}
	tbl, err := core.Register(e, core.Resource[staffRow]{Table: "staff", Authorize: projects, Filter: staffFilter, ColumnPolicies: pols})
	if err != nil {
		t.Fatal(err)
	}
	if pf != nil {
		if err := pf.Migrate(context.Background(), e.Schemas()...); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(staffPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		_ = e.Shutdown(context.Background())
		ts.Close()
	})
	return &staffServer{e: e, tbl: tbl, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

// staffPrincipalOf is the principal staffPrincipal makes of user, member of p7.
func staffPrincipalOf(user string) authz.Principal {
	p := authz.Principal{ID: user, Claims: map[string]any{"projects": []string{"p7"}}}
	if user == "root" {
		p.Claims["admin"] = true
	}
	return p
}

// rawEntries reads subscription id's frames until caught-up (catch-up) or
// until one changes frame (live), checking every raw frame with check. It
// returns the entries, as "key:{row}" or "key:delete", and the caught-up
// cursor.
func rawEntries(t *testing.T, c *wsClient, id string, live bool, check func(frame []byte)) ([]string, string) {
	t.Helper()
	var out []string
	for {
		f, data, err := c.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f.ID != id {
			t.Fatalf("frame for %q, want %q: %s", f.ID, id, data)
		}
		check(data)
		switch f.Type {
		case protocol.FrameChanges:
			for _, en := range f.Entries {
				if en.Op == "delete" {
					out = append(out, en.Key+":delete")
				} else {
					out = append(out, en.Key+":"+string(en.Row))
				}
			}
			if live {
				return out, ""
			}
		case protocol.FrameCaughtUp:
			return out, f.Cursor
		default:
			t.Fatalf("unexpected %s", data)
		}
	}
}

// cursorText matches a frame's cursor member.
var cursorText = regexp.MustCompile(`"cursor":"[^"]*"`)

// TestColumnVisibility: a principal a column's policy refuses receives the
// row without that column (no member, no value) in snapshots, live
// changes, replays, polls and mutation acks, and receives nothing of a
// change that touched only such columns; a principal the policies allow
// receives everything. Frames are checked raw, on both feeds.
func TestColumnVisibility(t *testing.T) {
	for _, backend := range []string{"memory", "postgres"} {
		t.Run(backend, func(t *testing.T) { testColumnVisibility(t, backend) })
	}
}

func testColumnVisibility(t *testing.T, backend string) {
	s := newStaffServer(t, backend, core.Config{})
	ctx := context.Background()
	write := func(rows ...staffRow) {
		t.Helper()
		if err := s.tbl.Upsert(ctx, rows...); err != nil {
			t.Fatal(err)
		}
	}
	r1 := staffRow{ID: "r1", ProjectID: "p7", Owner: "alice", Email: "alice@secret-1", Salary: 101, Note: "n1"}
	r2 := staffRow{ID: "r2", ProjectID: "p7", Owner: "bob", Email: "bob@secret-2", Salary: 102, Note: "n2"}
	r3 := staffRow{ID: "r3", ProjectID: "p7", Owner: "bob", Private: true, Email: "bob@secret-3", Salary: 103, Note: "n3"}
	write(r1, r2, r3)

	// What alice may never receive: any salary, bob's emails. A cursor's
	// text is random in part (the feed's epoch) and may hold any of these
	// by chance, "r3" above all; it carries no row data, so it is left out
	// of the check.
	forbidden := []string{`"salary"`, "101", "102", "103", "secret-2", "secret-3", "hidden-", "r3"}
	aliceCheck := func(frame []byte) {
		t.Helper()
		frame = cursorText.ReplaceAll(frame, []byte(`"cursor":""`))
		for _, f := range forbidden {
			if bytes.Contains(frame, []byte(f)) {
				t.Fatalf("alice received %q: %s", f, frame)
			}
		}
	}
	rootCheck := func([]byte) {}
	row := func(r staffRow, cols ...string) string {
		t.Helper()
		m := map[string]any{"id": r.ID, "project_id": r.ProjectID, "owner": r.Owner, "private": r.Private, "email": r.Email, "salary": r.Salary, "note": r.Note}
		out := map[string]any{}
		for _, c := range append([]string{"id", "project_id", "owner", "private", "note"}, cols...) {
			out[c] = m[c]
		}
		b, _ := json.Marshal(out)
		return r.ID + ":" + string(b)
	}
	same := func(who string, got []string, want ...string) {
		t.Helper()
		ok := len(got) == len(want)
		for i := 0; ok && i < len(got); i++ {
			k, g, _ := strings.Cut(got[i], ":")
			wk, w, _ := strings.Cut(want[i], ":")
			ok = k == wk && (g == w || jsonEqual(g, w))
		}
		if !ok {
			t.Fatalf("%s received\n%v\nwant\n%v", who, got, want)
		}
	}

	alice := dialAt(t, s.url, "alice", "p7")
	alice.hello()
	root := dialAt(t, s.url, "root", "p7")
	root.hello()
	alice.Subscribe("s", "staff", project("p7"))
	root.Subscribe("s", "staff", project("p7"))
	// Snapshot: alice sees her email, not bob's, no salary, not r3.
	got, aliceCursor := rawEntries(t, alice, "s", false, aliceCheck)
	same("alice's snapshot", got, row(r1, "email"), row(r2))
	got, rootCursor := rawEntries(t, root, "s", false, rootCheck)
	same("root's snapshot", got, row(r1, "email", "salary"), row(r2, "email", "salary"), row(r3, "email", "salary"))

	// A poll taken now, to poll the replay from later.
	poll := func(user, cursor string) ([]string, string) {
		t.Helper()
		var es []string
		for range 100 {
			out, err := routes.Of(s.e).Poll(ctx, staffPrincipalOf(user), "", protocol.PollRequest{V: 1, Resource: "staff", Conditions: map[string]json.RawMessage{"project_id": json.RawMessage(`"p7"`)}, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			if user == "alice" {
				aliceCheck(out)
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(out, &f); err != nil || f.Type != protocol.FrameChanges {
				t.Fatalf("poll: %s (%v)", out, err)
			}
			for _, en := range f.Entries {
				if en.Op == "delete" {
					es = append(es, en.Key+":delete")
				} else {
					es = append(es, en.Key+":"+string(en.Row))
				}
			}
			if cursor = f.Cursor; !f.More {
				return es, cursor
			}
		}
		t.Fatal("the poll did not end in 100 requests")
		return nil, ""
	}
	got, alicePoll := poll("alice", "")
	same("alice's polled snapshot", got, row(r1, "email"), row(r2))
	got, rootPoll := poll("root", "")
	same("root's polled snapshot", got, row(r1, "email", "salary"), row(r2, "email", "salary"), row(r3, "email", "salary"))

	// Live: changes of bob's salary and email alone reach root only; the
	// note change after them reaches both, and is alice's next frame.
	r2.Salary = 202
	write(r2)
	r2.Email = "bob@hidden-2"
	write(r2)
	r3.Note = "hidden-3" // a private row: alice never hears of it
	write(r3)
	r2.Note = "n2 again"
	write(r2)
	got, _ = rawEntries(t, alice, "s", true, aliceCheck)
	same("alice, live", got, row(r2))
	var live []string
	for len(live) < 4 {
		got, _ = rawEntries(t, root, "s", true, rootCheck)
		live = append(live, got...)
	}
	want := []string{row(staffRow{ID: "r2", ProjectID: "p7", Owner: "bob", Email: "bob@secret-2", Salary: 202, Note: "n2"}, "email", "salary"),
		row(staffRow{ID: "r2", ProjectID: "p7", Owner: "bob", Email: "bob@hidden-2", Salary: 202, Note: "n2"}, "email", "salary"),
		row(r3, "email", "salary"), row(r2, "email", "salary")}
	same("root, live", live, want...)
	// alice's own email changes: she receives it.
	r1.Email = "alice@new"
	write(r1)
	got, _ = rawEntries(t, alice, "s", true, aliceCheck)
	same("alice, her own email", got, row(r1, "email"))
	got, _ = rawEntries(t, root, "s", true, rootCheck)
	same("root, alice's email", got, row(r1, "email", "salary"))
	alice.Probe()
	root.Probe()

	// Replay from the cursors of the snapshots: the same, changes of
	// hidden columns left out.
	alice.SubscribeFrom("r", "staff", project("p7"), aliceCursor)
	got, _ = rawEntries(t, alice, "r", false, aliceCheck)
	same("alice's replay", got, row(r2), row(r1, "email"))
	root.SubscribeFrom("r", "staff", project("p7"), rootCursor)
	got, _ = rawEntries(t, root, "r", false, rootCheck)
	same("root's replay", got, append(want, row(r1, "email", "salary"))...)
	got, _ = poll("alice", alicePoll)
	same("alice's polled replay", got, row(r2), row(r1, "email"))
	got, _ = poll("root", rootPoll)
	same("root's polled replay", got, append(want, row(r1, "email", "salary"))...)
}

// TestColumnVisibilityMutationAck: a mutator's ack shows the writer only
// the columns it may see; the app's mutator decides what a client that
// cannot see a column writes of it: Table.UpsertTx writes every column, so
// a row upserted as the client holds it wipes the columns it was not
// sent, while a mutator that keeps them from the stored row does not.
func TestColumnVisibilityMutationAck(t *testing.T) {
	s := newStaffServer(t, "memory", core.Config{})
	ctx := context.Background()
	stored := staffRow{ID: "r2", ProjectID: "p7", Owner: "bob", Email: "bob@secret-2", Salary: 102, Note: "n2"}
	if err := s.tbl.Upsert(ctx, stored); err != nil {
		t.Fatal(err)
	}
	// staffArgs is a staff row as a client sends it: the members it holds.
	type staffArgs struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
		Owner     string `json:"owner"`
		Private   bool   `json:"private"`
		Email     string `json:"email"`
		Salary    int64  `json:"salary"`
		Note      string `json:"note"`
	}
	allow := func(context.Context, authz.Principal, staffArgs) error { return nil }
	// "save" writes the row as sent; "edit" keeps what the caller may not see.
	if err := core.AddMutator(s.tbl, "save", core.Mutator[staffArgs]{Authorize: allow,
		Run: func(ctx context.Context, tx *core.Tx, r staffArgs) error { return s.tbl.UpsertTx(ctx, tx, staffRow(r)) }}); err != nil {
		t.Fatal(err)
	}
	if err := core.AddMutator(s.tbl, "edit", core.Mutator[staffArgs]{Authorize: allow,
		Run: func(ctx context.Context, tx *core.Tx, r staffArgs) error {
			rows, err := s.tbl.Rows(ctx, map[string]any{"project_id": r.ProjectID})
			if err != nil {
				return err
			}
			i := slices.IndexFunc(rows, func(o staffRow) bool { return o.ID == r.ID })
			if i < 0 {
				return core.ErrConflict
			}
			old := rows[i]
			old.Note = r.Note // the only column this mutator lets a caller change
			return s.tbl.UpsertTx(ctx, tx, old)
		}}); err != nil {
		t.Fatal(err)
	}
	mutate := func(name, key string, args string) string {
		t.Helper()
		m := mutateFrame(key, name, json.RawMessage(args), time.Now())
		m["resource"] = "staff"
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		f, perr := protocol.DecodeClientFrame(b)
		if perr != nil {
			t.Fatal(perr)
		}
		out, perr := routes.Of(s.e).Mutate(ctx, staffPrincipalOf("alice"), "dev-a", f)
		if perr != nil {
			t.Fatal(perr)
		}
		for _, hidden := range []string{"salary", "secret-2"} {
			if strings.Contains(string(out), hidden) {
				t.Fatalf("alice's ack holds %q: %s", hidden, out)
			}
		}
		return string(out)
	}
	// alice holds r2 without email and salary, edits its note and sends
	// the row as she holds it.
	sent := `{"id":"r2","project_id":"p7","owner":"bob","private":false,"note":"edited"}`
	if ack := mutate("edit", "k1", sent); !strings.Contains(ack, `"edited"`) {
		t.Fatalf("ack %s", ack)
	}
	got, err := s.tbl.Rows(ctx, project("p7"))
	if err != nil {
		t.Fatal(err)
	}
	want := stored
	want.Note = "edited"
	if len(got) != 1 || got[0] != want {
		t.Fatalf("after edit: %+v, want %+v", got, want)
	}
	mutate("save", "k2", sent)
	got, err = s.tbl.Rows(ctx, project("p7"))
	if err != nil {
		t.Fatal(err)
	}
	want.Email, want.Salary = "", 0
	if len(got) != 1 || got[0] != want {
		t.Fatalf("after save: %+v, want %+v (Table.UpsertTx writes every column)", got, want)
	}
}

// TestRegisterColumnPoliciesErrors: Register refuses a column policy that
// cannot hold.
func TestRegisterColumnPoliciesErrors(t *testing.T) {
	ok := func(authz.Principal, *staffRow) bool { return true }
	for _, tc := range []struct {
		name     string
		policies map[string]authz.ColumnPolicy[staffRow]
		want     string
	}{
		{"unknown column", map[string]authz.ColumnPolicy[staffRow]{"mail": ok}, `ColumnPolicies: "mail" is not a column`},
		{"primary key", map[string]authz.ColumnPolicy[staffRow]{"id": ok}, `ColumnPolicies: "id" is the primary key`},
		{"scope column", map[string]authz.ColumnPolicy[staffRow]{"project_id": ok}, `ColumnPolicies: "project_id" is a scope column`},
		{"nil policy", map[string]authz.ColumnPolicy[staffRow]{"email": nil}, `ColumnPolicies: the policy of "email" is nil`},
		{"first wrong name in order", map[string]authz.ColumnPolicy[staffRow]{"zzz": ok, "aaa": ok}, `"aaa" is not a column`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := core.New(core.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			_, err = core.Register(e, core.Resource[staffRow]{Table: "staff", ColumnPolicies: tc.policies})
			if !errors.Is(err, core.ErrInvalidResource) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidResource with %q", err, tc.want)
			}
		})
	}
	t.Run("too many", func(t *testing.T) {
		e, err := core.New(core.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Shutdown(context.Background())
		policies := map[string]authz.ColumnPolicy[wideRow]{}
		for i := range 65 {
			policies[fmt.Sprintf("c%02d", i)] = func(authz.Principal, *wideRow) bool { return true }
		}
		if _, err := core.Register(e, core.Resource[wideRow]{Table: "wide", ColumnPolicies: policies}); !errors.Is(err, core.ErrInvalidResource) || !strings.Contains(err.Error(), "at most 64") {
			t.Fatalf("got %v", err)
		}
	})
}

// wideRow has more columns than a resource may have column policies.
type wideRow struct {
	ID  string `tide:"id,pk"`
	C00 string `tide:"c00"`
	C01 string `tide:"c01"`
	C02 string `tide:"c02"`
	C03 string `tide:"c03"`
	C04 string `tide:"c04"`
	C05 string `tide:"c05"`
	C06 string `tide:"c06"`
	C07 string `tide:"c07"`
	C08 string `tide:"c08"`
	C09 string `tide:"c09"`
	C10 string `tide:"c10"`
	C11 string `tide:"c11"`
	C12 string `tide:"c12"`
	C13 string `tide:"c13"`
	C14 string `tide:"c14"`
	C15 string `tide:"c15"`
	C16 string `tide:"c16"`
	C17 string `tide:"c17"`
	C18 string `tide:"c18"`
	C19 string `tide:"c19"`
	C20 string `tide:"c20"`
	C21 string `tide:"c21"`
	C22 string `tide:"c22"`
	C23 string `tide:"c23"`
	C24 string `tide:"c24"`
	C25 string `tide:"c25"`
	C26 string `tide:"c26"`
	C27 string `tide:"c27"`
	C28 string `tide:"c28"`
	C29 string `tide:"c29"`
	C30 string `tide:"c30"`
	C31 string `tide:"c31"`
	C32 string `tide:"c32"`
	C33 string `tide:"c33"`
	C34 string `tide:"c34"`
	C35 string `tide:"c35"`
	C36 string `tide:"c36"`
	C37 string `tide:"c37"`
	C38 string `tide:"c38"`
	C39 string `tide:"c39"`
	C40 string `tide:"c40"`
	C41 string `tide:"c41"`
	C42 string `tide:"c42"`
	C43 string `tide:"c43"`
	C44 string `tide:"c44"`
	C45 string `tide:"c45"`
	C46 string `tide:"c46"`
	C47 string `tide:"c47"`
	C48 string `tide:"c48"`
	C49 string `tide:"c49"`
	C50 string `tide:"c50"`
	C51 string `tide:"c51"`
	C52 string `tide:"c52"`
	C53 string `tide:"c53"`
	C54 string `tide:"c54"`
	C55 string `tide:"c55"`
	C56 string `tide:"c56"`
	C57 string `tide:"c57"`
	C58 string `tide:"c58"`
	C59 string `tide:"c59"`
	C60 string `tide:"c60"`
	C61 string `tide:"c61"`
	C62 string `tide:"c62"`
	C63 string `tide:"c63"`
	C64 string `tide:"c64"`
}
