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
	"syscall"
	"time"
)

// child is a server process started by this tool: `tideload serve` (tide)
// or `tideload serve-baseline` (the bare gorilla/websocket broadcast).
// Every mode stops it with stop, which a defer runs on success, error,
// timeout and Ctrl-C alike; the child also exits when its stdin closes
// (the parent is gone) and is killed by the kernel if the parent dies
// (Pdeathsig).
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string
	done   chan struct{} // closed when the process has exited
	http   *http.Client
	exited error
}

// selfProc is a process of this same binary in another mode: its stdin
// (closing it asks the process to end), its first line of output, and a
// channel closed when it has exited (with err set).
type selfProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	first chan lineResult // the first line of its stdout, once
	done  chan struct{}
	err   error
}

type lineResult struct {
	line string
	err  error
}

// spawnSelf starts `tideload <mode> args...` with env added to this
// process's environment. What the process prints after its first line
// goes to rest. The kernel kills it if this process dies (Pdeathsig).
func spawnSelf(mode string, env []string, rest io.Writer, args ...string) (*selfProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{mode}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &selfProc{cmd: cmd, stdin: stdin, first: make(chan lineResult, 1), done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	go func() {
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		p.first <- lineResult{line, err}
		_, _ = io.Copy(rest, br)
	}()
	return p, nil
}

// startChild starts `tideload <mode> args...` from this same binary and
// waits for its "listening <addr>" line.
func startChild(ctx context.Context, mode string, args ...string) (*child, error) {
	p, err := spawnSelf(mode, nil, os.Stderr, args...) // anything else the child prints goes to our stderr
	if err != nil {
		return nil, err
	}
	c := &child{cmd: p.cmd, stdin: p.stdin, done: make(chan struct{}),
		http: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	go func() { <-p.done; c.exited = p.err; close(c.done) }()
	wait := time.NewTimer(2 * time.Minute) // a Postgres server child migrates first
	defer wait.Stop()
	select {
	case r := <-p.first:
		if r.err != nil || !strings.HasPrefix(r.line, "listening ") {
			c.stop()
			return nil, fmt.Errorf("%s did not start: %q %v", mode, r.line, r.err)
		}
		c.addr = strings.TrimSpace(strings.TrimPrefix(r.line, "listening "))
		return c, nil
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	case <-wait.C:
		c.stop()
		return nil, fmt.Errorf("%s did not start within 2 minutes", mode)
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// getJSON GETs path from the child's debug server into v.
func (c *child) getJSON(ctx context.Context, path string, v any) error {
	return c.doJSON(ctx, http.MethodGet, path, nil, v)
}

func (c *child) doJSON(ctx context.Context, method, path string, body io.Reader, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addr+path, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if v == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (c *child) stats(ctx context.Context, scavenge bool) (serverStats, error) {
	var st serverStats
	path := "/debug/stats"
	if scavenge {
		path += "?scavenge=1"
	}
	return st, c.getJSON(ctx, path, &st)
}

// cpu returns the child's user+system CPU time so far.
func (c *child) cpu() time.Duration { return procCPU(c.pid()) }

// profile fetches a CPU profile of the child over the next d into file, in
// the background; the returned function waits for it.
func (c *child) profile(ctx context.Context, file string, d time.Duration) func() error {
	if file == "" {
		return func() error { return nil }
	}
	errc := make(chan error, 1)
	go func() {
		secs := max(1, int(d.Round(time.Second)/time.Second))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.addr, secs), nil)
		if err != nil {
			errc <- err
			return
		}
		resp, err := c.http.Do(req)
		if err != nil {
			errc <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			errc <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		errc <- err
	}()
	return func() error { return <-errc }
}

// stop ends the child process (only the one this tool started): it closes
// the child's stdin, which makes it shut down gracefully, and kills it if
// it has not exited 15 s later. It is safe to call more than once.
func (c *child) stop() {
	if c == nil {
		return
	}
	_ = c.stdin.Close()
	select {
	case <-c.done:
		return
	case <-time.After(15 * time.Second):
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}

// procCPU returns a process's user+system CPU time from /proc/<pid>/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces) start at ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 > len(b) {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// selfCPU returns this process's user+system CPU time (getrusage).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU returns the CPU time every core of the machine spent busy
// (everything but idle and iowait), from /proc/stat.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i := 1; i < len(f); i++ {
		if i == 4 || i == 5 { // idle, iowait
			continue
		}
		if i > 7 { // steal is not ours; guest time is already counted in user
			break
		}
		var v int64
		fmt.Sscan(f[i], &v)
		busy += v
	}
	return time.Duration(busy) * time.Second / 100
}
