package client

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/protocol"
)

// topicWatch records what a joined topic's callbacks were told.
type topicWatch struct {
	mu       sync.Mutex
	changed  chan struct{}
	messages []Message
	states   []string // the latest presence list's states, sorted
	ids      []string // the latest presence list's member ids
	errs     []protocol.Code
}

func newTopicWatch() *topicWatch { return &topicWatch{changed: make(chan struct{})} }

func (w *topicWatch) options(state any) TopicOptions {
	note := func(f func()) {
		w.mu.Lock()
		f()
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}
	return TopicOptions{
		State:     state,
		OnMessage: func(m Message) { note(func() { w.messages = append(w.messages, m) }) },
		OnPresence: func(ms []protocol.Member) {
			note(func() {
				w.states, w.ids = w.states[:0], w.ids[:0]
				for _, m := range ms {
					w.ids = append(w.ids, m.ID)
					w.states = append(w.states, string(m.State))
				}
				slices.Sort(w.states)
			})
		},
		OnError: func(err *protocol.Error) { note(func() { w.errs = append(w.errs, err.Code) }) },
	}
}

func (w *topicWatch) wait(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(failAfter)
	for {
		w.mu.Lock()
		done, ch := ok(), w.changed
		w.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("no %s within %v: states %v, %d messages, errors %v", what, failAfter, w.states, len(w.messages), w.errs)
		}
	}
}

func (w *topicWatch) waitStates(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	w.wait(t, "presence "+stringsJoin(want), func() bool { return slices.Equal(w.states, want) })
}

func stringsJoin(s []string) string { b, _ := json.Marshal(s); return string(b) }

type chatNote struct {
	Text string `json:"text"`
}

func TestClientTopics(t *testing.T) {
	srv := newRealServer(t, core.Config{})
	if err := core.RegisterChannel(srv.engine, core.Channel[chatNote]{Pattern: "room:{id}", Subscribe: authz.Allow, Publish: authz.Allow, Presence: true}); err != nil {
		t.Fatal(err)
	}
	a, _ := newTestClient(t, Config{URL: srv.url})
	b, _ := newTestClient(t, Config{URL: srv.url})
	wa, wb := newTopicWatch(), newTopicWatch()
	ta, err := a.JoinTopic("room:r1", wa.options("a0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ta.Publish(context.Background(), chatNote{Text: "early"}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Publish before Run: %v, want ErrNotConnected", err)
	}
	if _, err := a.JoinTopic("room:r1", TopicOptions{}); err == nil {
		t.Fatal("joined room:r1 twice")
	}
	start(t, a)
	start(t, b)
	tb, err := b.JoinTopic("room:r1", wb.options("b0"))
	if err != nil {
		t.Fatal(err)
	}
	wa.waitStates(t, `"a0"`, `"b0"`)
	wb.waitStates(t, `"a0"`, `"b0"`)

	if err := ta.Publish(context.Background(), chatNote{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	wb.wait(t, "the message", func() bool { return len(wb.messages) == 1 })
	if m := wb.messages[0]; m.Topic != "room:r1" || string(m.Data) != `{"text":"hi"}` {
		t.Errorf("message %+v", m)
	}

	if err := ta.SetState(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	wb.waitStates(t, `"a1"`, `"b0"`)

	// After a reconnect a rejoins with its latest state, once, as a new
	// member.
	wb.mu.Lock()
	before := slices.Clone(wb.ids)
	wb.mu.Unlock()
	a.Reconnect()
	wb.wait(t, "a's new member", func() bool {
		return len(wb.ids) == 2 && !slices.Equal(wb.ids, before) && slices.Equal(wb.states, []string{`"a1"`, `"b0"`})
	})
	wa.waitStates(t, `"a1"`, `"b0"`)
	if len(tb.Members()) != 2 {
		t.Errorf("members %v", tb.Members())
	}

	// A refused message arrives as an error with its code.
	if err := ta.Publish(context.Background(), map[string]int{"other": 1}); err != nil {
		t.Fatal(err)
	}
	wa.wait(t, "invalid_message", func() bool { return slices.Contains(wa.errs, protocol.CodeInvalidMessage) })

	if err := ta.Leave(); err != nil {
		t.Fatal(err)
	}
	wb.waitStates(t, `"b0"`)
	if err := ta.Publish(context.Background(), chatNote{}); !errors.Is(err, ErrTopicLeft) {
		t.Errorf("Publish after Leave: %v", err)
	}
}
