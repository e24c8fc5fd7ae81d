package middleware

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/core/feed"
	"github.com/tidesync/tide/core/protocol"
)

// StatusPolicy decides who may see the status page: it returns nil to
// allow, or an error (authz.ErrForbidden, authz.ErrUnauthenticated) to
// refuse with 403 or 401.
type StatusPolicy func(r *http.Request, p authz.Principal) error

// WithStatusPage serves GET <prefix>/status: a self-contained page (no
// external assets) with this node's name, the database-wide roles and the
// node holding each (Engine.Roles), live counts and charts of the last
// minutes, the StatusLaggingSubscriptions subscriptions of this node most
// behind (core.Engine.LaggingSubscriptions: by lag, then send queue), and
// GET <prefix>/status?format=json, the same data for scripts.
// Under the same policy, GET <prefix>/status/inspect?principal=…&resource=…&key=…
// (origin=… optional) answers core.Engine.Inspect as JSON: why a
// principal's connections on this node did or did not get a row
// (docs/inspector.md).
// The page carries its data, so it shows it behind any authentication the
// app's principal function accepts (a cookie, a header a proxy adds, a
// client certificate); to stay current its script asks for the JSON with
// the page's cookies, and reloads the whole page where that is refused. rec must be
// part of the engine's Config.Observer (core.Observers can combine it with
// a metrics observer). policy decides who may see it; nil refuses everyone
// (deny by default). Zero value: no status page (404).
func WithStatusPage(policy StatusPolicy, rec *StatusRecorder) Option {
	return func(o *options) { o.status = &statusPage{policy: policy, rec: rec} }
}

type statusPage struct {
	policy StatusPolicy
	rec    *StatusRecorder
}

// StatusLaggingSubscriptions is how many of this node's subscriptions the
// status report lists, the most behind first
// (core.Engine.LaggingSubscriptions).
const StatusLaggingSubscriptions = 20

// StatusInterval is the width of one sample of the status page's charts;
// StatusSamples samples are kept (ten minutes).
const (
	StatusInterval = 5 * time.Second
	StatusSamples  = 120
)

// StatusRecorder is a core.Observer that keeps what the status page shows:
// current counts, subscriptions by resource, the last ten minutes of
// deliveries, connections and tail lag, and recent closes by code. Create it
// with NewStatusRecorder. It starts no goroutine: samples are taken as
// events and page loads come.
type StatusRecorder struct {
	core.NopObserver

	connections atomic.Int64
	delivered   atomic.Int64
	dropped     atomic.Int64
	dispatched  atomic.Int64
	lastTail    atomic.Int64 // unix nanoseconds
	now         func() time.Time

	mu      sync.Mutex
	subs    map[string]int64
	closes  []closeEvent // the last maxCloses
	samples []sample     // oldest first
	started time.Time
}

const maxCloses = 200

type closeEvent struct {
	at   time.Time
	code protocol.CloseCode
}

type sample struct {
	At          time.Time `json:"at"`
	Delivered   int64     `json:"-"` // cumulative
	PerSecond   float64   `json:"deliveries_per_second"`
	Connections int64     `json:"connections"`
	LagSeconds  float64   `json:"tail_lag_seconds"`
	LagKnown    bool      `json:"tail_lag_known"`
}

// NewStatusRecorder returns an empty recorder.
func NewStatusRecorder() *StatusRecorder {
	r := &StatusRecorder{subs: map[string]int64{}, now: time.Now}
	r.started = r.now()
	r.lastTail.Store(r.started.UnixNano())
	return r
}

// ConnOpened implements core.Observer.
func (r *StatusRecorder) ConnOpened() { r.connections.Add(1) }

// ConnClosed implements core.Observer.
func (r *StatusRecorder) ConnClosed() { r.connections.Add(-1) }

// CloseSent implements core.Observer.
func (r *StatusRecorder) CloseSent(code protocol.CloseCode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.closes) == maxCloses {
		r.closes = append(r.closes[:0], r.closes[1:]...)
	}
	r.closes = append(r.closes, closeEvent{r.now(), code})
}

// Subscribed implements core.Observer.
func (r *StatusRecorder) Subscribed(resource string) {
	r.mu.Lock()
	r.subs[resource]++
	r.mu.Unlock()
}

// SubscriptionEnded implements core.Observer.
func (r *StatusRecorder) SubscriptionEnded(resource string) {
	r.mu.Lock()
	r.subs[resource]--
	r.mu.Unlock()
}

// Delivered implements core.Observer.
func (r *StatusRecorder) Delivered(entries, _ int) { r.delivered.Add(int64(entries)) }

// Dropped implements core.Observer.
func (r *StatusRecorder) Dropped() { r.dropped.Add(1) }

// TailStarted implements core.Observer.
func (r *StatusRecorder) TailStarted(at feed.Position) {
	r.dispatched.Store(int64(at))
	r.lastTail.Store(r.now().UnixNano())
}

// TailBatch implements core.Observer: it also takes the charts' sample
// when one is due.
func (r *StatusRecorder) TailBatch(_ int, last feed.Position) {
	r.dispatched.Store(int64(last))
	t := r.now()
	r.lastTail.Store(t.UnixNano())
	r.mu.Lock()
	r.sampleLocked(t, -1, false)
	r.mu.Unlock()
}

// sampleLocked appends the samples due by t. lag < 0 with known false means
// the lag is not known at this sample.
func (r *StatusRecorder) sampleLocked(t time.Time, lag float64, known bool) {
	slot := t.Truncate(StatusInterval)
	d := r.delivered.Load()
	n := len(r.samples)
	if n > 0 && !r.samples[n-1].At.Before(slot) {
		if known { // refine the current sample
			r.samples[n-1].LagSeconds, r.samples[n-1].LagKnown = lag, true
		}
		r.samples[n-1].Connections = r.connections.Load()
		return
	}
	prevD, prevAt := int64(0), r.started
	if n > 0 {
		prevD, prevAt = r.samples[n-1].Delivered, r.samples[n-1].At
	}
	secs := slot.Sub(prevAt).Seconds()
	if secs <= 0 {
		secs = StatusInterval.Seconds()
	}
	s := sample{At: slot, Delivered: d, PerSecond: float64(d-prevD) / secs, Connections: r.connections.Load(), LagSeconds: lag, LagKnown: known}
	if !known {
		s.LagSeconds = 0
	}
	r.samples = append(r.samples, s)
	if len(r.samples) > StatusSamples {
		r.samples = append(r.samples[:0], r.samples[len(r.samples)-StatusSamples:]...)
	}
}

// statusReport is the JSON of <prefix>/status?format=json.
type statusReport struct {
	Now           time.Time       `json:"now"`
	Node          string          `json:"node"`
	Roles         []feed.Role     `json:"roles"`
	RolesError    string          `json:"roles_error,omitempty"`
	Connections   int64           `json:"connections"`
	Subscriptions int64           `json:"subscriptions"`
	Delivered     int64           `json:"delivered"`
	Dropped       int64           `json:"dropped"`
	Head          int64           `json:"head"`
	Dispatched    int64           `json:"dispatched"`
	PositionLag   int64           `json:"position_lag"`
	LagSeconds    float64         `json:"tail_lag_seconds"`
	ByResource    []resourceCount `json:"subscriptions_by_resource"`
	// Lagging are the subscriptions most behind: by lag, then queue.
	Lagging      []core.SubscriptionLag `json:"lagging_subscriptions"`
	Closes       []closeCount           `json:"recent_closes"`
	Samples      []sample               `json:"samples"`
	Stats        core.Stats             `json:"stats"`
	IntervalSecs float64                `json:"interval_seconds"`
}

type resourceCount struct {
	Resource string `json:"resource"`
	Count    int64  `json:"count"`
}

type closeCount struct {
	Code  int    `json:"code"`
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// report samples and returns the recorder's state, with the head of e.
func (r *StatusRecorder) report(ctx context.Context, e *core.Engine) statusReport {
	t := r.now()
	rep := statusReport{Now: t, Node: e.Node(), Connections: r.connections.Load(), Delivered: r.delivered.Load(), Dropped: r.dropped.Load(),
		Dispatched: r.dispatched.Load(), Stats: e.Stats(), IntervalSecs: StatusInterval.Seconds()}
	lag, known := 0.0, false
	if head, err := e.Head(ctx); err == nil {
		rep.Head, known = int64(head), true
		rep.PositionLag = max(0, rep.Head-rep.Dispatched)
		if rep.PositionLag > 0 {
			lag = t.Sub(time.Unix(0, r.lastTail.Load())).Seconds()
		}
	}
	rep.LagSeconds = lag
	rep.Lagging = e.LaggingSubscriptions(feed.Position(rep.Head), StatusLaggingSubscriptions)
	roles, err := e.Roles(ctx)
	if err != nil {
		rep.RolesError = err.Error()
	}
	rep.Roles = append([]feed.Role{}, roles...)
	rep.Subscriptions = rep.Stats.Subscriptions
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sampleLocked(t, lag, known)
	for res, n := range r.subs {
		if n > 0 {
			name := res
			if name == "" {
				name = "(unknown)"
			}
			rep.ByResource = append(rep.ByResource, resourceCount{name, n})
		}
	}
	sort.Slice(rep.ByResource, func(i, j int) bool { return rep.ByResource[i].Count > rep.ByResource[j].Count })
	counts := map[protocol.CloseCode]int{}
	for _, c := range r.closes {
		if t.Sub(c.at) <= StatusInterval*StatusSamples {
			counts[c.code]++
		}
	}
	for code, n := range counts {
		rep.Closes = append(rep.Closes, closeCount{int(code), closeName(code), n})
	}
	sort.Slice(rep.Closes, func(i, j int) bool { return rep.Closes[i].Count > rep.Closes[j].Count })
	rep.Samples = append([]sample(nil), r.samples...)
	if rep.ByResource == nil {
		rep.ByResource = []resourceCount{}
	}
	if rep.Closes == nil {
		rep.Closes = []closeCount{}
	}
	return rep
}

func closeName(code protocol.CloseCode) string {
	switch code {
	case protocol.ClosePolicy:
		return "policy"
	case protocol.CloseOverloaded:
		return "overloaded"
	case protocol.CloseDrain:
		return "draining"
	case protocol.CloseIdle:
		return "idle"
	case protocol.CloseVersionSkew:
		return "version skew"
	}
	return strconv.Itoa(int(code))
}

//go:embed status.html
var statusHTML []byte

// statusAllowed checks the method and the status page's policy for r,
// answering the request if it is refused.
func (h *handler) statusAllowed(w http.ResponseWriter, r *http.Request) bool {
	sp := h.o.status
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	p, err := h.o.principal(r)
	if err != nil {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return false
	}
	if sp.policy == nil {
		http.Error(w, "forbidden", http.StatusForbidden)
		return false
	}
	if err := sp.policy(r, p); err != nil {
		status := http.StatusForbidden
		if p.IsAnonymous() {
			status = http.StatusUnauthorized
		}
		http.Error(w, http.StatusText(status), status)
		return false
	}
	return true
}

func (h *handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	sp := h.o.status
	if !h.statusAllowed(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	rep := sp.rec.report(ctx, h.e)
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
		return
	}
	// The page carries its data: it shows it behind whatever
	// authentication let the page itself load (a header a proxy adds, a
	// client certificate), with no request of its own. Its script then
	// asks for ?format=json to stay current, and reloads the page instead
	// where that request is refused.
	data, err := json.Marshal(rep) // escapes <, > and &: safe inside a script element
	if err != nil {
		http.Error(w, "status report: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	page := bytes.Replace(statusHTML, []byte(statusDataMarker), data, 1)
	_, _ = w.Write(page)
}

// statusDataMarker is replaced by the report's JSON in status.html.
const statusDataMarker = "/*TIDE_STATUS_DATA*/null"
