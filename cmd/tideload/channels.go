package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tidesync/tide/authz"
	"github.com/tidesync/tide/core"
)

// The channels mode measures app channel fan-out: N subscribers of one
// topic receive messages published as fast as they take them. tide's
// messages are published on the server with Engine.Publish (the server
// child's POST /publish takes a batch and publishes each message); the
// Centrifugo peer's through its HTTP API, one batch call of publish
// commands per batch. Both are read by the same load client (client.go),
// every message key tracked per subscriber, so a message lost or
// delivered twice is counted, and the latency of every delivery is known.

// Topics of the channels mode: tide's channel pattern is "room:{id}";
// Centrifugo reads ':' as a namespace separator, so its channel has none.
const (
	chanTopicTide = "room:1"
	chanTopicCF   = "room1"
)

// registerLoadChannel declares the server child's channel (any JSON, any
// subscriber, no presence, server publishes only) and its POST /publish
// endpoint: {"topic": "...", "data": [message, ...]}, each message
// published with Engine.Publish in order.
func registerLoadChannel(engine *core.Engine, mux *http.ServeMux) error {
	err := core.RegisterChannel(engine, core.Channel[json.RawMessage]{Pattern: "room:{id}", Subscribe: authz.Allow})
	if err != nil {
		return err
	}
	mux.HandleFunc("POST /publish", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Topic string            `json:"topic"`
			Data  []json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, d := range req.Data {
			if err := engine.Publish(r.Context(), req.Topic, d); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
	})
	return nil
}

// channelsOpts are the channels mode's flags.
type channelsOpts struct {
	n, messages, batch, window, body, rounds, conc int
	cfBin                                          string
	duration                                       time.Duration
}

// parseChannelsFlags parses the mode's flags and checks their bounds.
func parseChannelsFlags(args []string, cm *common) (channelsOpts, *flag.FlagSet, error) {
	fs := flag.NewFlagSet("channels", flag.ContinueOnError)
	cm.register(fs, 10*time.Minute)
	var o channelsOpts
	fs.IntVar(&o.n, "n", 1000, "subscribers of the topic (at most 20000)")
	fs.IntVar(&o.messages, "messages", 5000, "messages published per round (at most 100000; every subscriber tracks every key, n × messages × 8 bytes)")
	fs.IntVar(&o.batch, "batch", 10, "messages per publish call (tide: POST /publish → Engine.Publish each; Centrifugo: one HTTP API batch call)")
	fs.IntVar(&o.window, "inflight", 100, "messages the publisher may be ahead of what the subscribers received (in all)")
	fs.IntVar(&o.body, "body", 64, "bytes of each message's body field")
	fs.IntVar(&o.rounds, "rounds", 3, "tide + Centrifugo pairs, one after the other; the round with the median ratio (or median tide figure) is the result")
	fs.IntVar(&o.conc, "conc", 64, "connections opened at a time")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "stop publishing a round after this long even if fewer than -messages were published")
	fs.StringVar(&o.cfBin, "centrifugo", "", "Centrifugo binary: measure it as a peer in every round, after tide")
	if err := fs.Parse(args); err != nil {
		return o, fs, err
	}
	if fs.NArg() > 0 {
		return o, fs, fmt.Errorf("channels: unexpected arguments %q", fs.Args())
	}
	if o.n < 1 || o.n > 20000 || o.messages < 1 || o.messages > 100000 || o.batch < 1 || o.batch > 1000 ||
		o.window < o.batch || o.body < 0 || o.body > 2048 || o.rounds < 1 || o.rounds > 10 || o.conc < 1 || o.duration <= 0 ||
		int64(o.n)*int64(o.messages) > 200_000_000 {
		return o, fs, errors.New("channels: need 1 ≤ -n ≤ 20000, 1 ≤ -messages ≤ 100000, n × messages ≤ 2e8, 1 ≤ -batch ≤ 1000, -inflight ≥ -batch, 0 ≤ -body ≤ 2048, 1 ≤ -rounds ≤ 10, -conc ≥ 1, -duration > 0")
	}
	return o, fs, nil
}

// channelFigures are one round's figures of one server.
type channelFigures struct {
	MessagesPS   float64   `json:"messages_per_s"`
	DeliveriesPS float64   `json:"deliveries_per_s"`
	FromSend     quantiles `json:"send_to_delivery"`    // from the publish call starting
	Latency      quantiles `json:"publish_to_delivery"` // from the publish call returning (0 when the delivery came first)
	PublishCall  quantiles `json:"publish_call"`
	Messages     int       `json:"messages"`
	Expected     int64     `json:"deliveries_expected"`
	Missing      int64     `json:"deliveries_missing"`
	Duplicates   int64     `json:"duplicates"`
	Usage        usage     `json:"usage"`
	ServerRSS    uint64    `json:"server_rss,omitempty"`
}

type channelRound struct {
	Tide       channelFigures  `json:"tide"`
	Centrifugo *channelFigures `json:"centrifugo,omitempty"`
	Ratio      float64         `json:"tide_over_centrifugo,omitempty"` // deliveries/s
}

type channelsResult struct {
	Env      env    `json:"env"`
	N        int    `json:"n"`
	Messages int    `json:"messages"`
	Batch    int    `json:"batch"`
	Inflight int    `json:"inflight"`
	Body     int    `json:"body_bytes"`
	Note     string `json:"note,omitempty"`
	// The median round's figures.
	Tide             channelFigures  `json:"tide"`
	Centrifugo       *channelFigures `json:"centrifugo,omitempty"`
	Ratio            float64         `json:"tide_over_centrifugo,omitempty"`
	CentrifugoErrors []string        `json:"centrifugo_errors,omitempty"`
	Rounds           []channelRound  `json:"rounds"`
}

// pickMedian sets the result's figures from the round with the median
// ratio, or the median tide deliveries/s when no round has a peer.
func (r *channelsResult) pickMedian() {
	if len(r.Rounds) == 0 {
		return
	}
	peer := slices.ContainsFunc(r.Rounds, func(rd channelRound) bool { return rd.Centrifugo != nil })
	by := slices.Clone(r.Rounds)
	if peer {
		by = slices.DeleteFunc(by, func(rd channelRound) bool { return rd.Centrifugo == nil })
	}
	slices.SortFunc(by, func(a, b channelRound) int {
		if peer {
			return cmp.Compare(a.Ratio, b.Ratio)
		}
		return cmp.Compare(a.Tide.DeliveriesPS, b.Tide.DeliveriesPS)
	})
	mid := by[(len(by)-1)/2]
	r.Tide, r.Centrifugo, r.Ratio = mid.Tide, mid.Centrifugo, mid.Ratio
}

func (r channelsResult) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tideload channels: %d subscribers of one topic, up to %d messages per round (body %d B) in publish calls of %d, at most %d in flight\n",
		r.N, r.Messages, r.Body, r.Batch, r.Inflight)
	fmt.Fprintf(&b, "  tide: Engine.Publish on the server (POST /publish), no presence; Centrifugo: HTTP API batch publish, memory engine\n")
	fmt.Fprintf(&b, "  (%s; %s)\n", r.Env, r.Env.Flags)
	fmt.Fprintf(&b, "  %-16s %8s %12s %14s %9s %9s %9s %8s %5s %10s %10s %10s\n", "", "messages", "messages/s", "deliveries/s", "p50 ms", "p99 ms", "max ms", "missing", "dups", "server CPU", "load CPU", "other CPU")
	row := func(name string, f channelFigures) {
		fmt.Fprintf(&b, "  %-16s %8d %12s %14s %9.2f %9.2f %9.2f %8d %5d %8.2f s %8.2f s %8.2f s\n", name, f.Messages, commas(f.MessagesPS), commas(f.DeliveriesPS),
			f.FromSend.P50, f.FromSend.P99, f.FromSend.Max, f.Missing, f.Duplicates, f.Usage.ServerCPU, f.Usage.LoadCPU, f.Usage.OtherCPU)
	}
	if len(r.Rounds) > 1 {
		for i, rd := range r.Rounds {
			row(fmt.Sprintf("tide #%d", i+1), rd.Tide)
			if rd.Centrifugo != nil {
				row(fmt.Sprintf("centrifugo #%d", i+1), *rd.Centrifugo)
				fmt.Fprintf(&b, "  %-16s %12s %14.2f\n", fmt.Sprintf("tide/cf #%d", i+1), "", rd.Ratio)
			}
		}
		fmt.Fprintf(&b, "  median round:\n")
	}
	row("tide", r.Tide)
	if r.Centrifugo != nil {
		row("centrifugo", *r.Centrifugo)
		fmt.Fprintf(&b, "  tide/centrifugo (deliveries/s): %.2f\n", r.Ratio)
	}
	for _, e := range r.CentrifugoErrors {
		fmt.Fprintf(&b, "  centrifugo failed %s\n", e)
	}
	if r.Note != "" {
		fmt.Fprintf(&b, "  %s\n", r.Note)
	}
	fmt.Fprintf(&b, "  latency: from the publish call starting (the batch's messages stamped then) to each delivery, by the clock of this process\n")
	fmt.Fprintf(&b, "  tide publish call (%d messages): %s\n", r.Batch, r.Tide.PublishCall)
	if r.Centrifugo != nil {
		fmt.Fprintf(&b, "  centrifugo publish call:        %s\n", r.Centrifugo.PublishCall)
	}
	return b.String()
}

// channels is the channels mode.
func channels(args []string) error {
	var cm common
	o, fs, err := parseChannelsFlags(args, &cm)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := cm.context()
	defer cancel()
	res := channelsResult{Env: newEnv(fs), N: o.n, Messages: o.messages, Batch: o.batch, Inflight: o.window, Body: o.body}
	if o.cfBin == "" {
		res.Note = centrifugoNote
	}
	body := strings.Repeat("lorem ipsum dolor sit amet ", o.body/27+1)[:o.body]
	stopLoadProf, err := cm.profileLoad()
	if err != nil {
		return err
	}
	defer stopLoadProf()
	for round := range o.rounds {
		t, err := channelsTide(ctx, o, body)
		if err != nil {
			return fmt.Errorf("tide round %d: %w", round+1, err)
		}
		rd := channelRound{Tide: t}
		if o.cfBin != "" {
			cf, err := channelsCentrifugo(ctx, o, body)
			switch {
			case err != nil && ctx.Err() != nil:
				return fmt.Errorf("centrifugo: %w", err)
			case err != nil:
				res.CentrifugoErrors = append(res.CentrifugoErrors, fmt.Sprintf("round %d: %v", round+1, err))
			default:
				rd.Centrifugo, rd.Ratio = &cf, ratio(t.DeliveriesPS, cf.DeliveriesPS)
			}
		}
		res.Rounds = append(res.Rounds, rd)
	}
	stopLoadProf()
	res.pickMedian()
	return emit(cm.json, res, res.text())
}

func channelsTide(ctx context.Context, o channelsOpts, body string) (channelFigures, error) {
	var f channelFigures
	srv, err := startChild(ctx, "serve")
	if err != nil {
		return f, err
	}
	defer srv.stop()
	conns, err := openFleet(ctx, o.n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, srv.addr, i, dialOpts{path: "/tide/ws", tide: true, topic: chanTopicTide, readBuf: 4096, track: o.messages})
	})
	if err != nil {
		return f, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "topic-subscribed", func() bool { return conns.caughtUp() == o.n }); err != nil {
		return f, err
	}
	var req []byte
	post := func(ctx context.Context, datas [][]byte) error {
		req = append(req[:0], `{"topic":"`+chanTopicTide+`","data":[`...)
		for i, d := range datas {
			if i > 0 {
				req = append(req, ',')
			}
			req = append(req, d...)
		}
		req = append(req, `]}`...)
		return srv.doJSON(ctx, "POST", "/publish", strings.NewReader(string(req)), nil)
	}
	f, err = measureChannel(ctx, o, body, conns, srv, post)
	if st, serr := srv.stats(ctx, true); serr == nil {
		f.ServerRSS = st.RSS
	}
	return f, err
}

func channelsCentrifugo(ctx context.Context, o channelsOpts, body string) (channelFigures, error) {
	var f channelFigures
	p, err := startCentrifugo(ctx, o.cfBin, cfOptions{queueMax: 64 << 20})
	if err != nil {
		return f, err
	}
	defer p.stop()
	conns, err := openFleet(ctx, o.n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialCentrifugo(ctx, p, i, dialOpts{scope: chanTopicCF, readBuf: 4096, track: o.messages, round: 1})
	})
	if err != nil {
		return f, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "subscribed", func() bool { return conns.caughtUp() == o.n }); err != nil {
		return f, err
	}
	var req []byte
	post := func(ctx context.Context, datas [][]byte) error {
		req = cfBatchBody(req[:0], chanTopicCF, datas)
		return p.api(ctx, "batch", req, nil)
	}
	f, err = measureChannel(ctx, o, body, conns, p, post)
	f.ServerRSS = p.rss()
	return f, err
}

// measureChannel publishes up to o.messages messages (keys 0, 1, ...) in
// calls of o.batch for at most o.duration, the next call as soon as the
// subscribers have received all but o.window messages of what was
// published (in all), then waits for every delivery (60 s at most). Rates
// are over the span from the first publish call to the last delivery;
// every subscriber must have received every key once.
func measureChannel(ctx context.Context, o channelsOpts, body string, conns fleet, srv cpuReader, post func(ctx context.Context, datas [][]byte) error) (channelFigures, error) {
	var f channelFigures
	sent := make([]int64, o.messages)
	done := make([]int64, o.messages)
	datas := make([][]byte, 0, o.batch)
	n := int64(o.n)
	s1 := takeSample(srv)
	first := clock()
	k := 0
	for k < o.messages && clock()-first < int64(o.duration) {
		for need := int64(k-o.window+o.batch) * n; need > 0 && conns.entries() < need; {
			if err := conns.failure(); err != nil {
				return f, err
			}
			select {
			case <-ctx.Done():
				return f, context.Cause(ctx)
			case <-time.After(100 * time.Microsecond):
			}
		}
		datas = datas[:0]
		now := clock()
		from := k
		for ; k < o.messages && len(datas) < o.batch; k++ {
			datas = append(datas, cfRow(nil, int64(k), "room", body, now))
			sent[k] = now
		}
		if err := post(ctx, datas); err != nil {
			if ctx.Err() != nil {
				return f, context.Cause(ctx)
			}
			return f, fmt.Errorf("publish: %w", err)
		}
		end := clock()
		for j := from; j < k; j++ {
			done[j] = end
		}
	}
	total := k
	expected := n * int64(total)
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	derr := waitUntil(dctx, conns, 2*time.Millisecond, "every delivery", func() bool { return conns.entries() >= expected })
	dcancel()
	s2 := takeSample(srv)
	if derr != nil && ctx.Err() != nil {
		return f, derr
	}
	lat, upper, call, _, missing, dups := arrivals(conns, 1, total, expected, sent, done)
	var last int64
	for _, c := range conns {
		for _, r := range c.recv {
			last = max(last, r)
		}
	}
	span := float64(last-first) / 1e9
	f = channelFigures{
		MessagesPS:   ratio(float64(total), span),
		DeliveriesPS: ratio(float64(len(lat)), span),
		FromSend:     quantilesOf(upper),
		Latency:      quantilesOf(lat),
		PublishCall:  quantilesOf(call),
		Messages:     total,
		Expected:     expected,
		Missing:      missing,
		Duplicates:   dups,
		Usage:        s1.to(s2),
	}
	if derr == nil && (missing > 0 || dups > 0) {
		derr = errors.New("deliveries counted but keys missing or duplicated")
	}
	if derr != nil {
		return f, fmt.Errorf("%v (%d of %d delivered, %d duplicates)", derr, len(lat), expected, dups)
	}
	return f, nil
}
