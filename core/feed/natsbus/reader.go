package natsbus

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidesync/tide/core/feed"
)

// Consumer lifecycle: a reader is one ephemeral consumer of the node's
// interest, created by Tail from the sequence after the last message seen,
// and replaced whenever the interest grows past its filter, it fails
// (disconnect, missed heartbeats, delivery gap) or Tail resyncs.

// reader is one ephemeral consumer and the channel its messages arrive on.
type reader struct {
	cons  jetstream.Consumer
	cc    jetstream.ConsumeContext
	ch    chan jetstream.Msg
	errc  chan error
	done  chan struct{}
	stop  atomic.Bool
	all   bool                // the filter is "<prefix>.change.>"
	exact map[string]struct{} // exact subjects in the filter
	res   map[string]struct{} // "<prefix>.change.<resource>." of "<resource>.*" filters

	lastDseq  uint64 // consumer sequence of the last delivery; only the handler touches it
	processed uint64 // consumer sequence of the last message Tail committed (Bus.mu)

	// held are messages received and not yet committed, read first by
	// Tail's next receive: a trailing commit group left for the next batch.
	// Only Tail touches it.
	held []jetstream.Msg
}

// handle is the consumer's message handler: it hands m to Tail, or fails
// the reader on a delivery gap (messages lost in flight).
func (r *reader) handle(m jetstream.Msg) {
	if r.stop.Load() {
		return
	}
	md, err := m.Metadata()
	if err != nil {
		r.fail(err)
		return
	}
	if md.Sequence.Consumer != r.lastDseq+1 {
		r.fail(fmt.Errorf("natsbus: consumer delivery gap: %d after %d", md.Sequence.Consumer, r.lastDseq))
		return
	}
	r.lastDseq = md.Sequence.Consumer
	select {
	case r.ch <- m:
	case <-r.done:
	}
}

// fail stops the reader's deliveries and reports err to Tail, which
// replaces the reader.
func (r *reader) fail(err error) {
	r.stop.Store(true)
	select {
	case r.errc <- err:
	default:
	}
}

// covers reports whether the reader's filter delivers topic t.
func (r *reader) covers(b *Bus, t feed.Topic) bool {
	if r.all {
		return true
	}
	if _, ok := r.res[b.resPrefix(t.Resource)]; ok {
		return true
	}
	if t.All {
		return false
	}
	_, ok := r.exact[subject(b.opts.Prefix, t.Resource, t.Tenant)]
	return ok
}

// newReader creates an ephemeral consumer of the interest starting at
// stream sequence start, and starts consuming it.
func (b *Bus) newReader(ctx context.Context, start uint64, want map[feed.Topic]struct{}) (*reader, error) {
	subjects := b.filterFor(want)
	r := &reader{
		ch:    make(chan jetstream.Msg, b.opts.Prefetch),
		errc:  make(chan error, 1),
		done:  make(chan struct{}),
		exact: map[string]struct{}{},
		res:   map[string]struct{}{},
	}
	for _, s := range subjects {
		switch {
		case s == b.all:
			r.all = true
		case strings.HasSuffix(s, ".*"):
			r.res[strings.TrimSuffix(s, "*")] = struct{}{}
		default:
			r.exact[s] = struct{}{}
		}
	}
	cfg := jetstream.ConsumerConfig{
		Description:       "tide node",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       max(start, 1),
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: max(time.Minute, 4*b.opts.Heartbeat),
	}
	if len(subjects) == 1 {
		cfg.FilterSubject = subjects[0]
	} else {
		cfg.FilterSubjects = subjects
	}
	cctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	cons, err := b.stream.CreateConsumer(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsbus: create consumer: %w", err)
	}
	r.cons = cons
	r.cc, err = cons.Consume(r.handle,
		jetstream.PullMaxMessages(b.opts.Prefetch),
		jetstream.PullHeartbeat(b.opts.Heartbeat),
		jetstream.PullExpiry(max(30*time.Second, 4*b.opts.Heartbeat)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { r.fail(err) }),
	)
	if err != nil {
		b.deleteConsumer(cons)
		return nil, fmt.Errorf("natsbus: consume: %w", err)
	}
	b.stats.readers.Add(1)
	return r, nil
}

// stopReader stops a reader and deletes its consumer in the background.
func (b *Bus) stopReader(r *reader) {
	r.stop.Store(true)
	close(r.done)
	r.cc.Stop()
	b.deleteConsumer(r.cons)
}

// deleteConsumer deletes a consumer in the background (Close waits).
func (b *Bus) deleteConsumer(cons jetstream.Consumer) {
	name := cons.CachedInfo().Name
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.RequestTimeout)
		defer cancel()
		_ = b.stream.DeleteConsumer(ctx, name) // else the server drops it when inactive
	}()
}

// retire makes Tail replace rd, if it is still the current reader; the
// next reader starts after the last message committed, so what rd fetched
// and Tail did not commit is read again.
func (b *Bus) retire(rd *reader) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rd == rd {
		b.bumpLocked()
	}
}

// abandon replaces rd (its undelivered messages are read again by the next
// reader) and returns err.
func (b *Bus) abandon(rd *reader, err error) error {
	b.stats.readerFails.Add(1)
	b.retire(rd)
	return fmt.Errorf("natsbus: %w", err)
}
