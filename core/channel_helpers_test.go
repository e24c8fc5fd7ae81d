package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/core/tidetest"
	"github.com/tidesync/tide/internal/testenv"
	"github.com/tidesync/tide/middleware"
)

// cursorMsg is the message schema of the test boards' channel.
type cursorMsg struct {
	ID   string `json:"id"`
	X, Y int
}

// Validate refuses negative positions, to test a schema's own check.
func (m *cursorMsg) Validate() error {
	if m.X < 0 || m.Y < 0 {
		return fmt.Errorf("negative position")
	}
	return nil
}

// boardPublish lets the members of a board publish on it, except "eve",
// who may only watch.
func boardPublish(ctx context.Context, r authz.Request) error {
	if r.Principal.ID == "eve" {
		return authz.ErrForbidden
	}
	return authz.RequireClaim("board_id", "projects")(ctx, r)
}

// registerBoards declares the test channels: board:{board_id} with
// presence, and chat:{board_id} without.
func registerBoards(t testing.TB, e *core.Engine) {
	t.Helper()
	if err := core.RegisterChannel(e, core.Channel[cursorMsg]{
		Pattern:   "board:{board_id}",
		Subscribe: authz.RequireClaim("board_id", "projects"),
		Publish:   boardPublish,
		Presence:  true,
	}); err != nil {
		t.Fatal(err)
	}
	if err := core.RegisterChannel(e, core.Channel[json.RawMessage]{
		Pattern:   "chat:{board_id}",
		Subscribe: authz.RequireClaim("board_id", "projects"),
	}); err != nil {
		t.Fatal(err)
	}
}

type chanNode struct {
	e   *core.Engine
	url string
}

// busKinds are the cross-node transports of app channels.
var busKinds = []string{"memory", "postgres", "nats"}

// channelCluster starts n engines sharing the bus of kind, each behind its
// own HTTP server, with the test boards registered.
func channelCluster(t testing.TB, kind string, n int, cc core.ChannelConfig) []*chanNode {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	var feeds []feed.Feed
	var buses []feed.Bus
	switch kind {
	case "memory":
		f := memfeed.New(memfeed.Options{})
		for range n {
			feeds, buses = append(feeds, f), append(buses, nil)
		}
	case "postgres":
		// One feed for every node keeps the test's connections few (the
		// database is shared); each engine still listens to the broadcasts
		// on a connection of its own, so they cross Postgres.
		pool, schema := testenv.PostgresConfig(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
		f := newPgFeed(t, pool, schema, pgfeed.Options{Logger: quiet})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := f.Migrate(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			feeds, buses = append(feeds, f), append(buses, nil)
		}
	case "nats":
		url := testenv.NATSURL(t)
		prefix := fmt.Sprintf("tch%d", time.Now().UnixNano()%1e9)
		t.Cleanup(func() { deleteStream(url, prefix) })
		for range n {
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			f := memfeed.New(memfeed.Options{}) // changes stay on each node: only the bus is shared
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			b, err := natsbus.New(ctx, nc, f, natsbus.Options{Prefix: prefix, MemoryStorage: true, Logger: quiet})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			feeds, buses = append(feeds, f), append(buses, b)
		}
	default:
		t.Fatalf("unknown bus %q", kind)
	}
	nodes := make([]*chanNode, n)
	for i := range n {
		nodes[i] = startChanNode(t, core.Config{Feed: feeds[i], Bus: buses[i], Logger: quiet, Channels: cc})
	}
	return nodes
}

// channelClusterOn starts one node on feed f (and its broadcasts).
func channelClusterOn(t *testing.T, f feed.Feed, cc core.ChannelConfig) *chanNode {
	return startChanNode(t, core.Config{Feed: f, Logger: slog.New(slog.DiscardHandler), Channels: cc})
}

// channelClusterOnConfig starts one node configured by cfg.
func channelClusterOnConfig(t *testing.T, cfg core.Config) *chanNode {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return startChanNode(t, cfg)
}

// startChanNode starts an engine with the test boards behind an HTTP
// server, shut down when the test ends.
func startChanNode(t testing.TB, cfg core.Config) *chanNode {
	t.Helper()
	e, err := core.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	registerBoards(t, e)
	return serveChanNode(t, e)
}

// serveChanNode serves e behind an HTTP server, shut down when the test
// ends.
func serveChanNode(t testing.TB, e *core.Engine) *chanNode {
	t.Helper()
	ts := httptest.NewServer(middleware.Middleware(e, middleware.WithPrincipal(headerPrincipal))(http.NotFoundHandler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		ts.Close()
	})
	return &chanNode{e: e, url: "ws" + strings.TrimPrefix(ts.URL, "http") + "/tide/ws"}
}

// dialRaw connects user (with boards in its claim) without saying hello.
func dialRaw(t testing.TB, url, user string, boards ...string) *tidetest.Conn {
	t.Helper()
	return tidetest.Dial(t, url, tidetest.WithHeader("X-User", user), tidetest.WithHeader("X-Projects", strings.Join(boards, ",")))
}

func deleteStream(url, prefix string) {
	nc, err := nats.Connect(url)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, strings.ToUpper(prefix)+"_CHANGES")
}

// chanClient is a test connection whose reader keeps what the channel
// frames said: the messages and presence list of each topic, and the
// errors.
type chanClient struct {
	t    *testing.T
	user string
	conn *tidetest.Conn

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every frame
	messages map[string][]protocol.ServerFrame
	presence map[string]map[string]protocol.Member // topic → member id → member
	errors   []protocol.ServerFrame
	acked    map[string]bool // topic-subscribed received
	closed   error
	done     chan struct{}
}

// dialChan connects user (with the given boards in its claim) to node and
// says hello.
func dialChan(t *testing.T, n *chanNode, user string, boards ...string) *chanClient {
	t.Helper()
	conn := dialRaw(t, n.url, user, boards...).Timeout(0)
	conn.Hello(protocol.ClientFrame{})
	c := &chanClient{t: t, user: user, conn: conn, changed: make(chan struct{}), done: make(chan struct{}),
		messages: map[string][]protocol.ServerFrame{}, acked: map[string]bool{}, presence: map[string]map[string]protocol.Member{}}
	go c.read()
	t.Cleanup(func() { conn.Close(); <-c.done })
	return c
}

func (c *chanClient) read() {
	defer close(c.done)
	for {
		f, _, err := c.conn.ReadFrame()
		c.mu.Lock()
		if err != nil {
			c.closed = err
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
			return
		}
		switch f.Type {
		case protocol.FrameMessage:
			c.messages[f.Topic] = append(c.messages[f.Topic], f)
		case protocol.FramePresence:
			set := map[string]protocol.Member{}
			for _, m := range f.Members {
				set[m.ID] = m
			}
			c.presence[f.Topic] = set
		case protocol.FramePresenceDiff:
			set := c.presence[f.Topic]
			if set == nil {
				c.t.Errorf("%s: presence-diff before presence on %s", c.user, f.Topic)
				set = map[string]protocol.Member{}
				c.presence[f.Topic] = set
			}
			for _, m := range f.Leaves {
				delete(set, m.ID)
			}
			for _, m := range f.Joins {
				set[m.ID] = m
			}
		case protocol.FrameTopicSubscribed:
			c.acked[f.Topic] = true
		case protocol.FrameError:
			c.errors = append(c.errors, f)
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// waitFor waits until cond holds of the client's state (called with c.mu
// held). The deadline bounds a hang; it is not a timing assertion.
func (c *chanClient) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		ok, ch, closed := cond(), c.changed, c.closed
		c.mu.Unlock()
		if ok {
			return
		}
		if closed != nil {
			c.t.Fatalf("%s: connection ended waiting for %s: %v", c.user, what, closed)
		}
		select {
		case <-ch:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			c.t.Fatalf("%s: no %s within 30s; presence %v, errors %v", c.user, what, c.presence, c.errors)
		}
	}
}

func (c *chanClient) send(typ, topic string, data any) {
	c.t.Helper()
	f := topicFrame(typ, topic)
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			c.t.Fatal(err)
		}
		if typ == protocol.FramePublish {
			f.Data = b
		} else {
			f.State = b
		}
	}
	c.conn.Send(f)
}

// join subscribes to topic with a presence state and waits for the
// presence list (presence topics) or the acknowledgement.
func (c *chanClient) join(topic string, state any) {
	c.t.Helper()
	c.send(protocol.FrameTopicSubscribe, topic, state)
	c.waitFor("presence of "+topic, func() bool { return c.presence[topic] != nil })
}

// principals returns the sorted principals (with state) of topic's
// presence list as the client sees it.
func (c *chanClient) principalsLocked(topic string) []string {
	var out []string
	for _, m := range c.presence[topic] {
		out = append(out, m.Principal+"="+string(m.State))
	}
	slices.Sort(out)
	return out
}

// waitPresence waits until the client's presence list of topic is want
// ("principal=state" entries, in any order).
func (c *chanClient) waitPresence(topic string, want ...string) {
	c.t.Helper()
	slices.Sort(want)
	c.waitFor(fmt.Sprintf("presence %v on %s", want, topic), func() bool {
		return slices.Equal(c.principalsLocked(topic), want)
	})
}

// waitError waits for an error frame about topic with code.
func (c *chanClient) waitError(topic string, code protocol.Code) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("error %s on %s", code, topic), func() bool {
		for _, f := range c.errors {
			if f.Topic == topic && f.Code == code {
				return true
			}
		}
		return false
	})
}

func (c *chanClient) messagesOf(topic string) []protocol.ServerFrame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.messages[topic])
}

// topicFrame returns a channel client frame of type typ for topic.
func topicFrame(typ, topic string) protocol.ClientFrame {
	f := protocol.ClientFrame{V: protocol.Version, Type: typ}
	f.Topic = topic
	return f
}

// joinRaw subscribes c to topic and reads the acknowledgement (and, with
// presence, the presence list).
func joinRaw(c *tidetest.Conn, topic string, presence bool) {
	c.Send(topicFrame(protocol.FrameTopicSubscribe, topic))
	c.Expect(protocol.FrameTopicSubscribed)
	if presence {
		c.Expect(protocol.FramePresence)
	}
}
