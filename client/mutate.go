package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tidesync/tide/core/protocol"
	"github.com/tidesync/tide/internal/backoff"
)

// Mutation is a write the client asks the server to make by running one of
// the resource's mutators (see docs/writes.md), with an optional optimistic
// change of the local copy.
type Mutation struct {
	// Resource and Name name the mutator. Required.
	Resource, Name string
	// Args are the mutator's arguments: anything that encodes as a JSON
	// object (a struct, a map, a json.RawMessage), or nil for none.
	Args any
	// Key is the idempotency key (1–128 bytes, no control characters),
	// unique per client device. Zero value: a random 128-bit hex key. A key
	// the client still holds in its log is refused with ErrDuplicateKey.
	Key string
	// Local, if set, changes the local copy optimistically: it runs at
	// once, inside Mutate, and its changes are visible in the synced scopes
	// (Subscription.Rows) when Mutate returns. An error from Local aborts
	// the mutation: nothing is changed or sent. Local must not call the
	// Client.
	Local func(tx *LocalTx) error
	// Strategy decides which row lands when the server's ack names a row
	// Local changed. Zero value: ServerWins.
	Strategy Strategy
	// TraceParent is the W3C trace context (a traceparent header value) of
	// the caller's span for the mutation, sent with it so that a tracing
	// server makes the mutation's span its child. Zero value: none. It is
	// not kept in a persisted Queue.
	TraceParent string
}

// LocalTx is the local copy as a mutation's Local function sees it: the
// synced scopes' rows with every pending write applied. Its changes become
// the mutation's optimistic writes, rolled back and replayed as the server
// answers (see Client.Mutate). A LocalTx is valid only during Local.
type LocalTx struct {
	r   *replica
	ops []protocol.Entry
}

// Get returns the row of resource with the primary key key, as the local
// copy holds it, and whether it holds one.
func (tx *LocalTx) Get(resource, key string) (json.RawMessage, bool) {
	if row, ok := lastOp(tx.ops, resource, key); ok {
		return row, row != nil
	}
	row := tx.r.lookup(resource, key, tx.r.log)
	return row, row != nil
}

// Upsert sets the row of resource with the primary key key. row is the
// whole row as the server would send it, keyed by column name: a
// json.RawMessage (for a struct with tide tags, the row protocol.EncodeRow
// returns) or any value encoding/json turns into such an object. Its scope
// columns decide which synced scopes show it.
func (tx *LocalTx) Upsert(resource, key string, row any) error {
	if resource == "" || key == "" {
		return errors.New("client: LocalTx.Upsert: resource and key are required")
	}
	raw, err := json.Marshal(row)
	if err != nil {
		return fmt.Errorf("client: LocalTx.Upsert %s %q: %w", resource, key, err)
	}
	raw, err = normRow(raw)
	if err != nil {
		return fmt.Errorf("client: LocalTx.Upsert %s %q: %w", resource, key, err)
	}
	tx.ops = append(tx.ops, rowEntry(resource, key, raw))
	return nil
}

// Delete removes the row of resource with the primary key key.
func (tx *LocalTx) Delete(resource, key string) {
	tx.ops = append(tx.ops, rowEntry(resource, key, nil))
}

// PendingMutation is the handle of a mutation from Mutate until the
// server answers it. It is safe for concurrent use.
type PendingMutation struct {
	key     string
	seq     int64
	done    chan struct{}
	settled chan struct{}
	res     Result
	err     error
}

// Result is the server's acknowledgement of a mutation.
type Result struct {
	Key string
	// Cursor is the ack's cursor: once the subscriptions covering the
	// written rows reach it, the rows in the local copy are the server's
	// and the mutation leaves Client.Pending.
	Cursor string
	// Replayed says the server had applied the key before (a resend): this
	// is its recorded result.
	Replayed bool
	// Entries are the rows the mutator wrote, as the server sent them.
	Entries []protocol.Entry
}

// Key returns the mutation's idempotency key.
func (p *PendingMutation) Key() string { return p.key }

// Seq returns the mutation's client sequence number.
func (p *PendingMutation) Seq() int64 { return p.seq }

// Done is closed once the server has answered the mutation.
func (p *PendingMutation) Done() <-chan struct{} { return p.done }

// Settled is closed once the mutation has left the log: rejected, or
// acknowledged and its rows reached by the subscriptions covering them, so
// the local copy shows the server's rows.
func (p *PendingMutation) Settled() <-chan struct{} { return p.settled }

func (p *PendingMutation) settle() {
	select {
	case <-p.settled:
	default:
		close(p.settled)
	}
}

func newHandle(key string, seq int64) *PendingMutation {
	return &PendingMutation{key: key, seq: seq, done: make(chan struct{}), settled: make(chan struct{})}
}

// Wait blocks until the server answers the mutation, or ctx ends. It
// returns the Result of an ack; a *RejectError for a reject (the
// optimistic write was rolled back); the Result and a *ConflictError when
// the mutation's Strategy reported a conflict (the server's row landed);
// or ctx's error. A mutation made while disconnected waits for a
// connection: it is in the offline queue.
func (p *PendingMutation) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (p *PendingMutation) resolve(res Result, err error) {
	select {
	case <-p.done:
		return
	default:
	}
	p.res, p.err = res, err
	close(p.done)
}

// RejectError is a mutation's refusal. Wait returns it when the mutation
// was rejected (nothing was written, and the optimistic write was rolled
// back): by the server, or by the client for a queued mutation it can
// never deliver (frame_too_large, CodeUndeliverable). Mutate returns it for
// a mutation it refuses at once (frame_too_large, invalid_args): nothing
// was queued, sent or changed.
//
// Show Message to a person; log Detail. Error() is the code and the
// message, without the key.
type RejectError struct {
	// Key is the mutation's idempotency key.
	Key string
	// Code is the stable reason: forbidden, invalid_args, conflict,
	// unknown_mutator, mutator_error, key_expired, frame_too_large,
	// undeliverable, ...
	Code protocol.Code
	// Message is short and fit to show a person: the server's message
	// (for invalid_args and conflict raised by a mutator, the mutator's own
	// words, e.g. "title must be 1-200 characters (got 0)"), or the
	// client's for a refusal of its own. Not stable.
	Message string
	// Detail is for developers and logs: what went wrong, in full. It may
	// be empty; not stable.
	Detail string
}

// Error returns "tide: <code>: <message>", e.g.
// "tide: invalid_args: title must be 1-200 characters (got 0)".
func (e *RejectError) Error() string {
	if e.Message == "" {
		return "tide: " + string(e.Code)
	}
	return "tide: " + string(e.Code) + ": " + e.Message
}

// CodeUndeliverable is the code of the RejectError of a queued mutation
// the server never answered although it was sent on five connections that
// the server closed before answering it: something in it keeps the server
// from answering, and resending it forever would help no one. A connection
// that ended otherwise (a network loss, the client's own Reconnect, the
// client stopping) or that the server closed with 4002 drain or 1001 going
// away does not count; the count is kept in the store with the queue.
const CodeUndeliverable protocol.Code = "undeliverable"

// maxCloses is how many server-closed connections a queued mutation may
// be sent on without an answer before it is settled as undeliverable.
const maxCloses = 5

// ErrDuplicateKey is returned by Mutate for a key the client's log still
// holds.
var ErrDuplicateKey = errors.New("client: mutation key already in use")

// Mutate records m, applies its Local change to the local copy at once
// and sends it to the server: now if connected, otherwise on the next
// connection (the offline queue, persisted in Config.Store when it is a
// QueueStore, as MemoryStore and FileStore are). It returns when m is
// recorded; Wait on the handle for the server's answer.
//
// A mutation that could never be sent is refused at once with a
// *RejectError, before Local runs and without queueing anything: code
// invalid_args when Args does not encode to a JSON object, code
// frame_too_large when its mutate frame would exceed the server's frame
// limit (max_frame_bytes of the last welcome, remembered in the store;
// 65536 bytes before any).
//
// Each mutation gets the next client sequence number (persisted with the
// queue) and its creation time; mutations are sent in sequence order, after
// the subscriptions of each connection, with their original key and time,
// and resent on every reconnect until answered. The server applies a key
// at most once.
//
// When the server acknowledges key K, the client rolls back K and every
// later optimistic write, newest first; lands the rows of the ack under
// K's Strategy; and replays the remaining pending writes in sequence
// order. A reject rolls back K's write and replays the rest. Synced scopes
// are notified once per reconcile. Mutate is safe for concurrent use; it
// fails if m is invalid, Local fails, or the queue cannot be persisted.
func (c *Client) Mutate(ctx context.Context, m Mutation) (*PendingMutation, error) {
	if m.Resource == "" || m.Name == "" {
		return nil, errors.New("client: Mutate: Resource and Name are required")
	}
	if err := checkText("resource", m.Resource, maxNameBytes); err != nil {
		return nil, fmt.Errorf("client: Mutate: %w", err)
	}
	if err := checkText("name", m.Name, maxNameBytes); err != nil {
		return nil, fmt.Errorf("client: Mutate: %w", err)
	}
	key := m.Key
	if key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key = hex.EncodeToString(b[:])
	} else if err := checkText("key", key, protocol.MaxKeyLen); err != nil {
		return nil, fmt.Errorf("client: Mutate: %w", err)
	}
	var args json.RawMessage
	if m.Args != nil {
		raw, err := json.Marshal(m.Args)
		if err != nil {
			return nil, &RejectError{Key: key, Code: protocol.CodeInvalidArgs, Message: "the arguments cannot be sent",
				Detail: fmt.Sprintf("%s.%s: the arguments do not encode as JSON: %v", m.Resource, m.Name, err)}
		}
		if string(raw) != "null" {
			if args, err = normRow(raw); err != nil {
				return nil, &RejectError{Key: key, Code: protocol.CodeInvalidArgs, Message: "the arguments cannot be sent",
					Detail: fmt.Sprintf("%s.%s: the arguments encode as %s, not as a JSON object", m.Resource, m.Name, jsonKind(raw))}
			}
		}
	}
	if err := checkText("traceparent", m.TraceParent, protocol.MaxTraceParentLen); err != nil {
		return nil, fmt.Errorf("client: Mutate: %w", err)
	}
	strategy := m.Strategy
	if strategy == nil {
		strategy = ServerWins{}
	}

	limit := c.frameLimit()
	c.lmu.Lock()
	if c.rep.find(key) >= 0 {
		c.lmu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrDuplicateKey, key)
	}
	it := &logItem{
		key: key, seq: c.rep.seq + 1, resource: m.Resource, name: m.Name, args: args,
		at: time.Now().UnixMilli(), strategy: strategy, strategyName: strategyName(strategy),
		traceparent: m.TraceParent,
	}
	if n := len(it.frame()); n > limit {
		c.lmu.Unlock()
		return nil, tooLarge(it, n, limit)
	}
	tx := &LocalTx{r: c.rep}
	if m.Local != nil {
		if err := m.Local(tx); err != nil {
			c.lmu.Unlock()
			return nil, fmt.Errorf("client: Mutate: local change: %w", err)
		}
	}
	tx.r = nil
	it.ops, it.handle = tx.ops, newHandle(key, it.seq)
	h := it.handle
	c.rep.seq++
	c.rep.log = append(c.rep.log, it)
	if err := c.saveQueueLocked(ctx); err != nil {
		c.rep.log = c.rep.log[:len(c.rep.log)-1]
		c.rep.seq--
		c.lmu.Unlock()
		return nil, fmt.Errorf("client: Mutate: persist the queue: %w", err)
	}
	c.rep.refresh(it.resources())
	c.lmu.Unlock()

	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.flushMutations()
	}
	return h, nil
}

// Pending returns the handles of the mutations not settled yet, in log
// order: those the server has not answered, and those it acknowledged
// whose cursor the covering subscriptions have not reached. After a
// restart it includes the mutations restored from the store's queue.
func (c *Client) Pending() []*PendingMutation {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	var out []*PendingMutation
	for _, it := range c.rep.log {
		if it.handle != nil {
			out = append(out, it.handle)
		}
	}
	return out
}

// saveQueueLocked persists the log. The caller holds c.lmu.
func (c *Client) saveQueueLocked(ctx context.Context) error {
	if c.qstore == nil {
		return nil
	}
	q := Queue{Seq: c.rep.seq, Mutations: make([]QueuedMutation, 0, len(c.rep.log))}
	for _, it := range c.rep.log {
		q.Mutations = append(q.Mutations, QueuedMutation{
			Key: it.key, Seq: it.seq, Resource: it.resource, Name: it.name, Args: it.args, At: it.at,
			Strategy: it.strategyName, Ops: slices.Clone(it.ops), Acked: it.acked, Cursor: it.cursor, TraceParent: it.traceparent,
			Closes: it.closes,
		})
	}
	return c.qstore.SaveQueue(context.WithoutCancel(ctx), q)
}

// loadQueue restores the log from the store, at New.
func (c *Client) loadQueue(ctx context.Context) error {
	if c.qstore == nil {
		return nil
	}
	q, err := c.qstore.LoadQueue(ctx)
	if err != nil {
		return err
	}
	c.rep.seq = q.Seq
	for _, m := range q.Mutations {
		h := newHandle(m.Key, m.Seq)
		it := &logItem{
			key: m.Key, seq: m.Seq, resource: m.Resource, name: m.Name, args: m.Args, at: m.At,
			strategy: strategyFromName(m.Strategy), strategyName: m.Strategy,
			ops: m.Ops, acked: m.Acked, cursor: m.Cursor, traceparent: m.TraceParent, closes: m.Closes, handle: h,
		}
		if it.acked {
			h.resolve(Result{Key: m.Key, Cursor: m.Cursor}, nil)
		}
		c.rep.log = append(c.rep.log, it)
	}
	return nil
}

// flushMutations sends, in log (sequence) order, every unanswered
// mutation not yet sent on this connection, once it is welcomed.
func (s *session) flushMutations() {
	c := s.c
	s.mmu.Lock()
	defer s.mmu.Unlock()
	c.mu.Lock()
	ok := c.sess == s && s.ready
	c.mu.Unlock()
	if !ok {
		return
	}
	limit := c.frameLimit()
	c.lmu.Lock()
	type out struct {
		key  string
		data []byte
	}
	var frames []out
	var refused []*RejectError
	for _, it := range c.rep.log {
		if it.acked || it.handle == nil || s.sent[it.key] {
			continue
		}
		data := it.frame()
		if len(data) > limit {
			// Queued under a larger limit (or by an older client): the
			// server would refuse the frame without reading its key.
			refused = append(refused, tooLarge(it, len(data), limit))
			continue
		}
		frames = append(frames, out{it.key, data})
	}
	c.lmu.Unlock()
	for _, re := range refused {
		if err := c.settleRejected(s.ctx, re); err != nil {
			s.queueError(err)
			return
		}
	}
	for _, f := range frames {
		if err := s.writeData(protocol.FrameMutate, f.data); err != nil {
			return
		}
		s.sent[f.key] = true
	}
}

// frame encodes the item's mutate frame, as it is sent: key comes right
// after type, so a server that refuses the frame for its size can still
// read the key from its first bytes and answer reject instead of a
// connection-level error.
func (it *logItem) frame() []byte {
	data, err := json.Marshal(mutateFrame{
		V: protocol.Version, Type: protocol.FrameMutate, Key: it.key, Seq: it.seq,
		Resource: it.resource, Name: it.name, Args: it.args, At: it.at, TraceParent: it.traceparent,
	})
	if err != nil {
		panic("client: encoding a mutate frame: " + err.Error()) // args are checked JSON objects
	}
	return data
}

// mutateFrame is the wire form of a mutate frame, with its fields in the
// order they are sent (protocol.ClientFrame's order puts key late).
type mutateFrame struct {
	V           int             `json:"v"`
	Type        string          `json:"type"`
	Key         string          `json:"key"`
	Seq         int64           `json:"seq,omitempty"`
	Resource    string          `json:"resource"`
	Name        string          `json:"name"`
	Args        json.RawMessage `json:"args,omitempty"`
	At          int64           `json:"at,omitempty"`
	TraceParent string          `json:"traceparent,omitempty"`
}

// tooLarge is the refusal of a mutation whose frame of n bytes exceeds
// the server's limit.
func tooLarge(it *logItem, n, limit int) *RejectError {
	return &RejectError{Key: it.key, Code: protocol.CodeFrameTooLarge, Message: "the change is too large to send",
		Detail: fmt.Sprintf("%s.%s: the mutate frame is %d bytes; the server accepts at most %d", it.resource, it.name, n, limit)}
}

// jsonKind names the kind of JSON value raw holds.
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	}
	return "a number"
}

// onAck reconciles an ack frame.
func (s *session) onAck(ctx context.Context, f protocol.ServerFrame) {
	c := s.c
	c.lmu.Lock()
	it, known, conflicts := c.rep.ack(f.Key, f.Cursor, f.Entries)
	if it == nil {
		c.lmu.Unlock()
		return
	}
	c.noteEchoesLocked(it.resource, f.Cursor, f.Entries)
	settled := c.rep.settle()
	c.rep.refresh(nil)
	err := c.saveQueueLocked(ctx)
	c.lmu.Unlock()
	if err != nil {
		s.queueError(err)
	}
	if !known {
		c.log.Info("tide client: ack of a mutation this client does not know; the server's rows landed", "key", f.Key)
	}
	var cerr error
	for _, cf := range conflicts {
		ce := &ConflictError{Key: f.Key, Resource: cf.resource, RowKey: cf.key, Err: cf.err}
		if cerr == nil {
			cerr = ce
		}
		c.emit(Event{Kind: EventMutationConflict, Key: f.Key, Err: ce})
	}
	if it.handle != nil {
		it.handle.resolve(Result{Key: f.Key, Cursor: f.Cursor, Replayed: f.Replayed, Entries: f.Entries}, cerr)
	}
	settleHandles(settled)
}

// onReject rolls back a rejected mutation, or schedules its resend when
// the server asks for one later: unavailable, draining, and rate_limited
// (too many mutations of this user wait on the server).
func (s *session) onReject(ctx context.Context, f protocol.ServerFrame) {
	c := s.c
	if f.Code == protocol.CodeUnavailable || f.Code == protocol.CodeDraining || f.Code == protocol.CodeRateLimited {
		s.mmu.Lock()
		delete(s.sent, f.Key)
		n := s.resends
		s.resends++
		s.mmu.Unlock()
		c.emit(Event{Kind: EventMutationRejected, Key: f.Key, Code: f.Code, Message: f.Message, Detail: f.Detail})
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.sess != s || !s.ready {
			return
		}
		s.wg.Add(1)
		s.timers = append(s.timers, time.AfterFunc(backoff.Delay(n, c.cfg.MinBackoff, c.cfg.MaxBackoff), func() {
			defer s.wg.Done()
			s.flushMutations()
		}))
		return
	}
	if err := c.settleRejected(ctx, &RejectError{Key: f.Key, Code: f.Code, Message: f.Message, Detail: f.Detail}); err != nil {
		s.queueError(err)
	}
}

// settleRejected takes the rejected mutation re.Key out of the log
// (rolled back, the others replayed), reports it and answers its Wait
// with re. It does nothing for a key the log does not hold pending. The
// error is the queue's save failing.
func (c *Client) settleRejected(ctx context.Context, re *RejectError) error {
	c.lmu.Lock()
	it := c.rep.reject(re.Key)
	if it == nil {
		c.lmu.Unlock()
		return nil
	}
	c.rep.refresh(nil)
	err := c.saveQueueLocked(ctx)
	c.lmu.Unlock()
	c.log.Warn("tide client: mutation rejected; its local change was rolled back", "key", re.Key, "code", re.Code, "message", re.Message, "detail", re.Detail)
	c.emit(Event{Kind: EventMutationRejected, Key: re.Key, Code: re.Code, Message: re.Message, Detail: re.Detail})
	if it.handle != nil {
		it.handle.resolve(Result{Key: re.Key}, re)
		it.handle.settle()
	}
	return err
}

// countServerClose counts, for every mutation sent on session s and not
// answered, that the server closed the connection, and settles as
// undeliverable those it was the maxCloses-th time for. Run calls it once
// s is over.
func (c *Client) countServerClose(ctx context.Context, s *session) {
	s.mmu.Lock()
	sent := s.sent
	s.mmu.Unlock()
	var undeliverable []*RejectError
	c.lmu.Lock()
	counted := false
	for _, it := range c.rep.log {
		if it.acked || it.handle == nil || !sent[it.key] {
			continue
		}
		it.closes++
		counted = true
		if it.closes >= maxCloses {
			undeliverable = append(undeliverable, &RejectError{Key: it.key, Code: CodeUndeliverable,
				Message: "the change could not be delivered",
				Detail:  fmt.Sprintf("%s.%s: the server closed the connection each of the %d times the mutation was sent, without answering it", it.resource, it.name, it.closes)})
		}
	}
	var err error
	if counted {
		err = c.saveQueueLocked(ctx)
	}
	c.lmu.Unlock()
	for _, re := range undeliverable {
		if serr := c.settleRejected(ctx, re); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		c.log.Error("tide client: saving the mutation queue failed", "err", err)
		c.emit(Event{Kind: EventStoreError, Err: err})
	}
}

// settleHandles closes the Settled channels of items that left the log,
// once their Wait is answered.
func settleHandles(items []*logItem) {
	for _, it := range items {
		if it.handle != nil {
			it.handle.resolve(Result{Key: it.key, Cursor: it.cursor}, nil)
			it.handle.settle()
		}
	}
}

// queueError reports a failure to persist the queue and drops the
// connection; the mutation log in memory is kept.
func (s *session) queueError(err error) {
	s.c.log.Error("tide client: saving the mutation queue failed; dropping the connection", "err", err)
	s.abort(fmt.Errorf("client: queue store: %w", err), true)
	s.c.emit(Event{Kind: EventStoreError, Err: err})
}
