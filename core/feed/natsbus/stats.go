package natsbus

import "sync/atomic"

// counters are the bus's operational counters.
type counters struct {
	received    atomic.Int64
	returned    atomic.Int64
	filtered    atomic.Int64
	old         atomic.Int64
	invalid     atomic.Int64
	foreign     atomic.Int64
	expired     atomic.Int64
	readers     atomic.Int64
	positions   atomic.Int64
	checks      atomic.Int64
	readerFails atomic.Int64
	fastForward atomic.Int64
	probes      atomic.Int64
	published   atomic.Int64
	duplicates  atomic.Int64
	fenced      atomic.Int64
}

// Stats are a bus's counters.
type Stats struct {
	// Consumer side.
	Received        int64 // messages the node's consumers delivered
	Returned        int64 // changes Tail returned to the engine
	Filtered        int64 // messages dropped because no subscription of the node needs their topic
	Old             int64 // messages at or below the position Tail was asked for (already covered)
	Invalid         int64 // messages that did not decode (skipped and logged)
	Foreign         int64 // messages of another change log (epoch)
	Expired         int64 // times Tail returned feed.ErrCursorExpired
	Readers         int64 // consumers created (start, interest growth, repositioning, failures)
	Positionings    int64 // searches of the stream for the first change after a position
	RetentionChecks int64 // stream-info requests made to rule out retention gaps
	ReaderFailures  int64 // consumers abandoned after an error (disconnect, missed heartbeats, delivery gap)
	FastForwards    int64 // times an idle node skipped to the stream's end as its first subscriber arrived
	Probes          int64 // checks, after a quiet spell, that the node has seen everything of its topics
	// Publisher side.
	Published  int64 // messages stored in the stream
	Duplicates int64 // messages the stream acknowledged as duplicates
	Fenced     int64 // publishes refused because the stream moved (another leader published)
}

// Stats returns the bus's counters.
func (b *Bus) Stats() Stats {
	s := &b.stats
	return Stats{
		Received: s.received.Load(), Returned: s.returned.Load(), Filtered: s.filtered.Load(),
		Old: s.old.Load(), Invalid: s.invalid.Load(), Foreign: s.foreign.Load(), Expired: s.expired.Load(),
		Readers: s.readers.Load(), Positionings: s.positions.Load(), RetentionChecks: s.checks.Load(),
		ReaderFailures: s.readerFails.Load(), FastForwards: s.fastForward.Load(), Probes: s.probes.Load(),
		Published: s.published.Load(), Duplicates: s.duplicates.Load(), Fenced: s.fenced.Load(),
	}
}
