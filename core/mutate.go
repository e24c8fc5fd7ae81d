package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/text"
)

// Mutator is a server-side write a client may ask for by name (a mutate
// frame, or POST <prefix>/mutate), with arguments of type A decoded from
// the frame's JSON. The engine runs it in one transaction of the feed
// (feed.Transactor) and records the mutation's idempotency key in that
// same transaction, so that it is applied at most once whatever the client
// resends.
type Mutator[A any] struct {
	// Authorize decides whether the principal may run the mutator with
	// these arguments, before it runs. It returns nil to allow, or an
	// error wrapping authz.ErrUnauthenticated or authz.ErrForbidden (any
	// other error also refuses, as forbidden). Zero value: every call is
	// refused (deny by default). Whatever it decides, a principal with
	// token grants (authz.Principal.Grants) commits only writes inside
	// them: after Run, every change of the transaction is checked against
	// the grants, and one outside them refuses the mutation (forbidden,
	// authz.ErrScopeNotAllowed) with nothing committed.
	Authorize func(ctx context.Context, p authz.Principal, args A) error
	// Run performs the write through tx: with the typed tables
	// (Table.UpsertTx, Table.DeleteTx), and on Postgres with any SQL
	// through the feed's transaction (pgfeed's TxOf). Rows it writes are
	// captured as usual and carry the calling client's origin. It returns
	// nil to commit, or an error to roll everything back (see ErrConflict,
	// ErrInvalidArgs). It must not keep tx after it returns. Required.
	Run func(ctx context.Context, tx *Tx, args A) error
}

// mutator is a Mutator with its argument type erased.
type mutator struct {
	args      reflect.Type // A, for Engine.TypeScript
	decode    func(json.RawMessage) (any, error)
	authorize func(context.Context, authz.Principal, any) error // nil: deny
	run       func(context.Context, *Tx, any) error
}

// AddMutator declares a mutator named name on t's resource. The name is a
// plain identifier, unique per resource. It returns an error wrapping
// ErrInvalidResource for a bad name, a duplicate or a missing Run.
// Mutators may be added while the engine serves.
func AddMutator[T, A any](t *Table[T], name string, m Mutator[A]) error {
	if err := text.ValidIdent(name); err != nil {
		return fmt.Errorf("%w: mutator %s.%s: %v", ErrInvalidResource, t.Name(), name, err)
	}
	if m.Run == nil {
		return fmt.Errorf("%w: mutator %s.%s: Run is required", ErrInvalidResource, t.Name(), name)
	}
	mu := &mutator{
		args: reflect.TypeFor[A](),
		decode: func(raw json.RawMessage) (any, error) {
			var a A
			if len(raw) == 0 {
				raw = json.RawMessage("{}")
			}
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, err
			}
			return a, nil
		},
		run: func(ctx context.Context, tx *Tx, a any) error { return m.Run(ctx, tx, a.(A)) },
	}
	if m.Authorize != nil {
		mu.authorize = func(ctx context.Context, p authz.Principal, a any) error { return m.Authorize(ctx, p, a.(A)) }
	}
	e := t.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := t.res.mutators[name]; dup {
		return fmt.Errorf("%w: mutator %s.%s: already declared", ErrInvalidResource, t.Name(), name)
	}
	if t.res.mutators == nil {
		t.res.mutators = map[string]*mutator{}
	}
	t.res.mutators[name] = mu
	return nil
}

// mutatorOf returns the resource's mutator named name, or nil.
func (e *Engine) mutatorOf(r *resource, name string) *mutator {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return r.mutators[name]
}

// Tx is the transaction a mutator runs in. It is valid only while the
// mutator runs, and is not safe for concurrent use.
type Tx struct {
	e       *Engine
	ftx     feed.Tx
	p       authz.Principal
	origin  string
	entries []byte // the ack's entries so far, comma-separated
}

// Principal returns who the mutation runs for.
func (tx *Tx) Principal() authz.Principal { return tx.p }

// Origin returns the origin of the client that sent the mutation; the
// rows the mutator writes carry it.
func (tx *Tx) Origin() string { return tx.origin }

// Feed returns the feed's own transaction: the Postgres feed's gives the
// pgx.Tx for any SQL (see pgfeed.TxOf).
func (tx *Tx) Feed() feed.Tx { return tx.ftx }

// UpsertTx writes rows in the mutator's transaction, as Upsert does
// outside one. The rows the principal may see are returned to the client in
// the mutation's ack.
func (t *Table[T]) UpsertTx(ctx context.Context, tx *Tx, rows ...T) error {
	muts, err := t.upserts(rows)
	if err != nil {
		return err
	}
	return tx.apply(ctx, t.res, muts)
}

// DeleteTx deletes rows (by primary key) in the mutator's transaction, as
// Delete does outside one.
func (t *Table[T]) DeleteTx(ctx context.Context, tx *Tx, rows ...T) error {
	return tx.apply(ctx, t.res, t.deletes(rows))
}

// apply writes muts through the feed's transaction and adds what the
// principal may see of them to the ack.
func (tx *Tx) apply(ctx context.Context, r *resource, muts []feed.Mutation) error {
	if err := tx.e.checkCapture(ctx, r); err != nil {
		return err
	}
	if err := tx.ftx.Apply(ctx, muts...); err != nil {
		return err
	}
	for _, m := range muts {
		c := feed.Change{Resource: r.schema.Name, Op: m.Op, Key: m.Key, Scope: m.Scope, Row: m.Row, Origin: tx.origin}
		entry := r.see(tx.p, tx.origin, &c, nil, true) // the writer's own: with its origin
		if entry == nil {
			continue
		}
		if len(tx.entries) > 0 {
			tx.entries = append(tx.entries, ',')
		}
		// Ack entries may be of any resource: each names its own.
		tx.entries = appendResource(append(tx.entries, entry...), r.schema.Name)
	}
	return nil
}

// outsideGrants refuses a mutation that wrote outside its principal's
// token grants; err wraps authz.ErrScopeNotAllowed.
type outsideGrants struct{ err error }

func (o outsideGrants) Error() string { return o.err.Error() }
func (o outsideGrants) Unwrap() error { return o.err }

// checkWriteGrants refuses, with outsideGrants, a mutation of a principal
// with grants that wrote a change no grant covers: each change the
// transaction wrote (feed.WriteLister: through the typed tables or any SQL
// on a captured table, a delete with the deleted row's scope, a move as
// its delete in the old scope and upsert in the new) must be inside one
// grant, its scope values taken as single-value conditions, as
// authz.CheckGrants decides for a subscription. A principal without grants
// is not checked, and costs nothing. A feed whose transaction cannot list
// its writes cannot run the mutations of a principal with grants (fail
// closed), nor can a change of a resource this engine does not declare (it
// cannot name the change's scope columns).
func (e *Engine) checkWriteGrants(ctx context.Context, p authz.Principal, ftx feed.Tx) error {
	if len(p.Grants) == 0 {
		return nil
	}
	wl, ok := ftx.(feed.WriteLister)
	if !ok {
		return outsideGrants{fmt.Errorf("%w: this server's change feed cannot list a mutation's writes, so a principal restricted to scopes may not mutate", authz.ErrScopeNotAllowed)}
	}
	written, err := wl.Written(ctx)
	if err != nil {
		return err
	}
	for _, w := range written {
		r := e.resource(w.Resource)
		if r == nil || len(w.Scope) != len(r.schema.Scope) {
			return outsideGrants{fmt.Errorf("%w: the mutation writes %s, which this server does not declare as it was written", authz.ErrScopeNotAllowed, text.Truncate(w.Resource, 64))}
		}
		conds := make(map[string][]string, len(w.Scope))
		for i, v := range w.Scope {
			if w.Null != nil && w.Null[i] {
				continue // no value: inside no grant that names the column
			}
			conds[r.schema.ScopeColumn(i).Name] = []string{v}
		}
		if err := authz.CheckGrants(authz.Request{Principal: p, Resource: w.Resource, Conditions: conds}); err != nil {
			return outsideGrants{fmt.Errorf("%w: the mutation writes %s outside the token's scopes", authz.ErrScopeNotAllowed, w.Resource)}
		}
	}
	return nil
}

// failed is a mutator's own error, told apart from the feed's.
type failed struct{ err error }

func (f failed) Error() string { return f.err.Error() }
func (f failed) Unwrap() error { return f.err }

// mutateRequest runs the mutation of a mutate frame for p, sent by the
// client device origin, and returns the frame to answer with: an ack, or a
// reject whose code is also returned as err. The key is recorded per
// principal and origin; an anonymous p must therefore come with an origin,
// or the mutation is refused (bad_frame) without running. POST
// <prefix>/mutate runs it (through internal/transport); f is validated
// first (protocol.ClientFrame.Validate). While it runs it counts against
// p's bounds of waiting mutations, as a queued mutate frame of a WebSocket
// does (Config.MaxQueuedMutationsPerPrincipal and
// MaxQueuedMutationBytesPerPrincipal); over them it is rejected with
// rate_limited.
func (e *Engine) mutateRequest(ctx context.Context, p authz.Principal, origin string, f protocol.ClientFrame) ([]byte, *protocol.Error) {
	size := mutationSize(&f)
	if err := e.bounds.addMutation(p.ID, size); err != nil {
		err = presentReject(err)
		e.stats.mutationsRejected.Add(1)
		e.cfg.Observer.Mutated("", "", err.Code, 0)
		return protocol.Reject(f.Key, err), err
	}
	defer e.bounds.dropMutations(p.ID, 1, size)
	frame, _, err := e.runMutation(ctx, p, origin, f)
	return frame, err
}

// maxClockAhead bounds how far a mutation's at may be ahead of this node's
// clock. The idempotency key is kept from at on, so an at far ahead would
// keep it for ever, and one beyond the range of time would wrap into the
// past, where its key is pruned at once and a resend runs again.
const maxClockAhead = 24 * time.Hour

// errAnonymousOrigin refuses a mutation of an anonymous caller that names
// no origin. A key is recorded per principal and origin, and every
// anonymous caller has the principal id "": without its device's origin,
// one anonymous caller's key would answer another's mutation with the
// first one's recorded result, and drop the write.
var errAnonymousOrigin = &protocol.Error{Code: protocol.CodeBadFrame,
	Message: "this device sent no id (origin) with the change; the app must send one",
	Detail:  "a mutation of an anonymous caller must carry an origin (hello's origin; over HTTP, the Tide-Origin header): its key is scoped to it"}

// mutate runs a validated mutate frame and returns its ack and the ack's
// position, or the refusal.
func (e *Engine) mutate(ctx context.Context, p authz.Principal, origin string, f protocol.ClientFrame) ([]byte, feed.Position, *protocol.Error) {
	if e.Draining() {
		return nil, 0, ErrDraining
	}
	if now := e.cfg.Clock.Now(); f.At > now.Add(maxClockAhead).UnixMilli() {
		return nil, 0, presentedf(protocol.CodeBadFrame, "this device's clock is ahead of the server's: set it right and try again",
			"at %d is more than %s ahead of the server's clock (%d)", f.At, maxClockAhead, now.UnixMilli())
	}
	if err := e.awaitReady(ctx); err != nil {
		return nil, 0, ErrorFor(err)
	}
	r := e.resource(f.Resource)
	if r == nil {
		return nil, 0, protocol.Errorf(protocol.CodeUnknownResource, "no resource %q", text.Truncate(f.Resource, 64))
	}
	m := e.mutatorOf(r, f.Name)
	if m == nil {
		return nil, 0, protocol.Errorf(protocol.CodeUnknownMutator, "resource %s has no mutator %q", r.schema.Name, text.Truncate(f.Name, 64))
	}
	args, err := m.decode(f.Args)
	if err != nil {
		return nil, 0, presentedf(protocol.CodeInvalidArgs, argsMessage(err), "%s.%s: %v", r.schema.Name, f.Name, err)
	}
	if err := e.authorizeMutation(ctx, m, p, args); err != nil {
		return nil, 0, protocol.Errorf(deniedCode(err), "%s.%s: %v", r.schema.Name, f.Name, err)
	}
	if err := e.checkCapture(ctx, r); err != nil {
		return nil, 0, ErrorFor(err)
	}
	t, ok := e.feed.(feed.Transactor)
	if !ok {
		return nil, 0, protocol.Errorf(protocol.CodeUnavailable, "this server's change feed cannot run mutators")
	}
	if p.IsAnonymous() && origin == "" {
		// Checked after the policy, which may refuse anonymous callers
		// anyway (unauthenticated says more), and before the mutator runs
		// or the key is recorded.
		return nil, 0, errAnonymousOrigin
	}
	id := feed.MutationID{Principal: p.ID, Origin: origin, Key: f.Key, At: time.UnixMilli(f.At)}
	result, replayed, err := t.Transact(ctx, id, func(ctx context.Context, ftx feed.Tx) ([]byte, error) {
		tx := &Tx{e: e, ftx: ftx, p: p, origin: origin}
		if err := runMutator(ctx, m, tx, args); err != nil {
			return nil, failed{err}
		}
		if err := e.checkWriteGrants(ctx, p, ftx); err != nil {
			return nil, err
		}
		return tx.entries, nil
	})
	var mf failed
	var out outsideGrants
	switch {
	case err == nil:
	case errors.As(err, &out):
		// Nothing committed, no key recorded: the same mutation sent once
		// the token allows it runs.
		return nil, 0, presentedf(protocol.CodeForbidden, "this change is outside what your access allows",
			"%s.%s: %v", r.schema.Name, f.Name, out.err)
	case errors.Is(err, feed.ErrKeyExpired):
		return nil, 0, protocol.Errorf(protocol.CodeKeyExpired, "%v", err)
	case errors.Is(err, feed.ErrTransient):
		// The mutator's statements failed with its transaction (a lost
		// connection, a serialization failure): nothing was applied, and
		// the same mutation sent again may well be.
		e.cfg.Logger.Warn("tide: mutation not applied: its transaction failed", "resource", r.schema.Name, "mutator", f.Name, "err", err)
		return nil, 0, protocol.Errorf(protocol.CodeUnavailable, "the change feed is unavailable; resend later with the same key")
	case errors.As(err, &mf) && errors.Is(err, ErrConflict):
		return nil, 0, mutatorRefusal(protocol.CodeConflict, ErrConflict, mf.err, r.schema.Name, f.Name)
	case errors.As(err, &mf) && errors.Is(err, ErrInvalidArgs):
		return nil, 0, mutatorRefusal(protocol.CodeInvalidArgs, ErrInvalidArgs, mf.err, r.schema.Name, f.Name)
	case errors.As(err, &mf):
		// Its text stays in the server's log: it may name what the
		// principal may not see (a constraint's row, a hidden column).
		e.cfg.Logger.Warn("tide: mutator failed", "resource", r.schema.Name, "mutator", f.Name, "err", mf.err)
		return nil, 0, protocol.Errorf(protocol.CodeMutatorFailed, "%s.%s failed; the server's log has its error", r.schema.Name, f.Name)
	default:
		e.cfg.Logger.Error("tide: mutation not applied: the feed failed", "resource", r.schema.Name, "mutator", f.Name, "err", err)
		return nil, 0, protocol.Errorf(protocol.CodeUnavailable, "the change feed is unavailable; resend later with the same key")
	}
	// Head covers the committed writes: a subscription whose cursor reaches
	// it reflects them.
	head, err := e.head(ctx)
	if err != nil {
		return nil, 0, protocol.Errorf(protocol.CodeUnavailable, "the change feed is unavailable; resend later with the same key")
	}
	return protocol.Ack(f.Key, e.cursorString(head), result, replayed), head, nil
}

// mutatorRefusal is the reject of a mutator's own refusal (err wraps
// sentinel, ErrConflict or ErrInvalidArgs): its message is the app's words
// after the sentinel, or the code's short message when it wrote none, and
// its detail the whole error.
func mutatorRefusal(code protocol.Code, sentinel, err error, resource, name string) *protocol.Error {
	msg := appWords(err, sentinel)
	if msg == "" {
		msg = rejectMessage(code)
	}
	return presentedf(code, msg, "%s.%s: %v", resource, name, err)
}

// authorizeMutation runs the mutator's policy, denying when it has none or
// when it panics.
func (e *Engine) authorizeMutation(ctx context.Context, m *mutator, p authz.Principal, args any) (err error) {
	if m.authorize == nil {
		return fmt.Errorf("%w: the mutator has no policy", authz.ErrForbidden)
	}
	defer func() {
		if v := recover(); v != nil {
			e.cfg.Logger.Error("tide: mutator policy panicked", "panic", v)
			err = fmt.Errorf("%w: the policy failed", authz.ErrForbidden)
		}
	}()
	return m.authorize(ctx, p, args)
}

// deniedCode is the reject code of a policy's refusal.
func deniedCode(err error) protocol.Code {
	if errors.Is(err, authz.ErrUnauthenticated) {
		return protocol.CodeUnauthenticated
	}
	return protocol.CodeForbidden
}

// runMutator runs the mutator, turning a panic into an error.
func runMutator(ctx context.Context, m *mutator, tx *Tx, args any) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return m.run(ctx, tx, args)
}

// mutations is a connection's queue of mutate frames, run one at a time in
// arrival order by a goroutine that exists only while the queue is not
// empty. Guarded by conn.mu. n and bytes count the frames queued and the
// one running (mutationSize); they count against the connection's and its
// principal's bounds (Config.MaxQueuedMutations and the rest) until run.
type mutations struct {
	queue   []protocol.ClientFrame
	n       int // queued and running
	bytes   int
	running bool
}

// mutationSize is what a queued mutate frame holds in memory: its strings
// and arguments, plus the frame itself.
func mutationSize(f *protocol.ClientFrame) int {
	return 256 + len(f.Key) + len(f.Resource) + len(f.Name) + len(f.Args) + len(f.TraceParent)
}

// mutate queues a mutate frame, or rejects it with rate_limited when the
// connection's queue or its principal's is full: the client resends it
// later with the same key.
func (c *conn) mutate(f protocol.ClientFrame) {
	cfg := &c.e.cfg
	size := mutationSize(&f)
	c.mu.Lock()
	var err *protocol.Error
	switch {
	case c.muts.n >= cfg.MaxQueuedMutations || c.muts.bytes+size > cfg.MaxQueuedMutationBytes:
		err = protocol.Errorf(protocol.CodeRateLimited, "at most %d mutations (%d KiB) may wait on one connection; resend later with the same key", cfg.MaxQueuedMutations, cfg.MaxQueuedMutationBytes>>10)
	default:
		err = c.e.bounds.addMutation(c.pid, size)
	}
	if err != nil {
		c.mu.Unlock()
		c.e.stats.mutationsRejected.Add(1)
		c.e.cfg.Observer.Mutated("", "", err.Code, 0)
		c.sendFrame(protocol.Reject(f.Key, presentReject(err)))
		return
	}
	c.muts.queue = append(c.muts.queue, f)
	c.muts.n++
	c.muts.bytes += size
	start := !c.muts.running
	if start {
		c.muts.running = true
		c.e.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		go c.mutateLoop()
	}
}

// mutateLoop runs queued mutations in order until the queue is empty or
// the connection ends (a client resends what was not answered).
func (c *conn) mutateLoop() {
	defer c.e.wg.Done()
	for {
		c.mu.Lock()
		if len(c.muts.queue) == 0 || c.closing {
			n, size := c.muts.n, c.muts.bytes
			c.muts.queue, c.muts.n, c.muts.bytes, c.muts.running = nil, 0, 0, false
			c.mu.Unlock()
			c.e.bounds.dropMutations(c.pid, n, size)
			return
		}
		f := c.muts.queue[0]
		c.muts.queue[0] = protocol.ClientFrame{} // not kept alive by the queue's array
		c.muts.queue = c.muts.queue[1:]
		c.mu.Unlock()
		frame, pos, err := c.e.runMutation(c.e.ctx, c.currentPrincipal(), c.origin, f)
		size := mutationSize(&f)
		c.mu.Lock()
		c.muts.n--
		c.muts.bytes -= size
		c.mu.Unlock()
		c.e.bounds.dropMutations(c.pid, 1, size)
		c.sendFrame(frame)
		if err == nil {
			c.mu.Lock()
			hasSubs := len(c.subs) > 0
			if hasSubs {
				c.e.wg.Add(1)
			}
			c.mu.Unlock()
			if hasSubs {
				// Off the queue, so the next mutation need not wait for
				// the fan-out.
				go func() {
					defer c.e.wg.Done()
					c.advanceSubs(pos)
				}()
			}
		}
	}
}

// runMutation is Mutate, also returning the ack's position.
func (e *Engine) runMutation(ctx context.Context, p authz.Principal, origin string, f protocol.ClientFrame) ([]byte, feed.Position, *protocol.Error) {
	f.Type = protocol.FrameMutate
	if err := f.Validate(); err != nil {
		err = presentReject(err)
		e.stats.mutationsRejected.Add(1)
		e.cfg.Observer.Mutated("", "", err.Code, 0)
		return protocol.Reject(f.Key, err), 0, err
	}
	began := time.Now()
	ctx = e.continueTrace(ctx, f.TraceParent, "")
	ctx, span := e.startSpan(ctx, "tide.mutate", StrAttr("tide.resource", f.Resource), StrAttr("tide.mutator", f.Name))
	mt := e.traceMutation(ctx, origin)
	frame, pos, err := e.mutate(ctx, p, origin, f)
	e.traces.end(origin, mt, pos, err == nil)
	res, name := e.mutatorLabels(f)
	if err != nil {
		err = presentReject(err)
		e.stats.mutationsRejected.Add(1)
		e.cfg.Observer.Mutated(res, name, err.Code, time.Since(began))
		span.End(err)
		return protocol.Reject(f.Key, err), 0, err
	}
	e.stats.mutationsApplied.Add(1)
	e.cfg.Observer.Mutated(res, name, "", time.Since(began))
	span.End(nil)
	return frame, pos, nil
}

// advanceWait is how long advanceSubs waits for the fan-out to dispatch an
// acknowledged write before it checks that its connection is still open
// (and, with a bus that delivers only this node's topics, before it has
// the subscriptions replay instead).
var advanceWait = 5 * time.Second

// advanceSubs moves every subscription of c to pos, the position its
// client's mutation was acknowledged at, once the fan-out has dispatched
// through pos: so the client learns that its copies reflect the write even
// when the write changed nothing in their scopes (a live subscription
// behind pos gets an empty changes frame at pos; one catching up, at the
// end of its catch-up). It waits for as long as the connection is open: a
// tailer held up (the bus reconnecting) still advances them afterwards,
// since a scope that stays quiet would otherwise never reach pos and its
// client would wait for the write forever.
//
// A bus that delivers only this node's topics (feed.Interested) may never
// bring pos: the write may be of a topic no subscription here needs. After
// advanceWait the subscriptions behind pos replay from their delivered
// cursors through the feed instead, up to its head, which is past pos: the
// replay ends with a caught-up frame at the head.
func (c *conn) advanceSubs(pos feed.Position) {
	for !c.e.cache.recent.await(c.e.ctx, pos, advanceWait) {
		if c.e.ctx.Err() != nil || c.isClosing() {
			return
		}
		if c.e.bus.interest != nil {
			for _, s := range c.subsNow() {
				if s.behind(pos) {
					s.desync()
				}
			}
			return
		}
	}
	for _, s := range c.subsNow() {
		s.advance(pos)
	}
}

// subsNow returns the connection's subscriptions.
func (c *conn) subsNow() []*subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	subs := make([]*subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	return subs
}
