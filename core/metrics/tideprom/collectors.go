package tideprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/pgfeed"
	"github.com/tidesync/tide/core/feed/replicator"
)

// replicatorRoles are the values of tide_replicator_role's role label.
var replicatorRoles = []string{
	replicator.RoleStarting.String(), replicator.RoleStandby.String(),
	replicator.RoleLeader.String(), replicator.RoleStopped.String(),
}

// sequencerRoles are the values of tide_sequencer_role's role label.
var sequencerRoles = []string{pgfeed.SequencerOff.String(), pgfeed.SequencerStandby.String(), pgfeed.SequencerLeader.String()}

// Replicator returns a collector of r's role and counters, read from
// r.Status() at scrape time:
//
//	prometheus.MustRegister(tideprom.Replicator(r, tideprom.Options{}))
func Replicator(r *replicator.Replicator, opts Options) prometheus.Collector {
	return &statusCollector[replicator.Status]{
		read: r.Status,
		metrics: []statusMetric[replicator.Status]{
			stateSet(opts, "replicator_role", "1 for this node's replicator role (starting, standby, leader, stopped), 0 for the others.",
				replicatorRoles, func(s replicator.Status) string { return s.Role.String() }),
			{desc: desc(opts, "replicator_leader", "1 while this node holds the replicator's lock and publishes, else 0."), kind: prometheus.GaugeValue,
				value: func(s replicator.Status) float64 { return b2f(s.Role == replicator.RoleLeader) }},
			{desc: desc(opts, "replicator_ready", "1 while this node's replicator role is healthy (leader publishing, or standby able to take over)."), kind: prometheus.GaugeValue,
				value: func(s replicator.Status) float64 { return b2f(s.Ready) }},
			{desc: desc(opts, "replicator_terms_total", "Times this node became the replicator's leader (failovers to it)."), kind: prometheus.CounterValue,
				value: func(s replicator.Status) float64 { return float64(s.Terms) }},
			{desc: desc(opts, "replicator_lost_lock_total", "Terms of this node's replicator that ended because its lock connection failed (failovers away from it)."), kind: prometheus.CounterValue,
				value: func(s replicator.Status) float64 { return float64(s.LostLock) }},
			{desc: desc(opts, "replicator_published_total", "Changes this node's replicator published to the bus."), kind: prometheus.CounterValue,
				value: func(s replicator.Status) float64 { return float64(s.Published) }},
			{desc: desc(opts, "replicator_skipped_total", "Changes the replicator read again at or below its last published position, or the bus acknowledged as duplicates."), kind: prometheus.CounterValue,
				value: func(s replicator.Status) float64 { return float64(s.Skipped) }},
			{desc: desc(opts, "replicator_out_of_order_total", "Changes the replicator read below the previous change of their batch (dropped)."), kind: prometheus.CounterValue,
				value: func(s replicator.Status) float64 { return float64(s.OutOfOrder) }},
			{desc: desc(opts, "replicator_last_published_position", "Position of the last change this node's replicator published."), kind: prometheus.GaugeValue,
				value: func(s replicator.Status) float64 { return float64(s.LastPublished) }},
		},
	}
}

// feedStatus is what Feed reads at scrape time.
type feedStatus struct {
	seq   pgfeed.SequencerStatus
	stats pgfeed.Stats
}

// Feed returns a collector of the Postgres feed's sequencer role and
// counters and of its listener, read from f.SequencerStatus() and f.Stats()
// at scrape time. Register it on every node: exactly one node of a
// database reports tide_sequencer_leader 1.
func Feed(f *pgfeed.Feed, opts Options) prometheus.Collector {
	c := func(name, help string, v func(feedStatus) int64) statusMetric[feedStatus] {
		return statusMetric[feedStatus]{desc: desc(opts, name, help), kind: prometheus.CounterValue, value: func(s feedStatus) float64 { return float64(v(s)) }}
	}
	return &statusCollector[feedStatus]{
		read: func() feedStatus { return feedStatus{seq: f.SequencerStatus(), stats: f.Stats()} },
		metrics: []statusMetric[feedStatus]{
			stateSet(opts, "sequencer_role", "1 for this node's sequencer role (off: not a candidate; standby; leader), 0 for the others.",
				sequencerRoles, func(s feedStatus) string { return s.seq.Role.String() }),
			{desc: desc(opts, "sequencer_leader", "1 while this node holds the sequencer role and gives committed changes their positions, else 0."), kind: prometheus.GaugeValue,
				value: func(s feedStatus) float64 { return b2f(s.seq.Role == pgfeed.SequencerLeader) }},
			c("sequencer_terms_total", "Times this node took the sequencer role (failovers to it, the first term included).", func(s feedStatus) int64 { return s.seq.Terms }),
			c("sequencer_steps_total", "Sequencing steps of this node that gave positions.", func(s feedStatus) int64 { return s.seq.Steps }),
			c("sequencer_changes_total", "Changes this node's sequencer gave positions to.", func(s feedStatus) int64 { return s.seq.Sequenced }),
			c("feed_listener_connects_total", "LISTEN connections the feed established (1 + reconnects).", func(s feedStatus) int64 { return s.stats.ListenerConnects }),
			c("feed_notifications_total", "Change notifications the feed's listener received.", func(s feedStatus) int64 { return s.stats.Notifications }),
			c("feed_polls_total", "Tail reads started by the poll timer rather than a notification.", func(s feedStatus) int64 { return s.stats.Polls }),
		},
	}
}

// Bus returns a collector of the NATS bus's counters, read from b.Stats()
// at scrape time.
func Bus(b *natsbus.Bus, opts Options) prometheus.Collector {
	c := func(name, help string, f func(natsbus.Stats) int64) statusMetric[natsbus.Stats] {
		return statusMetric[natsbus.Stats]{desc: desc(opts, name, help), kind: prometheus.CounterValue, value: func(s natsbus.Stats) float64 { return float64(f(s)) }}
	}
	return &statusCollector[natsbus.Stats]{
		read: b.Stats,
		metrics: []statusMetric[natsbus.Stats]{
			c("bus_received_total", "Messages the node's bus consumers delivered.", func(s natsbus.Stats) int64 { return s.Received }),
			c("bus_filtered_total", "Bus messages dropped because no subscription of the node needs their topic.", func(s natsbus.Stats) int64 { return s.Filtered }),
			c("bus_invalid_total", "Bus messages that did not decode.", func(s natsbus.Stats) int64 { return s.Invalid }),
			c("bus_expired_total", "Times the bus told the tailer it fell behind the stream's retention.", func(s natsbus.Stats) int64 { return s.Expired }),
			c("bus_reader_failures_total", "Bus consumers abandoned after an error.", func(s natsbus.Stats) int64 { return s.ReaderFailures }),
			c("bus_published_total", "Messages this node published to the stream.", func(s natsbus.Stats) int64 { return s.Published }),
			c("bus_duplicates_total", "Publishes the stream acknowledged as duplicates (skipped).", func(s natsbus.Stats) int64 { return s.Duplicates }),
			c("bus_fenced_total", "Publishes refused because another leader moved the stream.", func(s natsbus.Stats) int64 { return s.Fenced }),
		},
	}
}

func desc(opts Options, name, help string, labels ...string) *prometheus.Desc {
	ns := opts.Namespace
	if ns == "" {
		ns = "tide"
	}
	return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, opts.ConstLabels)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// statusMetric is one metric of a statusCollector: a value, or, when
// states is set, a state set (one series per state, 1 for the current one).
type statusMetric[S any] struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	value  func(S) float64
	states []string
	state  func(S) string
}

// stateSet returns a gauge with a "role" label over the bounded set states.
func stateSet[S any](opts Options, name, help string, states []string, state func(S) string) statusMetric[S] {
	return statusMetric[S]{desc: desc(opts, name, help, "role"), kind: prometheus.GaugeValue, states: states, state: state}
}

// statusCollector reports metrics computed from one snapshot per scrape.
type statusCollector[S any] struct {
	read    func() S
	metrics []statusMetric[S]
}

func (c *statusCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

func (c *statusCollector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	for _, m := range c.metrics {
		if m.states == nil {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s))
			continue
		}
		cur := m.state(s)
		for _, st := range m.states {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, b2f(st == cur), st)
		}
	}
}
