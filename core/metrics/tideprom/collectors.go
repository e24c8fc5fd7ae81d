package tideprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidesync/tide/core/feed/natsbus"
	"github.com/tidesync/tide/core/feed/replicator"
)

// Replicator returns a collector of r's role and counters, read from
// r.Status() at scrape time:
//
//	prometheus.MustRegister(tideprom.Replicator(r, tideprom.Options{}))
func Replicator(r *replicator.Replicator, opts Options) prometheus.Collector {
	return &statusCollector[replicator.Status]{
		read: r.Status,
		metrics: []statusMetric[replicator.Status]{
			{desc(opts, "replicator_leader", "1 while this node holds the replicator's lock and publishes, else 0."), prometheus.GaugeValue,
				func(s replicator.Status) float64 { return b2f(s.Role == replicator.RoleLeader) }},
			{desc(opts, "replicator_ready", "1 while this node's replicator role is healthy (leader publishing, or standby able to take over)."), prometheus.GaugeValue,
				func(s replicator.Status) float64 { return b2f(s.Ready) }},
			{desc(opts, "replicator_terms_total", "Times this node became the replicator's leader (failovers to it)."), prometheus.CounterValue,
				func(s replicator.Status) float64 { return float64(s.Terms) }},
			{desc(opts, "replicator_published_total", "Changes this node's replicator published to the bus."), prometheus.CounterValue,
				func(s replicator.Status) float64 { return float64(s.Published) }},
			{desc(opts, "replicator_skipped_total", "Changes the replicator read again at or below its last published position, or the bus acknowledged as duplicates."), prometheus.CounterValue,
				func(s replicator.Status) float64 { return float64(s.Skipped) }},
			{desc(opts, "replicator_out_of_order_total", "Changes the replicator read below the previous change of their batch (dropped)."), prometheus.CounterValue,
				func(s replicator.Status) float64 { return float64(s.OutOfOrder) }},
			{desc(opts, "replicator_last_published_position", "Position of the last change this node's replicator published."), prometheus.GaugeValue,
				func(s replicator.Status) float64 { return float64(s.LastPublished) }},
		},
	}
}

// Bus returns a collector of the NATS bus's counters, read from b.Stats()
// at scrape time.
func Bus(b *natsbus.Bus, opts Options) prometheus.Collector {
	c := func(name, help string, f func(natsbus.Stats) int64) statusMetric[natsbus.Stats] {
		return statusMetric[natsbus.Stats]{desc(opts, name, help), prometheus.CounterValue, func(s natsbus.Stats) float64 { return float64(f(s)) }}
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

func desc(opts Options, name, help string) *prometheus.Desc {
	ns := opts.Namespace
	if ns == "" {
		ns = "tide"
	}
	return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, nil, opts.ConstLabels)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type statusMetric[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
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
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s))
	}
}
