package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// A process may hold at most so many open files (20,000 on the machine the
// figures come from, with no way to raise it), so the idle mode can split
// its connections over several processes of this binary: each extra
// process (`tideload idle-client`) opens its share from source addresses
// of its own (127.0.<round>.2–33), reports "ready" once every connection
// is subscribed and caught up, and holds them until its stdin closes.

// subFleet is one such process.
type subFleet struct{ p *selfProc }

// startSubFleet starts a process holding connections [from, to) to the
// tide server at addr, or to the Centrifugo peer p when p is set, and
// waits until it is ready.
func startSubFleet(ctx context.Context, addr string, cf *cfPeer, from, to, scopes, round int, auth bool) (*subFleet, error) {
	args := []string{"-from", strconv.Itoa(from), "-to", strconv.Itoa(to), "-scopes", strconv.Itoa(scopes),
		"-round", strconv.Itoa(round), "-auth=" + strconv.FormatBool(auth)}
	var env []string
	if cf != nil {
		args = append(args, "-centrifugo-addr", cf.addr)
		env = append(env, "TIDELOAD_CF_SECRET="+string(cf.secret)) // not on the command line
	} else {
		args = append(args, "-addr", addr)
	}
	p, err := spawnSelf("idle-client", env, io.Discard, args...)
	if err != nil {
		return nil, err
	}
	s := &subFleet{p: p}
	select {
	case r := <-p.first:
		if strings.TrimSpace(r.line) != "ready" {
			s.stop()
			return nil, fmt.Errorf("idle-client [%d, %d): %q %v", from, to, r.line, r.err)
		}
		return s, nil
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// stop closes the process's stdin (it closes its connections and exits)
// and waits, killing it after 30 s.
func (s *subFleet) stop() {
	if s == nil {
		return
	}
	_ = s.p.stdin.Close()
	select {
	case <-s.p.done:
	case <-time.After(30 * time.Second):
		_ = s.p.cmd.Process.Kill()
		<-s.p.done
	}
}

// subFleets are the extra processes of one fleet.
type subFleets []*subFleet

func (f subFleets) stop() {
	for _, s := range f {
		s.stop()
	}
}

// startShares starts procs-1 processes for the shares of n connections
// after the first (which the caller opens itself, as [0, first)), and
// returns them with the size of the first share.
func startShares(ctx context.Context, addr string, p *cfPeer, n, procs, scopes, round int, auth bool) (subFleets, int, error) {
	per := (n + procs - 1) / procs
	var subs subFleets
	for k := 1; k < procs && k*per < n; k++ {
		s, err := startSubFleet(ctx, addr, p, k*per, min(n, (k+1)*per), scopes, round+k, auth)
		if err != nil {
			subs.stop()
			return nil, 0, err
		}
		subs = append(subs, s)
	}
	return subs, min(n, per), nil
}

// idleClient is the `idle-client` mode: see startSubFleet.
func idleClient(args []string) error {
	fs := flag.NewFlagSet("idle-client", flag.ExitOnError)
	addr := fs.String("addr", "", "tide server address")
	cfAddr := fs.String("centrifugo-addr", "", "Centrifugo address (its token secret in TIDELOAD_CF_SECRET)")
	from := fs.Int("from", 0, "first connection index")
	to := fs.Int("to", 0, "connection index after the last")
	scopes := fs.Int("scopes", 100, "scopes the connections spread over")
	round := fs.Int("round", 0, "source address block 127.0.<round>.x")
	auth := fs.Bool("auth", false, "tide: principals with claims")
	_ = fs.Parse(args)
	if *to <= *from || *from < 0 || *scopes < 1 || (*addr == "") == (*cfAddr == "") {
		return errors.New("idle-client: need -addr or -centrifugo-addr, 0 ≤ -from < -to, -scopes ≥ 1")
	}
	target := *addr
	if *cfAddr != "" {
		target = *cfAddr
	}
	if err := loopbackOnly(target); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var p *cfPeer
	if *cfAddr != "" {
		p = &cfPeer{addr: *cfAddr, secret: []byte(os.Getenv("TIDELOAD_CF_SECRET"))}
	}
	conns, err := openFleet(ctx, *to-*from, 64, func(ctx context.Context, j int) (*loadConn, error) {
		i := *from + j
		if p != nil {
			return dialCentrifugo(ctx, p, i, dialOpts{scope: scopeName(i % *scopes), readBuf: 512, round: *round})
		}
		return dialLoad(ctx, *addr, i, dialOpts{path: "/tide/ws", tide: true, auth: *auth, scope: scopeName(i % *scopes), readBuf: 512, round: *round})
	})
	if err != nil {
		return err
	}
	defer conns.close()
	if err := waitUntil(ctx, conns, 20*time.Millisecond, "caught-up", func() bool { return conns.caughtUp() == len(conns) }); err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it when done
	return nil
}
