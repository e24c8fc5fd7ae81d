package core_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/feed/memfeed"
	"github.com/tidesync/tide/core/protocol"
)

// revNode is one engine of a cluster sharing a feed, with its own keyring
// (same key, as every node of an app has).
type revNode struct {
	e   *core.Engine
	kr  *authz.Keyring
	url string
}

func newRevNode(t *testing.T, f feed.Feed, policy authz.Policy) *revNode {
	t.Helper()
	kr, err := authz.NewKeyring(authz.KeyringConfig{Current: authz.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := core.New(core.Config{Feed: f, Tokens: kr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Register(e, core.Resource[todo]{Table: "todos", Authorize: policy}); err != nil {
		t.Fatal(err)
	}
	return &revNode{e: e, kr: kr, url: serveEngine(t, e)}
}

func (n *revNode) mint(t *testing.T, p authz.Principal) string {
	t.Helper()
	tok, _, err := n.kr.Mint(p, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokenConn connects to n with tok and subscribes to project p7.
func (n *revNode) tokenConn(t *testing.T, tok string) *wsClient {
	t.Helper()
	c := dialAt(t, n.url, "")
	c.helloToken(tok)
	c.Expect(protocol.FrameWelcome)
	c.Subscribe("s", "todos", project("p7"))
	c.Collect("s")
	return c
}

// TestRevokeReachesEveryNode: Revoke on node A ends the principal's
// connections on B and C (token and cookie alike) and every node refuses
// its old tokens, a node started afterwards included; a token minted right
// after the revocation works everywhere, and other principals are left
// alone.
func TestRevokeReachesEveryNode(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	a, b, c := newRevNode(t, f, projects), newRevNode(t, f, projects), newRevNode(t, f, projects)
	tok := a.mint(t, alice("p7"))
	onB, onC := b.tokenConn(t, tok), c.tokenConn(t, tok)
	cookieOnC := dialAt(t, c.url, "alice", "p7")
	cookieOnC.hello()
	bob := b.tokenConn(t, b.mint(t, authz.Principal{ID: "bob", Claims: map[string]any{"projects": []string{"p7"}}}))

	if n := a.e.Revoke("alice"); n != 0 {
		t.Fatalf("Revoke ended %d connections on A, which has none", n)
	}
	for _, conn := range []*wsClient{onB, onC, cookieOnC} {
		f := conn.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy)
		if !strings.Contains(f.Message, "revoked") {
			t.Fatalf("message %q", f.Message)
		}
	}
	bob.Probe()
	for _, n := range []*revNode{b, c, newRevNode(t, f, projects)} {
		again := dialAt(t, n.url, "")
		again.helloToken(tok)
		if f := again.ExpectErrorClose(protocol.CodeUnauthenticated, protocol.ClosePolicy); !strings.Contains(f.Message, string(authz.CodeTokenRevoked)) {
			t.Fatalf("old token: %q", f.Message)
		}
		n.tokenConn(t, a.mint(t, alice("p7"))) // minted right after: accepted
	}
	if s := b.e.Stats(); s.RevocationsReceived != 1 {
		t.Fatalf("B applied %d revocations, want 1", s.RevocationsReceived)
	}
	if s := a.e.Stats(); s.RevocationsPublished != 1 || s.RevocationsReceived != 0 {
		t.Fatalf("A published %d and applied %d, want 1 and 0", s.RevocationsPublished, s.RevocationsReceived)
	}
}

// TestKeyringRevocationReachesEveryNode: a keyring's own RevokePrincipal on
// one node makes every node refuse the tokens, and leaves connections open,
// as it does on the node it was called on.
func TestKeyringRevocationReachesEveryNode(t *testing.T) {
	f := memfeed.New(memfeed.Options{})
	a, b := newRevNode(t, f, projects), newRevNode(t, f, projects)
	tok := a.mint(t, alice("p7"))
	open := b.tokenConn(t, tok)
	a.kr.RevokePrincipal("alice")
	late := newRevNode(t, f, projects) // started after: loads the stored revocation
	for _, n := range []*revNode{b, late} {
		// b applies it asynchronously: retry until refused (the failure
		// bound is the test's timeout).
		for {
			again := dialAt(t, n.url, "")
			again.helloToken(tok)
			fr := again.Next()
			if fr.Type == protocol.FrameError && fr.Code == protocol.CodeUnauthenticated {
				break
			}
			again.Close()
		}
	}
	open.Probe()
}

// TestReauthorizeReachesEveryNode: Reauthorize on node A re-runs the
// policies on B, ending the subscriptions now denied there.
func TestReauthorizeReachesEveryNode(t *testing.T) {
	var mu sync.Mutex
	members := map[string]bool{"alice/p7": true}
	membership := func(ctx context.Context, r authz.Request) error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range r.Conditions["project_id"] {
			if !members[r.Principal.ID+"/"+p] {
				return authz.ErrForbidden
			}
		}
		return nil
	}
	f := memfeed.New(memfeed.Options{})
	a, b := newRevNode(t, f, membership), newRevNode(t, f, membership)
	onB := b.tokenConn(t, b.mint(t, alice()))
	mu.Lock()
	delete(members, "alice/p7")
	mu.Unlock()
	if n, err := a.e.Reauthorize(context.Background(), "alice"); n != 0 || err != nil {
		t.Fatalf("Reauthorize on A: %d, %v", n, err)
	}
	onB.ExpectErrorFor("s", protocol.CodeForbidden)
}
