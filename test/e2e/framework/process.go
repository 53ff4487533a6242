/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one child process whose output goes to a log file.
type Process struct {
	Name    string
	LogPath string
	// logStart is where this process's output begins in LogPath, which
	// every process of the same name appends to.
	logStart int64
	cmd      *exec.Cmd
	done     chan struct{}
	mu       sync.Mutex
	err      error
	stopped  bool // Stop or Kill was called: its end is intended
}

// spawner starts every child from one goroutine locked to its OS thread for
// the life of the process. Pdeathsig is delivered when the *thread* that
// forked the child exits, not the process: starting children from arbitrary
// goroutines would let the Go runtime retire that thread and kill a healthy
// child. With one thread that never exits, the signal comes exactly when the
// test binary (or the demo) dies, however it dies: panic, test timeout,
// SIGKILL.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// startProcess starts bin with args, logging to dir/name.log. The child gets
// its own process group (so Stop reaches whatever it forks) and SIGKILL when
// the parent dies, so nothing outlives a panicking or timed-out test.
func startProcess(dir, name, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	start, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	fmt.Fprintf(f, "### %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, logStart: start, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID (also its process group ID).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (nil while it runs or after a clean exit).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *Process) markStopped() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// Unexpected reports whether the process ended without Stop or Kill.
func (p *Process) Unexpected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.stopped && p.Exited()
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	p.markStopped()
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill ends the process group at once, as a power cut would.
func (p *Process) Kill() {
	p.markStopped()
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// exitError describes a process that ended when it should be running, with
// the end of its log; portConflict says whether it lost a race for its port
// (another process took a port between freePorts and the bind).
func (p *Process) exitError() error {
	tail := p.Tail(15)
	return &ExitedError{Name: p.Name, Err: p.Err(), LogPath: p.LogPath, Tail: tail,
		PortConflict: strings.Contains(tail, "address already in use")}
}

// ExitedError is returned when a process ended before it became ready.
type ExitedError struct {
	Name         string
	Err          error
	LogPath      string
	Tail         string
	PortConflict bool
}

func (e *ExitedError) Error() string {
	return fmt.Sprintf("%s exited (%v); end of %s:\n%s", e.Name, e.Err, e.LogPath, e.Tail)
}

// waitFor polls cond every interval until it returns true, an error, or
// ctx/timeout ends; the last error is reported on timeout.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		var exited *ExitedError
		if errors.As(err, &exited) {
			return err // no use waiting for a process that is gone
		}
		last = err // a plain "not yet" clears an older error
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		case <-time.After(interval):
		}
	}
}

// WaitFor is waitFor for callers of the framework: it polls cond every
// 100ms until it is true or timeout passes. cond's error is reported on
// timeout but does not end the wait (the API may be briefly unavailable).
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	return waitFor(ctx, timeout, 100*time.Millisecond, what, cond)
}

// Output is what this process has logged so far: its part of LogPath,
// which the processes started before it under the same name (restarts,
// other tests') wrote to as well.
func (p *Process) Output() ([]byte, error) {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) < p.logStart {
		return nil, fmt.Errorf("%s is shorter than when %s started", p.LogPath, p.Name)
	}
	return b[p.logStart:], nil
}
