package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tidesync/tide/client"
	"github.com/tidesync/tide/core/protocol"
)

// checkedStore is a client's FileStore with every saved cursor shown to
// the run's cursor monitor.
type checkedStore struct {
	*client.FileStore
	id  string
	mon *cursorMonitor
}

// Save saves r and reports its cursor once it is saved.
func (s checkedStore) Save(ctx context.Context, r client.Record) error {
	if err := s.FileStore.Save(ctx, r); err != nil {
		return err
	}
	s.mon.saw(s.id, r.Digest, r.Cursor)
	return nil
}

// fclient is one Go client of the run with its store file, its proxy and
// its writer. A restart (a fault) ends the client and makes a new one from
// the same store file and origin, as an app process restarting would.
type fclient struct {
	i       int
	user    string
	allowed []string // tenants the user may see and write
	scopes  []string // tenants synced: two allowed ones and one refused
	origin  string
	path    string // store file
	proxy   *proxy
	mon     *cursorMonitor

	mu       sync.Mutex // held while the client is replaced; Mutate takes it shared
	c        *client.Client
	cancel   context.CancelFunc
	done     chan struct{}
	issued   []string
	rejected map[string]string
	restarts int
	events   map[string]int // by eventLabel
	eventLog *os.File       // every event, one line each: client-N.log beside the store file
	seq      int
}

func newFClient(i, tenants int, dir string, p *proxy, mon *cursorMonitor) (*fclient, error) {
	lf, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("client-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fc := &fclient{eventLog: lf, i: i, user: fmt.Sprintf("u%d", i), origin: fmt.Sprintf("dev-%d", i),
		path: filepath.Join(dir, fmt.Sprintf("client-%d.json", i)), proxy: p, mon: mon,
		rejected: map[string]string{}, events: map[string]int{}}
	// Synced and allowed: tenants i and i+1. Allowed, written, not synced:
	// i+2. Synced and refused (its record must stay empty): i+3.
	t := func(k int) string { return tenantName((i + k) % tenants) }
	fc.allowed = []string{t(0), t(1), t(2)}
	fc.scopes = []string{t(0), t(1), t(3)}
	return fc, nil
}

func tenantName(i int) string { return fmt.Sprintf("t%d", i) }

// start makes the client from its store file and runs it. Called with
// fc.mu held (or before anything else uses fc).
func (fc *fclient) start() error {
	fs, err := client.NewFileStore(fc.path)
	if err != nil {
		return err
	}
	hdr := http.Header{hdrUser: {fc.user}, hdrTenants: {strings.Join(fc.allowed, ",")}}
	c, err := client.New(client.Config{
		URL:        "ws://" + fc.proxy.addr() + "/tide/ws",
		Header:     hdr,
		Origin:     fc.origin,
		Store:      checkedStore{FileStore: fs, id: fc.user, mon: fc.mon},
		MinBackoff: 50 * time.Millisecond,
		MaxBackoff: time.Second,
		OnEvent:    fc.onEvent,
	})
	if err != nil {
		return err
	}
	for _, t := range fc.scopes {
		if _, err := c.Sync(client.Scope{Resource: "items", Conditions: map[string]any{"tenant": t}}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	fc.c, fc.cancel, fc.done = c, cancel, done
	return nil
}

// eventMu guards every client's events and rejected (OnEvent runs on
// the client's goroutines, and must not wait for fc.mu).
var eventMu sync.Mutex

func (fc *fclient) onEvent(e client.Event) {
	eventMu.Lock()
	defer eventMu.Unlock()
	fc.events[eventLabel(e)]++
	fmt.Fprintf(fc.eventLog, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), e)
	// unavailable, draining and rate_limited are answered with a resend,
	// not a rollback: only the other codes reject a mutation for good.
	if e.Kind == client.EventMutationRejected && e.Code != protocol.CodeUnavailable && e.Code != protocol.CodeDraining && e.Code != protocol.CodeRateLimited {
		fc.rejected[e.Key] = string(e.Code)
	}
}

// eventLabel names an event in the run's client_events: its kind, with
// the code of a server error or a rejection ("server-error/unavailable")
// or the close code the server sent ("disconnected/4001").
func eventLabel(e client.Event) string {
	switch {
	case e.Code != "":
		return string(e.Kind) + "/" + string(e.Code)
	case e.CloseCode != 0:
		return fmt.Sprintf("%s/%d", e.Kind, e.CloseCode)
	}
	return string(e.Kind)
}

// stop ends the client's Run and waits for it. Called with fc.mu held.
func (fc *fclient) stop() {
	if fc.cancel == nil {
		return
	}
	fc.cancel()
	<-fc.done
	fc.cancel = nil
}

// restart stops the client and starts a new one on the same store file.
func (fc *fclient) restart() error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.stop()
	fc.restarts++
	return fc.start()
}

// mutate issues one put mutation: a new row of one of the user's tenants,
// visible to all or only to the user, written optimistically.
func (fc *fclient) mutate(rng *rand.Rand) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.seq++
	key := fmt.Sprintf("%s-%d", fc.user, fc.seq)
	args := putArgs{Key: key, ID: "m-" + key, Tenant: fc.allowed[rng.IntN(len(fc.allowed))], Vis: visAll}
	if rng.IntN(3) == 0 {
		args.Vis = fc.user
	}
	row := item{ID: args.ID, Tenant: args.Tenant, Vis: args.Vis, N: 1, Writer: "mut"}
	_, err := fc.c.Mutate(context.Background(), client.Mutation{Resource: "items", Name: "put", Args: args, Key: key,
		Local: func(tx *client.LocalTx) error {
			_, raw, err := protocol.EncodeRow(row)
			if err != nil {
				return err
			}
			return tx.Upsert("items", row.ID, raw)
		}})
	if err == nil {
		fc.issued = append(fc.issued, key)
	}
}

// pending returns the client's mutations not yet settled.
func (fc *fclient) pending() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.c.Pending())
}

// view is what the checker needs of the client, with its store file.
func (fc *fclient) view() (clientView, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	f, err := readStoreFile(fc.path)
	if err != nil {
		return clientView{}, err
	}
	eventMu.Lock()
	rej := make(map[string]string, len(fc.rejected))
	for k, v := range fc.rejected {
		rej[k] = v
	}
	eventMu.Unlock()
	return clientView{User: fc.user, Allowed: fc.allowed, Scopes: fc.scopes,
		Issued: append([]string(nil), fc.issued...), Rejected: rej, File: f}, nil
}
