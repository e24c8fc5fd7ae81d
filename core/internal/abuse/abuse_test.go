package abuse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// The documented bounds of the suite (docs/performance.md, "Abuse
// suite"). heapBound is how far the server's live heap (HeapAlloc after a
// GC, in this process, which hosts the server) may grow above its idle
// figure under any one flood; liveness is how long another user's
// subscription, mutation or topic join may take while a flood runs: a
// bound on a hang, not a speed assertion.
const (
	heapBound = 128 << 20
	liveness  = 30 * time.Second
)

// sabotageEnv, set to "no-principal-bounds", raises every bound per
// principal (and the per-connection bytes of queued mutations, and the
// presence join rate) out of reach, as they were before they existed: the
// suite must then fail. It is how the suite is shown to catch what it is
// for.
const sabotageEnv = "TIDE_ABUSE_SABOTAGE"

func sabotaged() bool { return os.Getenv(sabotageEnv) == "no-principal-bounds" }

type todo struct {
	ID        string `tide:"id,pk"`
	ProjectID string `tide:"project_id,scope"`
	Title     string `tide:"title"`
}

type putArgs struct {
	ID        string `json:"id"`
	ProjectID string `json:"project_id"`
	Title     string `json:"title"`
}

type server struct {
	e    *core.Engine
	url  string
	gate chan struct{} // closed: the hold mutator's policy lets its calls through
}

// principal reads the caller from X-User, standing in for an app's session.
func principal(r *http.Request) (authz.Principal, error) {
	if u := r.Header.Get("X-User"); u != "" {
		return authz.Principal{ID: u}, nil
	}
	return authz.Anonymous, nil
}

func allow(_ context.Context, r authz.Request) error {
	if r.Principal.IsAnonymous() {
		return authz.ErrUnauthenticated
	}
	return nil
}

// newServer serves an engine on the Postgres feed, in a schema of the
// test's own: the todos resource with mutators put and hold (whose policy
// waits for gate, like a slow policy or database: the mutations behind it
// queue), and the presence channel board:{id}. MaxPresence is 200, so a
// flood of presence connections can fill a topic in little time.
func newServer(t *testing.T) *server {
	t.Helper()
	pool, schema := testenv.PostgresConfig(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE todos (id text PRIMARY KEY, project_id text NOT NULL, title text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	f, err := pgfeed.New(pool, pgfeed.Options{Schema: schema + "_tide", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	cfg := core.Config{Feed: f, Logger: quiet, Channels: core.ChannelConfig{MaxPresence: 200}}
	if sabotaged() {
		const huge = 1 << 40
		cfg.MaxConnsPerPrincipal, cfg.MaxSubscriptionsPerPrincipal = huge, huge
		cfg.MaxQueuedMutationsPerPrincipal, cfg.MaxQueuedMutationBytesPerPrincipal, cfg.MaxQueuedMutationBytes = huge, huge, huge
		cfg.Channels.MaxTopicsPerPrincipal, cfg.Channels.MaxPresencePerPrincipal = huge, huge
		cfg.Channels.PresenceJoinRate, cfg.Channels.PresenceJoinBurst = huge, huge
	}
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	todos, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: allow})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{e: e, gate: make(chan struct{})}
	put := func(ctx context.Context, tx *core.Tx, a putArgs) error {
		return todos.UpsertTx(ctx, tx, todo(a))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(core.AddMutator(todos, "put", core.Mutator[putArgs]{
		Authorize: func(context.Context, authz.Principal, putArgs) error { return nil },
		Run:       put,
	}))
	must(core.AddMutator(todos, "hold", core.Mutator[putArgs]{
		Authorize: func(ctx context.Context, _ authz.Principal, _ putArgs) error {
			select {
			case <-s.gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Run: put,
	}))
	must(core.RegisterChannel(e, core.Channel[json.RawMessage]{Pattern: "board:{id}", Subscribe: allow, Presence: true}))
	must(f.Migrate(ctx, e.Schemas()...))
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(principal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		select {
		case <-s.gate:
		default:
			close(s.gate) // the floods did not end as they should
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	s.url = "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"
	return s
}

// liveHeap is the live heap after a full GC.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// checkHeap fails the test if the live heap is more than heapBound above
// idle, and logs the figure.
func checkHeap(t *testing.T, flood string, idle uint64) {
	t.Helper()
	now := liveHeap()
	grew := int64(now) - int64(idle)
	t.Logf("%s: live heap %.1f MiB (idle %.1f MiB, %+.1f MiB; bound +%d MiB; sabotaged %v)", flood, mib(now), mib(idle), float64(grew)/(1<<20), heapBound>>20, sabotaged())
	if grew > heapBound {
		t.Errorf("%s: the server's live heap grew %.1f MiB above idle, more than the bound of %d MiB", flood, float64(grew)/(1<<20), heapBound>>20)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// rawDial opens a flooding client's socket as user, closed when the test
// ends.
func rawDial(t *testing.T, url, user string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, http.Header{"X-User": {user}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// helloRaw says hello on ws and returns the answer: welcome, or the
// refusal of a connection over the principal's bound.
func helloRaw(t *testing.T, ws *websocket.Conn) protocol.ServerFrame {
	t.Helper()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	return readRaw(t, ws)
}

func readRaw(t *testing.T, ws *websocket.Conn) protocol.ServerFrame {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(liveness))
	_, data, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	f, ferr := protocol.DecodeServerFrame(data)
	if ferr != nil {
		t.Fatalf("frame %s: %v", data, ferr)
	}
	return f
}

// serves checks that another user is served while a flood runs: a new
// connection of bob is welcomed, its subscription catches up, its
// mutation is acknowledged and it joins topic (a presence topic), each
// within the liveness bound.
func (s *server) serves(t *testing.T, topic string) {
	t.Helper()
	c := tidetest.Dial(t, s.url, tidetest.WithHeader("X-User", "bob"), tidetest.WithTimeout(liveness))
	defer c.Close()
	c.Hello(protocol.ClientFrame{})
	c.Subscribe("s", "todos", map[string]any{"project_id": "p1"})
	c.Collect("s")
	key := fmt.Sprint("bob-", time.Now().UnixNano())
	c.Send(map[string]any{"v": 1, "type": "mutate", "key": key, "seq": 1, "resource": "todos", "name": "put", "args": putArgs{ID: key, ProjectID: "p1", Title: "t"}, "at": time.Now().UnixMilli()})
	for {
		f := c.Next()
		if f.Type == protocol.FrameAck && f.Key == key {
			break
		}
		if f.Type != protocol.FrameChanges && f.Type != protocol.FrameCaughtUp {
			t.Fatalf("bob's mutation answered by %+v", f)
		}
	}
	c.Unsubscribe("s")
	f := protocol.ClientFrame{V: protocol.Version, Type: protocol.FrameTopicSubscribe}
	f.Topic = topic
	c.Send(f)
	for {
		f := c.Next()
		if f.Type == protocol.FrameTopicSubscribed && f.Topic == topic {
			return
		}
		if f.Type == protocol.FrameError {
			t.Fatalf("bob's join of %s refused: %+v", topic, f)
		}
	}
}

// TestAbuse runs the floods one after another on one server, each by a
// principal of its own, and checks after each that the server's heap is
// within heapBound of its idle figure and that bob is served meanwhile.
// Run it with TIDE_ABUSE_SABOTAGE=no-principal-bounds to see it fail.
func TestAbuse(t *testing.T) {
	s := newServer(t)
	s.serves(t, "board:warmup") // the engine's lazily started parts run before idle is measured
	idle := liveHeap()
	t.Run("queued mutations", func(t *testing.T) { floodMutations(t, s, idle) })
	t.Run("presence connections", func(t *testing.T) { floodPresence(t, s, idle) })
	t.Run("presence churn", func(t *testing.T) { floodChurn(t, s, idle) })
	t.Run("oversized frames", func(t *testing.T) { floodOversized(t, s, idle) })
}

// floodMutations: one principal opens 40 connections and queues 256
// mutations of 20 KiB on each (40 under -race, still more than the
// principal's 16 MiB), behind a policy that holds them (a slow database
// would); 200 MiB if the server kept them all.
func floodMutations(t *testing.T, s *server, idle uint64) {
	conns, perConn := 40, 256
	if raceEnabled {
		perConn = 40
	}
	title := strings.Repeat("x", 20<<10)
	at := time.Now().UnixMilli()
	var refusedConns, rejected, queued atomic.Int64
	var wg sync.WaitGroup
	var open []*websocket.Conn
	for i := range conns {
		ws := rawDial(t, s.url, "mallory3")
		open = append(open, ws)
		if f := helloRaw(t, ws); f.Type != protocol.FrameWelcome {
			if f.Code != protocol.CodeTooManyConnections {
				t.Fatalf("hello answered by %+v", f)
			}
			refusedConns.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					_ = ws.SetReadDeadline(time.Now().Add(liveness))
					_, data, err := ws.ReadMessage()
					if err != nil {
						t.Errorf("mallory's connection %d: %v", i, err)
						return
					}
					f, _ := protocol.DecodeServerFrame(data)
					switch {
					case f.Type == protocol.FrameReject && f.Code == protocol.CodeRateLimited:
						rejected.Add(1)
					case f.Type == protocol.FrameError && f.ID == "probe":
						return
					case f.Type == protocol.FramePing:
					default:
						t.Errorf("mallory's connection %d: %s", i, data)
						return
					}
				}
			}()
			for j := range perConn {
				frame := fmt.Sprintf(`{"v":1,"type":"mutate","key":"m%d-%d","seq":1,"resource":"todos","name":"hold","args":{"id":"m%d-%d","project_id":"p1","title":"%s"},"at":%d}`, i, j, i, j, title, at)
				if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
			_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"unsubscribe","id":"probe"}`))
			<-done
			queued.Add(int64(perConn))
		}()
	}
	wg.Wait()
	t.Logf("mallory: %d connections refused, %d mutations sent, %d rejected rate_limited", refusedConns.Load(), queued.Load(), rejected.Load())
	// Every mutation is queued or rejected; the queued ones wait.
	s.serves(t, "board:f3")
	checkHeap(t, "queued mutations", idle)
	// mallory leaves; the policy lets the held mutations through, and each
	// connection's queue goes with it.
	for _, ws := range open {
		_ = ws.Close()
	}
	close(s.gate)
}

// floodPresence: one principal opens 210 connections, each joining one
// presence topic whose list holds at most 200 members.
func floodPresence(t *testing.T, s *server, idle uint64) {
	const conns, topic = 210, "board:f4"
	joined, refused := 0, map[protocol.Code]int{}
	for range conns {
		ws := rawDial(t, s.url, "mallory4")
		if f := helloRaw(t, ws); f.Type != protocol.FrameWelcome {
			refused[f.Code]++
			continue
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"topic-subscribe","topic":"`+topic+`"}`)); err != nil {
			t.Fatal(err)
		}
		if f := readRaw(t, ws); f.Type == protocol.FrameTopicSubscribed {
			joined++
		} else {
			refused[f.Code]++
		}
	}
	t.Logf("mallory: %d members of %s; refused %v", joined, topic, refused)
	s.serves(t, topic)
	checkHeap(t, "presence connections", idle)
}

// floodChurn: 100 members (30 under -race) listen on a presence topic
// while one client toggles its subscription to it as fast as its frame
// burst allows; each member receives a diff per join and per leave. The
// diffs a member receives must stay within what the join rate allows,
// whatever the client sends.
func floodChurn(t *testing.T, s *server, idle uint64) {
	members, toggles, topic := 100, 130, "board:f5"
	if raceEnabled {
		members = 30
	}
	type member struct {
		diffs, bytes atomic.Int64
		sawBob       chan struct{}
	}
	ms := make([]*member, members)
	var wg sync.WaitGroup
	for i := range ms {
		m := &member{sawBob: make(chan struct{})}
		ms[i] = m
		ws := rawDial(t, s.url, fmt.Sprint("member-", i))
		if f := helloRaw(t, ws); f.Type != protocol.FrameWelcome {
			t.Fatalf("member %d: %+v", i, f)
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"topic-subscribe","topic":"`+topic+`"}`)); err != nil {
			t.Fatal(err)
		}
		readRaw(t, ws) // topic-subscribed
		readRaw(t, ws) // presence
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_ = ws.SetReadDeadline(time.Now().Add(2 * liveness))
				_, data, err := ws.ReadMessage()
				if err != nil {
					return
				}
				f, _ := protocol.DecodeServerFrame(data)
				if f.Type != protocol.FramePresenceDiff {
					continue
				}
				if len(f.Joins) == 1 && f.Joins[0].Principal == "bob" {
					close(m.sawBob)
					return
				}
				if (len(f.Joins) == 1 && f.Joins[0].Principal == "mallory5") || (len(f.Leaves) == 1 && f.Leaves[0].Principal == "mallory5") {
					m.diffs.Add(1)
					m.bytes.Add(int64(len(data)))
				}
			}
		}()
	}
	// Members joined one after another: their own diffs are behind them.
	ws := rawDial(t, s.url, "mallory5")
	if f := helloRaw(t, ws); f.Type != protocol.FrameWelcome {
		t.Fatalf("mallory: %+v", f)
	}
	began := time.Now()
	sent := 0
	for range toggles {
		for _, typ := range []string{"topic-subscribe", "topic-unsubscribe"} {
			frame := `{"v":1,"type":"` + typ + `","topic":"` + topic + `"}`
			sent += len(frame)
			if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"v":1,"type":"unsubscribe","id":"probe"}`))
	for f := readRaw(t, ws); f.Type != protocol.FrameError || f.ID != "probe"; f = readRaw(t, ws) {
	}
	elapsed := time.Since(began)
	// bob's join comes after every diff of the churn on each member's
	// connection: once a member saw it, its count is final.
	s.serves(t, topic)
	for i, m := range ms {
		select {
		case <-m.sawBob:
		case <-time.After(liveness):
			t.Fatalf("member %d never saw bob join", i)
		}
	}
	wg.Wait()
	rate, burst := 2, 16 // the defaults of PresenceJoinRate and PresenceJoinBurst
	most := 2*(burst+int(elapsed.Seconds()*float64(rate))+1) + 1
	var total, totalBytes int64
	worst := int64(0)
	for _, m := range ms {
		total += m.diffs.Load()
		totalBytes += m.bytes.Load()
		worst = max(worst, m.diffs.Load())
	}
	t.Logf("churn: %d toggles (%d bytes) in %v; the members received %d presence diffs (%d bytes, %.0fx what the client sent), at most %d each (bound %d)",
		toggles, sent, elapsed.Round(time.Millisecond), total, totalBytes, float64(totalBytes)/float64(sent), worst, most)
	if worst > int64(most) {
		t.Errorf("a member received %d presence diffs of one client's churn, more than the %d its join rate allows", worst, most)
	}
	checkHeap(t, "presence churn", idle)
}

// floodOversized: one principal's connections send 300 frames (30 under
// -race) of 256 KiB, four times MaxFrameBytes, as fast as they can.
func floodOversized(t *testing.T, s *server, idle uint64) {
	conns, frames := 2, 300
	if raceEnabled {
		frames = 30
	}
	big := []byte(`{"v":1,"type":"publish","topic":"board:f6","data":"` + strings.Repeat("x", 256<<10) + `"}`)
	var wg sync.WaitGroup
	var answers atomic.Int64
	for range conns {
		ws := rawDial(t, s.url, "mallory6")
		if f := helloRaw(t, ws); f.Type != protocol.FrameWelcome {
			t.Fatalf("mallory: %+v", f)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				_ = ws.SetReadDeadline(time.Now().Add(liveness))
				if _, _, err := ws.ReadMessage(); err != nil {
					var ce *websocket.CloseError
					if !errors.As(err, &ce) && !strings.Contains(err.Error(), "closed") {
						t.Errorf("mallory's connection: %v", err)
					}
					return
				}
				answers.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			for range frames {
				if ws.WriteMessage(websocket.TextMessage, big) != nil {
					return
				}
			}
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		}()
	}
	s.serves(t, "board:f6")
	wg.Wait()
	t.Logf("oversized: %d frames of %d KiB sent, %d answers", conns*frames, len(big)>>10, answers.Load())
	checkHeap(t, "oversized frames", idle)
}
