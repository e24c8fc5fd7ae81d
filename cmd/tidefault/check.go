package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/tidesync/tide/core/protocol"
)

// The checker is independent of the client: it reads each client's store
// file as JSON, the database with SQL, and compares them with the rules of
// the run's resource (scope column tenant, row filter on vis) written out
// here again.

// dbState is the database at the end of a run.
type dbState struct {
	Items    map[string]item // by id
	Applied  map[string]int  // runs of the mutator per idempotency key
	Counters map[string]int64
	// KeysByTenant counts the distinct keys applied per tenant.
	KeysByTenant map[string]int
}

// storeFile is the subset of a client's store file the checker reads.
type storeFile struct {
	Records []storeRecord `json:"records"`
	Queue   struct {
		Mutations []storeMutation `json:"mutations"`
	} `json:"queue"`
}

// storeRecord is one scope's record in a store file.
type storeRecord struct {
	Digest     string                     `json:"digest"`
	Resource   string                     `json:"resource"`
	Conditions map[string]json.RawMessage `json:"conditions"`
	Cursor     string                     `json:"cursor"`
	Copy       bool                       `json:"copy"`
	Rows       map[string]json.RawMessage `json:"rows"`
}

// storeMutation is a queued mutation in a store file.
type storeMutation struct {
	Key string `json:"key"`
}

// clientView is what the checker knows of one client: who it is, what it
// may see, what it issued, and its store file's contents.
type clientView struct {
	User     string
	Allowed  []string // tenants the user may see
	Scopes   []string // tenants of the synced scopes (allowed ones and one denied)
	Issued   []string // idempotency keys of the mutations it issued
	Rejected map[string]string
	File     storeFile
}

// counts are the checker's findings; a run is good when every failure
// count is zero.
type counts struct {
	Clients, Rows, Mutations int // compared, for scale
	Lost                     int // a row the client may see, missing or different in its copy; an issued mutation not applied
	Leaked                   int // a row in a copy the client may not see (another tenant, another user's, a denied scope)
	Ghost                    int // a row in a copy that the database no longer has
	Twice                    int // a mutation key applied more than once, or a counter ahead of its keys
	Regressed                int // a stored cursor that went back
	Pending                  int // mutations still queued on a client at the end
	Rejected                 int // mutations the server rejected
	Unconverged              int // clients whose copy differs from the database
}

func (c counts) failed() bool {
	return c.Lost+c.Leaked+c.Ghost+c.Twice+c.Regressed+c.Pending+c.Rejected+c.Unconverged > 0
}

func (c *counts) add(o counts) {
	c.Clients += o.Clients
	c.Rows += o.Rows
	c.Mutations += o.Mutations
	c.Lost += o.Lost
	c.Leaked += o.Leaked
	c.Ghost += o.Ghost
	c.Twice += o.Twice
	c.Regressed += o.Regressed
	c.Pending += o.Pending
	c.Rejected += o.Rejected
	c.Unconverged += o.Unconverged
}

func (c counts) String() string {
	return fmt.Sprintf("lost=%d leaked=%d ghost=%d applied_twice=%d regressed=%d pending=%d rejected=%d unconverged=%d (clients=%d rows=%d mutations=%d)",
		c.Lost, c.Leaked, c.Ghost, c.Twice, c.Regressed, c.Pending, c.Rejected, c.Unconverged, c.Clients, c.Rows, c.Mutations)
}

// visible reports whether user, allowed the tenants allowed, may see row
// in the scope of tenant scope.
func visible(row item, scope, user string, allowed []string) bool {
	return row.Tenant == scope && slices.Contains(allowed, scope) && (row.Vis == visAll || row.Vis == user)
}

// compare checks every client against the database; problems receives a
// line per finding (the first few are printed).
func compare(db dbState, clients []clientView, problems func(string)) counts {
	var c counts
	c.Rows = len(db.Items)
	for _, cv := range clients {
		c.Clients++
		c.add(compareClient(db, cv, problems))
	}
	for key, n := range db.Applied {
		if n > 1 {
			c.Twice++
			problems(fmt.Sprintf("mutation %s applied %d times", key, n))
		}
	}
	for t, n := range db.Counters {
		if want := db.KeysByTenant[t]; int(n) != want {
			c.Twice++
			problems(fmt.Sprintf("counter of %s is %d, %d distinct keys applied", t, n, want))
		}
	}
	for id, it := range db.Items {
		if it.Writer == "mut" && it.N != 1 {
			c.Twice++
			problems(fmt.Sprintf("row %s written by %d mutations", id, it.N))
		}
	}
	return c
}

func compareClient(db dbState, cv clientView, problems func(string)) counts {
	var c counts
	bad := false
	report := func(n *int, format string, args ...any) {
		*n++
		bad = true
		problems(fmt.Sprintf("client %s: ", cv.User) + fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	for _, rec := range cv.File.Records {
		if rec.Resource != "items" {
			report(&c.Leaked, "a record of resource %q", rec.Resource)
			continue
		}
		var scope string
		if raw, ok := rec.Conditions["tenant"]; !ok || json.Unmarshal(raw, &scope) != nil {
			report(&c.Leaked, "a record without a tenant condition: %v", rec.Conditions)
			continue
		}
		seen[scope] = true
		if !slices.Contains(cv.Allowed, scope) {
			if len(rec.Rows) > 0 {
				report(&c.Leaked, "%d rows of denied tenant %s", len(rec.Rows), scope)
			}
			continue
		}
		if !rec.Copy {
			report(&c.Lost, "scope %s has no complete copy (cursor %q)", scope, rec.Cursor)
			continue
		}
		for key, raw := range rec.Rows {
			var got item
			if err := json.Unmarshal(raw, &got); err != nil {
				report(&c.Leaked, "scope %s: row %s does not decode: %v", scope, key, err)
				continue
			}
			want, exists := db.Items[key]
			switch {
			case got.ID != key || !visible(got, scope, cv.User, cv.Allowed):
				report(&c.Leaked, "scope %s: row %s %+v is not the user's to see", scope, key, got)
			case !exists:
				report(&c.Ghost, "scope %s: row %s %+v is deleted in the database", scope, key, got)
			case !visible(want, scope, cv.User, cv.Allowed):
				report(&c.Leaked, "scope %s: row %s is %+v in the database, hidden from the user; the copy has %+v", scope, key, want, got)
			case got != want:
				report(&c.Lost, "scope %s: row %s is %+v, the database has %+v", scope, key, got, want)
			}
		}
		for key, want := range db.Items {
			if _, ok := rec.Rows[key]; !ok && visible(want, scope, cv.User, cv.Allowed) {
				report(&c.Lost, "scope %s: row %s %+v is missing", scope, key, want)
			}
		}
	}
	for _, t := range cv.Scopes {
		if !seen[t] && slices.Contains(cv.Allowed, t) {
			report(&c.Lost, "no record of scope %s", t)
		}
	}
	queued := map[string]bool{}
	for _, m := range cv.File.Queue.Mutations {
		queued[m.Key] = true
		report(&c.Pending, "mutation %s still queued", m.Key)
	}
	for _, key := range cv.Issued {
		c.Mutations++
		if code, ok := cv.Rejected[key]; ok {
			report(&c.Rejected, "mutation %s rejected: %s", key, code)
			continue
		}
		if db.Applied[key] == 0 && !queued[key] {
			report(&c.Lost, "mutation %s issued but never applied", key)
		}
	}
	if bad {
		c.Unconverged = 1
	}
	return c
}

// readStoreFile decodes a client's store file.
func readStoreFile(path string) (storeFile, error) {
	var f storeFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	err = json.Unmarshal(b, &f)
	return f, err
}

// cursorMonitor sees every cursor a client's store saves and counts those
// that go back: a cursor of another epoch, at an earlier position, or a
// snapshot cursor at the position of a change cursor already saved. A
// save without a cursor is a reset and starts the scope over.
type cursorMonitor struct {
	mu        sync.Mutex
	last      map[string]string // client + "\x00" + digest → last cursor saved
	regressed int
	resets    int
	saves     int
	problems  []string
}

func newCursorMonitor() *cursorMonitor { return &cursorMonitor{last: map[string]string{}} }

func (m *cursorMonitor) saw(clientID, digest, cursor string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saves++
	k := clientID + "\x00" + digest
	prev := m.last[k]
	m.last[k] = cursor
	if cursor == "" {
		if prev != "" {
			m.resets++
		}
		return
	}
	if prev == "" || prev == cursor {
		return
	}
	if why := regression(prev, cursor); why != "" {
		m.regressed++
		if len(m.problems) < 20 {
			m.problems = append(m.problems, fmt.Sprintf("client %s scope %s: cursor %s after %s: %s", clientID, digest[:min(8, len(digest))], cursor, prev, why))
		}
	}
}

// regression says why cursor next is behind prev, or "" when it is not.
func regression(prev, next string) string {
	p, errP := protocol.ParseCursor(prev)
	n, errN := protocol.ParseCursor(next)
	switch {
	case errP != nil || errN != nil:
		return "malformed"
	case p.Epoch != n.Epoch:
		return "another epoch without a reset"
	case n.Pos < p.Pos:
		return "earlier position"
	case n.Pos == p.Pos && n.Snapshot && !p.Snapshot:
		return "a snapshot after the change cursor at its position"
	}
	return ""
}

func (m *cursorMonitor) result() (regressed, resets, saves int, problems []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.regressed, m.resets, m.saves, slices.Clone(m.problems)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// joinInts formats name=value pairs in the order given.
func joinPairs(pairs ...any) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", pairs[i], pairs[i+1])
	}
	return b.String()
}
