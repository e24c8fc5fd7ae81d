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
	type S = replicator.Status
	return &statusCollector[S]{
		read: r.Status,
		metrics: []statusMetric[S]{
			stateSet(opts, "replicator_role", "1 for this node's replicator role (starting, standby, leader, stopped), 0 for the others.",
				replicatorRoles, func(s S) string { return s.Role.String() }),
			gauge(opts, "replicator_leader", "1 while this node holds the replicator's lock and publishes, else 0.",
				func(s S) float64 { return b2f(s.Role == replicator.RoleLeader) }),
			gauge(opts, "replicator_ready", "1 while this node's replicator role is healthy (leader publishing, or standby able to take over).",
				func(s S) float64 { return b2f(s.Ready) }),
			counter(opts, "replicator_terms_total", "Times this node became the replicator's leader (failovers to it).",
				func(s S) int64 { return s.Terms }),
			counter(opts, "replicator_lost_lock_total", "Terms of this node's replicator that ended because its lock connection failed (failovers away from it).",
				func(s S) int64 { return s.LostLock }),
			counter(opts, "replicator_published_total", "Changes this node's replicator published to the bus.",
				func(s S) int64 { return s.Published }),
			counter(opts, "replicator_skipped_total", "Changes the replicator read again at or below its last published position, or the bus acknowledged as duplicates.",
				func(s S) int64 { return s.Skipped }),
			counter(opts, "replicator_out_of_order_total", "Changes the replicator read below the previous change of their batch (dropped).",
				func(s S) int64 { return s.OutOfOrder }),
			gauge(opts, "replicator_last_published_position", "Position of the last change this node's replicator published.",
				func(s S) float64 { return float64(s.LastPublished) }),
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
	type S = feedStatus
	return &statusCollector[S]{
		read: func() S { return S{seq: f.SequencerStatus(), stats: f.Stats()} },
		metrics: []statusMetric[S]{
			info(opts, "node_info", "1, with tide_node the name this node goes by (pgfeed.Options.Node): the name tide status and the status page give a role's holder.",
				"tide_node", func(S) string { return f.Node() }),
			stateSet(opts, "sequencer_role", "1 for this node's sequencer role (off: not a candidate; standby; leader), 0 for the others.",
				sequencerRoles, func(s S) string { return s.seq.Role.String() }),
			gauge(opts, "sequencer_leader", "1 while this node holds the sequencer role and gives committed changes their positions, else 0.",
				func(s S) float64 { return b2f(s.seq.Role == pgfeed.SequencerLeader) }),
			counter(opts, "sequencer_terms_total", "Times this node took the sequencer role (failovers to it, the first term included).", func(s S) int64 { return s.seq.Terms }),
			counter(opts, "sequencer_steps_total", "Sequencing steps of this node that gave positions.", func(s S) int64 { return s.seq.Steps }),
			counter(opts, "sequencer_changes_total", "Changes this node's sequencer gave positions to.", func(s S) int64 { return s.seq.Sequenced }),
			gauge(opts, "sequencer_wal_stream", "1 while this node's sequencer learns of new changes from the WAL stream, 0 while it polls or is not the leader.",
				func(s S) float64 { return b2f(s.seq.WALStream) }),
			counter(opts, "sequencer_wal_wakeups_total", "Looks at new changes that the WAL stream started.", func(s S) int64 { return s.seq.WALWakeups }),
			gauge(opts, "logical_slot_active", "1 while a consumer streams from the logical capture's replication slot (pgfeed.CaptureLogical), as this node last read it.",
				func(s S) float64 { return b2f(s.stats.SlotActive) }),
			gauge(opts, "logical_lag_bytes", "WAL written since the position the logical capture's consumer last confirmed, as this node last read it (every 10 s); 0 in the trigger mode.",
				func(s S) float64 { return float64(s.stats.SlotLagBytes) }),
			gauge(opts, "logical_retained_wal_bytes", "WAL the logical capture's replication slot keeps on the database server's disk, as this node last read it (every 10 s); it grows without bound while no consumer confirms.",
				func(s S) float64 { return float64(s.stats.SlotRetainedBytes) }),
			counter(opts, "logical_skipped_total", "Transactions the replication slot delivered again to this node's consumer after they were written (at-least-once delivery), skipped.",
				func(s S) int64 { return s.stats.LogicalSkipped }),
			counter(opts, "feed_listener_connects_total", "LISTEN connections the feed established (1 + reconnects).", func(s S) int64 { return s.stats.ListenerConnects }),
			counter(opts, "feed_notifications_total", "Change notifications the feed's listener received.", func(s S) int64 { return s.stats.Notifications }),
			counter(opts, "feed_polls_total", "Tail reads started by the poll timer rather than a notification.", func(s S) int64 { return s.stats.Polls }),
		},
	}
}

// Bus returns a collector of the NATS bus's counters, read from b.Stats()
// at scrape time.
func Bus(b *natsbus.Bus, opts Options) prometheus.Collector {
	type S = natsbus.Stats
	return &statusCollector[S]{
		read: b.Stats,
		metrics: []statusMetric[S]{
			counter(opts, "bus_received_total", "Messages the node's bus consumers delivered.", func(s S) int64 { return s.Received }),
			counter(opts, "bus_filtered_total", "Bus messages dropped because no subscription of the node needs their topic.", func(s S) int64 { return s.Filtered }),
			counter(opts, "bus_invalid_total", "Bus messages that did not decode.", func(s S) int64 { return s.Invalid }),
			counter(opts, "bus_expired_total", "Times the bus told the tailer it fell behind the stream's retention.", func(s S) int64 { return s.Expired }),
			counter(opts, "bus_reader_failures_total", "Bus consumers abandoned after an error.", func(s S) int64 { return s.ReaderFailures }),
			counter(opts, "bus_published_total", "Messages this node published to the stream.", func(s S) int64 { return s.Published }),
			counter(opts, "bus_duplicates_total", "Publishes the stream acknowledged as duplicates (skipped).", func(s S) int64 { return s.Duplicates }),
			counter(opts, "bus_fenced_total", "Publishes refused because another leader moved the stream.", func(s S) int64 { return s.Fenced }),
		},
	}
}

// gauge returns a gauge of a statusCollector.
func gauge[S any](opts Options, name, help string, v func(S) float64) statusMetric[S] {
	return statusMetric[S]{desc: desc(opts, name, help), kind: prometheus.GaugeValue, value: v}
}

// counter returns a counter of a statusCollector.
func counter[S any](opts Options, name, help string, v func(S) int64) statusMetric[S] {
	return statusMetric[S]{desc: desc(opts, name, help), kind: prometheus.CounterValue, value: func(s S) float64 { return float64(v(s)) }}
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

// statusMetric is one metric of a statusCollector: a value; or, when
// states is set, a state set (one series per state, 1 for the current
// one); or, when label is set, an info metric (1, with label's value).
type statusMetric[S any] struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	value  func(S) float64
	states []string
	state  func(S) string
	label  func(S) string
}

// info returns a gauge of value 1 whose label name carries a value.
func info[S any](opts Options, name, help, label string, value func(S) string) statusMetric[S] {
	return statusMetric[S]{desc: desc(opts, name, help, label), kind: prometheus.GaugeValue, label: value}
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
		if m.label != nil {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, 1, m.label(s))
			continue
		}
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
