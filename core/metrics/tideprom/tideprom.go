// Package tideprom exposes a tide engine's metrics to Prometheus
// (prometheus/client_golang). Core counts nothing itself for Prometheus: it
// tells a core.Observer of each event, and Metrics is that observer and a
// prometheus.Collector at once:
//
//	m := tideprom.New(tideprom.Options{})
//	e, _ := core.New(core.Config{Feed: f, Observer: m})
//	m.Watch(e) // head position and lag, read at scrape time
//	prometheus.MustRegister(m)
//
// Labels carry only resource names, mutator names, codes and reasons: never
// a scope, a principal or a connection, so the number of series stays
// bounded by what the app declares. See docs/operations.md for the metric
// reference.
package tideprom

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// Options configures Metrics. The zero value is ready to use.
type Options struct {
	// Namespace prefixes every metric name. Zero value: "tide".
	Namespace string
	// ConstLabels are added to every metric (for example the node name).
	// Zero value: none.
	ConstLabels prometheus.Labels
	// HeadTimeout bounds the read of the feed's head at scrape time. Zero
	// value: 2 s.
	HeadTimeout time.Duration
}

// Metrics is a core.Observer that counts the engine's events and a
// prometheus.Collector that reports them. Create it with New, pass it as
// core.Config.Observer, and register it.
type Metrics struct {
	core.NopObserver
	opts Options

	connections      prometheus.Gauge
	connectionsTotal prometheus.Counter
	closes           *prometheus.CounterVec
	subscriptions    *prometheus.GaugeVec
	subscribes       *prometheus.CounterVec
	refusals         *prometheus.CounterVec
	catchUps         *prometheus.CounterVec
	catchUpPages     *prometheus.HistogramVec
	catchUpSeconds   *prometheus.HistogramVec
	resets           *prometheus.CounterVec
	delivery         *deliveryCounters
	dropped          prometheus.Counter
	resyncs          prometheus.Counter
	tailBatches      prometheus.Counter
	tailChanges      prometheus.Counter
	mutations        *prometheus.CounterVec
	mutationSeconds  *prometheus.HistogramVec
	refreshes        *prometheus.CounterVec

	deliveriesDesc *prometheus.Desc
	framesDesc     *prometheus.Desc
	bytesDesc      *prometheus.Desc
	positionDesc   *prometheus.Desc
	headDesc       *prometheus.Desc
	posLagDesc     *prometheus.Desc
	lagDesc        *prometheus.Desc

	// The tailer's progress, for the lag gauges.
	dispatched atomic.Int64 // position of the last dispatched change
	lastBatch  atomic.Int64 // unix nanoseconds of the last dispatch (or tail start)

	mu     sync.Mutex
	engine *core.Engine
}

// deliveryCounters are the counters of the delivery path, which every
// socket writer adds to once per frame, from every core. They share one
// cache line, and it is theirs alone (64 bytes, so the allocator's size
// class aligns it): a frame moves one line between cores, not three.
type deliveryCounters struct {
	entries, frames, bytes atomic.Uint64
	_                      [40]byte
}

var (
	sizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
)

// New returns Metrics with no series yet.
func New(opts Options) *Metrics {
	if opts.Namespace == "" {
		opts.Namespace = "tide"
	}
	if opts.HeadTimeout <= 0 {
		opts.HeadTimeout = 2 * time.Second
	}
	ns, cl := opts.Namespace, opts.ConstLabels
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl}, labels)
	}
	histVec := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl, Buckets: buckets}, labels)
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, nil, cl)
	}
	m := &Metrics{
		opts:             opts,
		connections:      prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "connections", Help: "Open WebSocket connections.", ConstLabels: cl}),
		connectionsTotal: counter("connections_total", "WebSocket connections accepted."),
		closes:           counterVec("closes_total", "Close handshakes the server started, by close code.", "code"),
		subscriptions:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "subscriptions", Help: "Active subscriptions, by resource (a subscription of several resources counts under each).", ConstLabels: cl}, []string{"resource"}),
		subscribes:       counterVec("subscribes_total", "Subscriptions started (before their policy ran), by resource (a subscription of several resources counts under each).", "resource"),
		refusals:         counterVec("subscribe_refusals_total", "Subscribe frames answered with an error, by resource and error code.", "resource", "code"),
		catchUps:         counterVec("catchups_total", "Catch-up rounds (snapshot or replay) that ended with the subscription live, by resource (a subscription of several resources counts under each).", "resource"),
		catchUpPages:     histVec("catchup_pages", "Pages sent by a catch-up round.", sizeBuckets, "resource"),
		catchUpSeconds:   histVec("catchup_duration_seconds", "Duration of catch-up rounds, from the subscribe or resync to caught-up.", prometheus.DefBuckets, "resource"),
		resets:           counterVec("resets_total", "Reset frames sent, by reason.", "reason"),
		delivery:         new(deliveryCounters),
		deliveriesDesc:   desc("deliveries_total", "Live changes written to sockets."),
		framesDesc:       desc("delivery_frames_total", "Live changes frames written to sockets."),
		bytesDesc:        desc("delivered_bytes_total", "Bytes of live changes frames written to sockets."),
		dropped:          counter("live_dropped_total", "Live changes (each desynced its subscription until a replay) and channel messages that did not fit a connection's send queue."),
		resyncs:          counter("tail_resyncs_total", "Times the tailer fell behind the retained change log and every subscription of the node resynced."),
		tailBatches:      counter("tail_batches_total", "Batches of changes the tailer dispatched."),
		tailChanges:      counter("tail_changes_total", "Changes the tailer dispatched."),
		mutations:        counterVec("mutations_total", "Mutations, by resource, mutator and outcome (ack, or the reject code).", "resource", "mutator", "outcome"),
		mutationSeconds:  histVec("mutation_duration_seconds", "Duration of mutations, from the frame to the ack or reject.", prometheus.DefBuckets, "resource", "mutator"),
		refreshes:        counterVec("token_refreshes_total", "Refresh frames, by outcome (ok, or the refusal code).", "outcome"),
		positionDesc:     desc("tail_position", "Position of the last change the tailer dispatched."),
		headDesc:         desc("feed_head_position", "Position of the feed's newest committed change, read at scrape time."),
		posLagDesc:       desc("tail_position_lag", "Feed head minus the tailer's position: positions committed but not yet dispatched."),
		lagDesc:          desc("tail_lag_seconds", "How long committed changes have waited for the tailer: 0 when it has dispatched up to the head, else the time since it last dispatched."),
	}
	m.lastBatch.Store(time.Now().UnixNano())
	return m
}

// Watch lets the scrape read e's feed head for the head and lag gauges.
// Without it those gauges are not reported.
func (m *Metrics) Watch(e *core.Engine) {
	m.mu.Lock()
	m.engine = e
	m.mu.Unlock()
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.connections, m.connectionsTotal, m.closes, m.subscriptions, m.subscribes, m.refusals,
		m.catchUps, m.catchUpPages, m.catchUpSeconds, m.resets,
		m.dropped, m.resyncs, m.tailBatches, m.tailChanges, m.mutations, m.mutationSeconds, m.refreshes,
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.deliveriesDesc
	ch <- m.framesDesc
	ch <- m.bytesDesc
	ch <- m.positionDesc
	ch <- m.headDesc
	ch <- m.posLagDesc
	ch <- m.lagDesc
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	d := m.delivery
	ch <- prometheus.MustNewConstMetric(m.deliveriesDesc, prometheus.CounterValue, float64(d.entries.Load()))
	ch <- prometheus.MustNewConstMetric(m.framesDesc, prometheus.CounterValue, float64(d.frames.Load()))
	ch <- prometheus.MustNewConstMetric(m.bytesDesc, prometheus.CounterValue, float64(d.bytes.Load()))
	pos := m.dispatched.Load()
	ch <- prometheus.MustNewConstMetric(m.positionDesc, prometheus.GaugeValue, float64(pos))
	m.mu.Lock()
	e := m.engine
	m.mu.Unlock()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.HeadTimeout)
	defer cancel()
	head, err := e.Head(ctx)
	if err != nil {
		return // the feed is unreachable: no head, no lag (absent() alerts on it)
	}
	lag, wait := int64(head)-pos, 0.0
	if lag < 0 {
		lag = 0
	}
	if lag > 0 {
		wait = time.Since(time.Unix(0, m.lastBatch.Load())).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(m.headDesc, prometheus.GaugeValue, float64(head))
	ch <- prometheus.MustNewConstMetric(m.posLagDesc, prometheus.GaugeValue, float64(lag))
	ch <- prometheus.MustNewConstMetric(m.lagDesc, prometheus.GaugeValue, wait)
}

// ConnOpened implements core.Observer.
func (m *Metrics) ConnOpened() { m.connections.Inc(); m.connectionsTotal.Inc() }

// ConnClosed implements core.Observer.
func (m *Metrics) ConnClosed() { m.connections.Dec() }

// CloseSent implements core.Observer.
func (m *Metrics) CloseSent(code protocol.CloseCode) {
	m.closes.WithLabelValues(strconv.Itoa(int(code))).Inc()
}

// Subscribed implements core.Observer.
func (m *Metrics) Subscribed(resource string) {
	m.subscriptions.WithLabelValues(resource).Inc()
	m.subscribes.WithLabelValues(resource).Inc()
}

// SubscriptionEnded implements core.Observer.
func (m *Metrics) SubscriptionEnded(resource string) { m.subscriptions.WithLabelValues(resource).Dec() }

// SubscribeRefused implements core.Observer.
func (m *Metrics) SubscribeRefused(resource string, code protocol.Code) {
	m.refusals.WithLabelValues(resource, string(code)).Inc()
}

// CaughtUp implements core.Observer.
func (m *Metrics) CaughtUp(resource string, pages int, d time.Duration) {
	m.catchUps.WithLabelValues(resource).Inc()
	m.catchUpPages.WithLabelValues(resource).Observe(float64(pages))
	m.catchUpSeconds.WithLabelValues(resource).Observe(d.Seconds())
}

// ResetSent implements core.Observer.
func (m *Metrics) ResetSent(reason protocol.ResetReason) {
	m.resets.WithLabelValues(string(reason)).Inc()
}

// TailStarted implements core.Observer.
func (m *Metrics) TailStarted(at feed.Position) {
	m.dispatched.Store(int64(at))
	m.lastBatch.Store(time.Now().UnixNano())
}

// TailBatch implements core.Observer.
func (m *Metrics) TailBatch(n int, last feed.Position) {
	m.tailBatches.Inc()
	m.tailChanges.Add(float64(n))
	m.dispatched.Store(int64(last))
	m.lastBatch.Store(time.Now().UnixNano())
}

// Delivered implements core.Observer.
func (m *Metrics) Delivered(entries, bytes int) {
	d := m.delivery
	d.entries.Add(uint64(entries))
	d.frames.Add(1)
	d.bytes.Add(uint64(bytes))
}

// Dropped implements core.Observer.
func (m *Metrics) Dropped() { m.dropped.Inc() }

// Desynced implements core.Observer.
func (m *Metrics) Desynced() { m.resyncs.Inc() }

// Mutated implements core.Observer.
func (m *Metrics) Mutated(resource, mutator string, code protocol.Code, d time.Duration) {
	outcome := "ack"
	if code != "" {
		outcome = string(code)
	}
	m.mutations.WithLabelValues(resource, mutator, outcome).Inc()
	if d > 0 {
		m.mutationSeconds.WithLabelValues(resource, mutator).Observe(d.Seconds())
	}
}

// TokenRefreshed implements core.Observer.
func (m *Metrics) TokenRefreshed(code protocol.Code) {
	outcome := "ok"
	if code != "" {
		outcome = string(code)
	}
	m.refreshes.WithLabelValues(outcome).Inc()
}
