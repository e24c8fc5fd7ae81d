package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nodeProc is one app node process: this binary re-executed as
// `tidefault node`. It is stopped by kill -9 (the fault) or by closing its
// stdin (the end of the run); the kernel kills it if the run dies
// (Pdeathsig).
type nodeProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	done  chan struct{} // closed when the process has exited
}

// nodeSet is the run's app nodes. Slot i holds node i's current process,
// or nil while it is down.
type nodeSet struct {
	args    []string // node flags, without -name
	logDir  string
	mu      sync.Mutex
	procs   []*nodeProc
	starts  []int
	restart sync.WaitGroup // node restarts in flight
	http    *http.Client
}

func newNodeSet(n int, logDir string, args []string) *nodeSet {
	return &nodeSet{args: args, logDir: logDir, procs: make([]*nodeProc, n), starts: make([]int, n),
		http: &http.Client{Timeout: 2 * time.Second}}
}

// start starts node i and waits for it to listen (at most a minute).
func (s *nodeSet) start(ctx context.Context, i int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.starts[i]++
	gen := s.starts[i]
	s.mu.Unlock()
	logf, err := os.OpenFile(fmt.Sprintf("%s/node-%d.log", s.logDir, i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "--- start %d of node %d at %s\n", gen, i, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(exe, append([]string{"node", "-name", fmt.Sprintf("n%d", i)}, s.args...)...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &nodeProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, br)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "listening ") {
			p.kill()
			return fmt.Errorf("node %d did not start (see %s/node-%d.log)", i, s.logDir, i)
		}
		p.addr = strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	case <-t.C:
		p.kill()
		return fmt.Errorf("node %d did not listen within a minute", i)
	}
	s.mu.Lock()
	s.procs[i] = p
	s.mu.Unlock()
	return nil
}

// startRetry starts node i, retrying while a service it needs is
// restarting, for at most two minutes.
func (s *nodeSet) startRetry(ctx context.Context, i int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := s.start(ctx, i)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// kill9 kills node i with SIGKILL and waits for it to exit; false if it
// was down.
func (s *nodeSet) kill9(i int) bool {
	s.mu.Lock()
	p := s.procs[i]
	s.procs[i] = nil
	s.mu.Unlock()
	if p == nil {
		return false
	}
	p.kill()
	return true
}

func (p *nodeProc) kill() {
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stopAll stops every node: stdin closed (a graceful shutdown), then
// SIGKILL for one that has not exited within 10 s.
func (s *nodeSet) stopAll() {
	s.restart.Wait()
	s.mu.Lock()
	procs := s.procs
	s.procs = make([]*nodeProc, len(procs))
	s.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = p.stdin.Close()
		}
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
		}
	}
}

// addr returns node i's address while it is up.
func (s *nodeSet) addr(i int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[i]; p != nil {
		return p.addr, true
	}
	return "", false
}

// up returns the indexes of the nodes that are up.
func (s *nodeSet) up() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var up []int
	for i, p := range s.procs {
		if p != nil {
			up = append(up, i)
		}
	}
	return up
}

// status asks node i for its roles.
func (s *nodeSet) status(ctx context.Context, i int) (nodeStatus, error) {
	var st nodeStatus
	addr, ok := s.addr(i)
	if !ok {
		return st, fmt.Errorf("node %d is down", i)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}
