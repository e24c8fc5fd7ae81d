package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// Centrifugo as a peer. tideload never downloads it: -centrifugo names a
// binary installed beforehand (docs/performance.md says how), and without
// one the peer's columns are skipped with a note. The peer runs as a child
// process on loopback with a fresh config in a temporary directory: JWT
// connection tokens signed with a random HMAC secret, channels clients may
// subscribe to, history for recovery, the HTTP API behind a random key.
// It is driven by the same load client as tide (client.go): the same
// dialer, buffers and counters, the frames told apart by their own
// vocabulary (Centrifugo's JSON protocol: one reply or push per line).

// cfPeer is a running Centrifugo child.
type cfPeer struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	secret []byte
	apiKey string
	http   *http.Client
	done   chan struct{}
}

// cfOptions are the peer's channel settings.
type cfOptions struct {
	historySize int // publications kept per channel (0: no history)
	queueMax    int // client.queue_max_size, bytes
}

// centrifugoNote is printed in place of the peer's columns when no binary
// was given.
const centrifugoNote = "Centrifugo peer skipped: no -centrifugo binary (install it with `GOBIN=/tmp/centrifugo-bin go install github.com/centrifugal/centrifugo/v6@v6.9.1` and pass -centrifugo /tmp/centrifugo-bin/centrifugo)"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 at the moment.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCentrifugo writes a config and starts bin with it, waiting until its
// HTTP API answers.
func startCentrifugo(ctx context.Context, bin string, o cfOptions) (*cfPeer, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("centrifugo binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "tideload-centrifugo-")
	if err != nil {
		return nil, err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &cfPeer{dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port), secret: []byte(randHex(32)), apiKey: randHex(16),
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, done: make(chan struct{})}
	ch := map[string]any{"allow_subscribe_for_client": true}
	if o.historySize > 0 {
		ch["history_size"] = o.historySize
		ch["history_ttl"] = "600s"
		ch["allow_recovery"] = true
	}
	client := map[string]any{
		"token":                          map[string]any{"hmac_secret_key": string(p.secret)},
		"allowed_origins":                []string{"*"},
		"recovery_max_publication_limit": max(o.historySize, 300),
	}
	if o.queueMax > 0 {
		client["queue_max_size"] = o.queueMax
	}
	cfg := map[string]any{
		"http_server": map[string]any{"address": "127.0.0.1", "port": port},
		"log":         map[string]any{"level": "error"},
		"client":      client,
		"channel":     map[string]any{"without_namespace": ch},
		"http_api":    map[string]any{"key": p.apiKey},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.cmd = exec.Command(bin, "--config", path)
	p.cmd.Dir = dir
	p.cmd.Stdout = os.Stderr
	p.cmd.Stderr = os.Stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.api(ctx, "info", []byte(`{}`), nil)
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			p.stop()
			return nil, fmt.Errorf("centrifugo exited at start (last API error: %v)", err)
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("centrifugo did not answer within 30 s: %v", err)
		}
	}
}

func (p *cfPeer) pid() int           { return p.cmd.Process.Pid }
func (p *cfPeer) cpu() time.Duration { return procCPU(p.pid()) }

// rss returns the peer's resident set size in bytes.
func (p *cfPeer) rss() uint64 { return procRSS(p.pid()) }

// stop ends the peer (SIGTERM, then SIGKILL after 10 s) and removes its
// directory. Safe to call more than once.
func (p *cfPeer) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	os.RemoveAll(p.dir)
}

// token returns an HS256 connection JWT for user.
func (p *cfPeer) token(user string) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"sub": user, "exp": time.Now().Add(24 * time.Hour).Unix()})
	msg := head + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, p.secret)
	m.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(m.Sum(nil))
}

// api calls a method of the HTTP API; with out set, it decodes the
// response's result into it.
func (p *cfPeer) api(ctx context.Context, method string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/api/"+method, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", p.apiKey)
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("centrifugo api %s: %s: %s", method, resp.Status, strings.TrimSpace(string(b)))
	}
	var r struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("centrifugo api %s: %v: %q", method, err, b)
	}
	if r.Error != nil {
		return fmt.Errorf("centrifugo api %s: error %d: %s", method, r.Error.Code, r.Error.Message)
	}
	if out != nil && len(r.Result) > 0 {
		return json.Unmarshal(r.Result, out)
	}
	return nil
}

// cfPublishBody is the body of a publish call: data is a JSON object.
func cfPublishBody(dst []byte, channel string, data []byte) []byte {
	dst = append(dst, `{"channel":`...)
	dst = strconv.AppendQuote(dst, channel)
	dst = append(dst, `,"data":`...)
	dst = append(dst, data...)
	return append(dst, '}')
}

// cfBatchBody is the body of a batch call publishing every data to channel.
func cfBatchBody(dst []byte, channel string, datas [][]byte) []byte {
	dst = append(dst, `{"commands":[`...)
	for i, d := range datas {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"publish":`...)
		dst = cfPublishBody(dst, channel, d)
		dst = append(dst, '}')
	}
	return append(dst, `]}`...)
}

// cfRow is a publication's data: the same fields as tide's item row.
func cfRow(dst []byte, key int64, scope, body string, sent int64) []byte {
	dst = append(dst, `{"id":"`...)
	dst = strconv.AppendInt(dst, key, 10)
	dst = append(dst, `","key":"`...)
	dst = strconv.AppendInt(dst, key, 10)
	dst = append(dst, `","scope":`...)
	dst = strconv.AppendQuote(dst, scope)
	dst = append(dst, `,"tenant":"`+tenant+`","body":`...)
	dst = strconv.AppendQuote(dst, body)
	dst = append(dst, `,"sent_ns":`...)
	dst = strconv.AppendInt(dst, sent, 10)
	return append(dst, '}')
}

// Centrifugo frames: every reply and push is a JSON object on its own line.
var (
	cfPatPub       = []byte(`{"data":`) // one per publication, pushed or recovered
	cfPatSubscribe = []byte(`{"id":2,"subscribe":`)
	cfPatError     = []byte(`"error":{`)
	cfPatOffset    = []byte(`"offset":`)
	cfPatEpoch     = []byte(`"epoch":"`)
)

// dialCentrifugo opens connection i to the peer: connect with a JWT, then
// subscribe to o.scope (with recovery from o.cfOffset in o.cfEpoch when
// o.cursor is set). The subscribe reply counts as caught-up.
func dialCentrifugo(ctx context.Context, p *cfPeer, i int, o dialOpts) (*loadConn, error) {
	d := websocket.Dialer{
		NetDialContext:   (&net.Dialer{LocalAddr: sourceAddr(o.round, i), Timeout: 30 * time.Second}).DialContext,
		HandshakeTimeout: 30 * time.Second,
		ReadBufferSize:   1024,
		WriteBufferSize:  512,
	}
	ws, _, err := d.DialContext(ctx, "ws://"+p.addr+"/connection/websocket", nil)
	if err != nil {
		return nil, err
	}
	c := &loadConn{i: i, ws: ws, done: make(chan struct{})}
	c.caughtAt.Store(-1)
	if o.track > 0 {
		c.recv = make([]int64, o.track)
	}
	conn := []byte(`{"id":1,"connect":{"token":"` + p.token("u"+strconv.Itoa(i)) + `"}}`)
	sub := []byte(`{"id":2,"subscribe":{"channel":`)
	sub = strconv.AppendQuote(sub, o.scope)
	if o.cursor != "" { // "<offset>:<epoch>"
		off, epoch, _ := strings.Cut(o.cursor, ":")
		sub = append(sub, `,"recoverable":true,"recover":true,"offset":`...)
		sub = append(sub, off...)
		sub = append(sub, `,"epoch":`...)
		sub = strconv.AppendQuote(sub, epoch)
	}
	sub = append(sub, `}}`...)
	_ = ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if err := ws.WriteMessage(websocket.TextMessage, conn); err != nil {
		ws.Close()
		return nil, err
	}
	if err := ws.WriteMessage(websocket.TextMessage, sub); err != nil {
		ws.Close()
		return nil, err
	}
	_ = ws.SetWriteDeadline(time.Time{})
	go c.readLoopCF(max(o.readBuf, 512))
	return c, nil
}

// readLoopCF is readLoop for Centrifugo's protocol. Each message is read
// whole into a reused buffer (a frame may hold several lines: replies,
// pushes, pings); publications are counted by their data field, keys
// parsed for latency, and a ping ({}) answered with a pong ({}), the only
// write the reader makes once the subscription is sent.
func (c *loadConn) readLoopCF(bufSize int) {
	defer close(c.done)
	whole := make([]byte, 0, bufSize)
	for {
		_, r, err := c.ws.NextReader()
		if err != nil {
			c.readErr = err
			return
		}
		now := clock()
		var err2 error
		if whole, err2 = readRest(r, whole[:0]); err2 != nil {
			c.readErr = err2
			return
		}
		msg := whole
		if cfHasPing(msg) { // a ping may share a frame with pushes
			if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`{}`)); err != nil {
				c.readErr = err
				return
			}
			if len(bytes.TrimSpace(msg)) == 2 {
				continue
			}
		}
		if i := bytes.Index(msg, cfPatError); i >= 0 && i < 64 {
			s := string(msg[:min(len(msg), 512)])
			c.badMsg.Store(&s)
			c.bad.Add(1)
			continue
		}
		entries := bytes.Count(msg, cfPatPub)
		if entries > 0 {
			if c.recv != nil {
				c.noteKeys(msg, now)
			}
			c.entries.Add(int64(entries))
			c.frames.Add(1)
			c.bytes.Add(int64(len(msg)))
		}
		if i := bytes.Index(msg, cfPatSubscribe); i >= 0 {
			if os.Getenv("TIDELOAD_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "centrifugo subscribe reply: %.400s\n", msg)
			}
			c.cursor = cfStreamPos(c.cursor[:0], msg[i:])
			if c.caught.Add(1) == 1 {
				c.replayed.Store(c.entries.Load())
				c.caughtAt.Store(now)
			}
		}
	}
}

// cfStreamPos returns "<offset>:<epoch>" of a subscribe reply (the
// stream position a later subscription recovers from), appended to dst.
// The reply's own offset and epoch are its top-level fields, which
// Centrifugo writes after the publications.
func cfStreamPos(dst, reply []byte) []byte {
	if j := bytes.IndexByte(reply, '\n'); j >= 0 {
		reply = reply[:j]
	}
	off := "0"
	if i := bytes.LastIndex(reply, cfPatOffset); i >= 0 {
		v := reply[i+len(cfPatOffset):]
		k := 0
		for k < len(v) && v[k] >= '0' && v[k] <= '9' {
			k++
		}
		if k > 0 {
			off = string(v[:k])
		}
	}
	epoch := ""
	if i := bytes.LastIndex(reply, cfPatEpoch); i >= 0 {
		v := reply[i+len(cfPatEpoch):]
		if k := bytes.IndexByte(v, '"'); k >= 0 {
			epoch = string(v[:k])
		}
	}
	dst = append(dst, off...)
	dst = append(dst, ':')
	return append(dst, epoch...)
}

// procRSS returns a process's resident set size from /proc/<pid>/status.
func procRSS(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// latencyCentrifugo is the peer's latency round: the same subscribers,
// rate and rows as latencyTide, published one at a time through the HTTP
// API (the publish call returning stands for tide's COMMIT returning).
func latencyCentrifugo(ctx context.Context, bin string, o latencyRun) (latencyResult, error) {
	var res latencyResult
	p, err := startCentrifugo(ctx, bin, cfOptions{})
	if err != nil {
		return res, err
	}
	defer p.stop()
	total := o.total
	conns, err := openFleet(ctx, o.n, o.conc, func(ctx context.Context, i int) (*loadConn, error) {
		return dialCentrifugo(ctx, p, i, dialOpts{scope: scopeName(i % o.scopes), readBuf: 4096, track: total, round: 1})
	})
	if err != nil {
		return res, err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 10*time.Millisecond, "subscribed", func() bool { return conns.caughtUp() == o.n }); err != nil {
		return res, err
	}
	expected := expectedDeliveries(o.n, o.scopes, total)
	body := strings.Repeat("lorem ipsum dolor sit amet ", o.bodyLen/27+1)[:o.bodyLen]
	reqs := make([][]byte, o.writers)
	write := func(ctx context.Context, w, i int, sent int64) error {
		row := cfRow(nil, int64(i), scopeName(i%o.scopes), body, sent)
		reqs[w] = cfPublishBody(reqs[w][:0], scopeName(i%o.scopes), row)
		return p.api(ctx, "publish", reqs[w], nil)
	}
	s1 := takeSample(p)
	sent, done, took, err := paceWrites(ctx, o, write, conns.failure)
	if err != nil {
		return res, err
	}
	s2 := takeSample(p)
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	derr := waitUntil(dctx, conns, 10*time.Millisecond, "every delivery", func() bool { return conns.entries() >= expected })
	dcancel()
	if derr != nil && ctx.Err() != nil {
		return res, derr
	}
	lat, upper, call, early, missing, dups := arrivals(conns, o.scopes, total, expected, sent, done)
	u := s1.to(s2)
	res = latencyResult{Server: "centrifugo", N: o.n, Rate: o.rate, Duration: o.duration.Seconds(), Scopes: o.scopes,
		Commits: total, CommitsPerS: float64(total) / took.Seconds(),
		Latency: quantilesOf(lat), FromSend: quantilesOf(upper), CommitRTT: quantilesOf(call),
		Deliveries: float64(len(lat)) / u.Seconds, Expected: expected, Missing: missing, Early: early, Duplicates: dups, Usage: u}
	return res, nil
}

// cfReplay is the peer's side of the replay mode: a channel whose history
// holds the backlog, and the stream position just before it.
type cfReplay struct {
	p     *cfPeer
	rows  int
	start string // "<offset>:<epoch>" before the backlog
}

func newCFReplay(ctx context.Context, bin string, rows int, body string) (*cfReplay, error) {
	p, err := startCentrifugo(ctx, bin, cfOptions{historySize: rows + 16, queueMax: 1 << 30})
	if err != nil {
		return nil, err
	}
	r := &cfReplay{p: p, rows: rows}
	fail := func(err error) (*cfReplay, error) { p.stop(); return nil, err }
	// A first publication creates the stream; the backlog follows it.
	if err := p.api(ctx, "publish", cfPublishBody(nil, "s0", cfRow(nil, 0, "s0", body, 0)), nil); err != nil {
		return fail(err)
	}
	var pos struct {
		Offset uint64 `json:"offset"`
		Epoch  string `json:"epoch"`
	}
	if err := p.api(ctx, "history", []byte(`{"channel":"s0","limit":0}`), &pos); err != nil {
		return fail(err)
	}
	r.start = strconv.FormatUint(pos.Offset, 10) + ":" + pos.Epoch
	datas := make([][]byte, 0, 1000)
	var req []byte
	for i := 1; i <= rows; {
		datas = datas[:0]
		for ; i <= rows && len(datas) < 1000; i++ {
			datas = append(datas, cfRow(nil, int64(i), "s0", body, int64(i)))
		}
		req = cfBatchBody(req[:0], "s0", datas)
		if err := p.api(ctx, "batch", req, nil); err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// run recovers the backlog once and returns rows/s and the CPU spent.
func (r *cfReplay) run(ctx context.Context, run int) (float64, usage, error) {
	s1 := takeSample(r.p)
	start := clock()
	c, err := dialCentrifugo(ctx, r.p, run, dialOpts{scope: "s0", cursor: r.start, readBuf: 64 << 10, round: 2})
	if err != nil {
		return 0, usage{}, err
	}
	err = waitUntil(ctx, fleet{c}, time.Millisecond, "subscribe reply", func() bool { return c.caught.Load() > 0 })
	s2 := takeSample(r.p)
	c.close()
	if err != nil {
		return 0, usage{}, err
	}
	if got := c.replayed.Load(); got != int64(r.rows) {
		return 0, usage{}, fmt.Errorf("recovered %d publications, want %d", got, r.rows)
	}
	return float64(r.rows) / (float64(c.caughtAt.Load()-start) / 1e9), s1.to(s2), nil
}

// cfHasPing reports whether a frame holds a ping: a line that is "{}".
func cfHasPing(msg []byte) bool {
	for len(msg) > 0 {
		line := msg
		if i := bytes.IndexByte(msg, '\n'); i >= 0 {
			line, msg = msg[:i], msg[i+1:]
		} else {
			msg = nil
		}
		if len(line) == 2 && line[0] == '{' && line[1] == '}' {
			return true
		}
	}
	return false
}
