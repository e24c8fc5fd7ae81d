package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidesync/tide/core"
	"github.com/tidesync/tide/middleware"
)

func TestParseChannelsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		want func(channelsOpts) bool
	}{
		{nil, true, func(o channelsOpts) bool {
			return o.n == 1000 && o.messages == 5000 && o.batch == 10 && o.window == 100 && o.rounds == 3 && o.cfBin == "" && o.duration == 10*time.Second
		}},
		{[]string{"-n", "20", "-rounds", "2", "-centrifugo", "/bin/cf", "-duration", "3s"}, true, func(o channelsOpts) bool {
			return o.n == 20 && o.rounds == 2 && o.cfBin == "/bin/cf" && o.duration == 3*time.Second
		}},
		{[]string{"-n", "0"}, false, nil},
		{[]string{"-n", "20001"}, false, nil},
		{[]string{"-messages", "0"}, false, nil},
		{[]string{"-messages", "100001"}, false, nil},
		{[]string{"-n", "20000", "-messages", "100000"}, false, nil}, // n × messages too large
		{[]string{"-batch", "0"}, false, nil},
		{[]string{"-batch", "50", "-inflight", "49"}, false, nil},
		{[]string{"-body", "-1"}, false, nil},
		{[]string{"-rounds", "11"}, false, nil},
		{[]string{"-duration", "0s"}, false, nil},
		{[]string{"-conc", "0"}, false, nil},
		{[]string{"-n", "x"}, false, nil},
		{[]string{"extra"}, false, nil},
	} {
		var cm common
		o, _, err := parseChannelsFlags(tc.args, &cm)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok=%v", tc.args, err, tc.ok)
			continue
		}
		if tc.ok && !tc.want(o) {
			t.Errorf("%q: got %+v", tc.args, o)
		}
	}
}

func TestChannelsMedianAndReport(t *testing.T) {
	fig := func(d float64) channelFigures { return channelFigures{DeliveriesPS: d, Messages: 10} }
	cf := func(d float64) *channelFigures { f := fig(d); return &f }

	// Without a peer: the median tide figure, and the note.
	r := channelsResult{N: 5, Note: centrifugoNote, Rounds: []channelRound{{Tide: fig(30)}, {Tide: fig(10)}, {Tide: fig(20)}}}
	r.pickMedian()
	if r.Tide.DeliveriesPS != 20 || r.Centrifugo != nil {
		t.Fatalf("median without peer: %+v", r.Tide)
	}
	text := r.text()
	if !strings.Contains(text, "Centrifugo peer skipped") || strings.Contains(text, "tide/centrifugo") {
		t.Fatalf("report without peer:\n%s", text)
	}

	// With a peer: the round with the median ratio; a failed peer round
	// does not count.
	r = channelsResult{N: 5, Rounds: []channelRound{
		{Tide: fig(10), Centrifugo: cf(100), Ratio: 0.1},
		{Tide: fig(50), Centrifugo: cf(100), Ratio: 0.5},
		{Tide: fig(99)},
		{Tide: fig(30), Centrifugo: cf(100), Ratio: 0.3},
	}}
	r.pickMedian()
	if r.Ratio != 0.3 || r.Tide.DeliveriesPS != 30 || r.Centrifugo == nil {
		t.Fatalf("median with peer: ratio %v tide %v", r.Ratio, r.Tide.DeliveriesPS)
	}
	text = r.text()
	for _, want := range []string{"tide/centrifugo (deliveries/s): 0.30", "tide #3", "centrifugo #4", "median round"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

func TestFrameKindChannels(t *testing.T) {
	for frame, want := range map[string]int{
		`{"v":1,"type":"message","topic":"room:1","data":{"key":"3"}}`: kindMessage,
		`{"v":1,"type":"topic-subscribed","topic":"room:1"}`:           kindCaughtUp,
		`{"v":1,"type":"presence","topic":"room:1","members":[]}`:      kindOther,
		`{"v":1,"type":"caught-up","id":"1","cursor":"1.x.2"}`:         kindCaughtUp,
	} {
		if got := frameKind([]byte(frame)); got != want {
			t.Errorf("%s: kind %d, want %d", frame, got, want)
		}
	}
}

// TestMeasureChannelTide runs the tide side of the mode in process: the
// server child's channel and publish endpoint, a few load connections,
// every key delivered once to each.
func TestMeasureChannelTide(t *testing.T) {
	engine, err := core.New(core.Config{IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	if err := registerLoadChannel(engine, mux); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(middleware.Middleware(engine)(mux))
	defer srv.Close()
	defer func() { _ = engine.Shutdown(context.Background()) }()
	addr := strings.TrimPrefix(srv.URL, "http://")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := channelsOpts{n: 4, messages: 57, batch: 5, window: 10, body: 16, duration: time.Minute}
	conns, err := openFleet(ctx, o.n, 4, func(ctx context.Context, i int) (*loadConn, error) {
		return dialLoad(ctx, addr, i, dialOpts{path: "/tide/ws", tide: true, topic: chanTopicTide, readBuf: 512, track: o.messages})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, time.Millisecond, "topic-subscribed", func() bool { return conns.caughtUp() == o.n }); err != nil {
		t.Fatal(err)
	}
	post := func(ctx context.Context, datas [][]byte) error {
		body := `{"topic":"` + chanTopicTide + `","data":[` + string(bytes.Join(datas, []byte(","))) + `]}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/publish", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("publish: %s", resp.Status)
		}
		return nil
	}
	f, err := measureChannel(ctx, o, strings.Repeat("x", o.body), conns, nil, post)
	if err != nil {
		t.Fatal(err)
	}
	if f.Messages != o.messages || f.Expected != int64(o.n*o.messages) || f.Missing != 0 || f.Duplicates != 0 ||
		f.FromSend.N != o.n*o.messages || conns.entries() != f.Expected {
		t.Fatalf("figures %+v, %d entries counted", f, conns.entries())
	}
}
