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

package powerfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Defaults of an Agent's bounds (those of medik8s' fence-agents-remediation:
// 60 s per call, a few retries some seconds apart).
const (
	DefaultCallTimeout    = 60 * time.Second
	DefaultRetries        = 3
	DefaultRetryInterval  = 5 * time.Second
	DefaultMaxRetryPause  = time.Minute
	DefaultOutputLimit    = 4096
	maxCapturedOutput     = 1 << 20
	processGroupWaitDelay = 2 * time.Second
)

// Step is one run of the agent: what was asked, how it ended and what it
// printed. It is what a fence record keeps; it holds no secret.
type Step struct {
	Action  Action    `json:"action"`
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"`
	// Duration is how long the agent ran.
	Duration time.Duration `json:"duration"`
	// ExitCode is the agent's exit code, -1 when it did not exit by itself
	// (not started, killed at the call's timeout).
	ExitCode int `json:"exitCode"`
	// Output is the end of the agent's stdout and stderr, redacted.
	Output string `json:"output,omitempty"`
	// Error says why the step failed, redacted; empty on success.
	Error string `json:"error,omitempty"`
}

// Agent runs one fence agent with one set of options: one node's power
// switch. It is safe for concurrent use.
type Agent struct {
	// Path is the agent executable.
	Path string
	// Options are the agent's options (without the action).
	Options []Option
	// CallTimeout bounds one run; the agent and everything it started are
	// killed when it expires.
	CallTimeout time.Duration
	// Retries is how many more runs a failed call gets.
	Retries int
	// RetryInterval is the first pause between two runs, doubled after each
	// run up to MaxRetryPause.
	RetryInterval time.Duration
	MaxRetryPause time.Duration
	// Env is the agent's environment. Nil means only PATH and the proxy
	// variables of this process: the agent needs nothing else, and this
	// process' environment is none of its business.
	Env []string
	// OutputLimit is how many bytes of (redacted) output a Step keeps.
	OutputLimit int

	redactOnce sync.Once
	redactor   *redactor
}

func (a *Agent) redact() *redactor {
	a.redactOnce.Do(func() { a.redactor = newRedactor(a.Options) })
	return a.redactor
}

// errCode is a run that ended with an exit code the action does not accept.
type errCode struct {
	action Action
	code   int
}

func (e *errCode) Error() string {
	return fmt.Sprintf("fence agent %s exited with %d", e.action, e.code)
}

// Run runs action until the agent's exit code is one the action accepts
// (off, on, monitor: 0; status: 0 or 2), at most 1+Retries times with
// exponential backoff, and returns every run. A failure that another run
// cannot fix (the agent is missing, an option is malformed) is not retried;
// neither is anything once ctx is done.
func (a *Agent) Run(ctx context.Context, action Action) ([]Step, error) {
	logger := klog.FromContext(ctx).WithValues("agent", agentName(a.Path), "action", action)
	pause := a.RetryInterval
	if pause <= 0 {
		pause = DefaultRetryInterval
	}
	maxPause := a.MaxRetryPause
	if maxPause <= 0 {
		maxPause = DefaultMaxRetryPause
	}
	var steps []Step
	for attempt := 1; ; attempt++ {
		step, err := a.runOnce(ctx, action, attempt)
		steps = append(steps, step)
		if err == nil {
			return steps, nil
		}
		if permanent(err) || attempt > a.Retries || ctx.Err() != nil {
			return steps, err
		}
		logger.Info("Fence agent failed, retrying", "attempt", attempt, "retryIn", pause, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return steps, a.redact().error(fmt.Errorf("fence agent %s: %w after %d attempts (last: %v)", action, ctx.Err(), attempt, err))
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}

var errInvalidOption = errors.New("invalid agent option")

// accepts says which exit codes answer action.
func accepts(action Action, code int) bool {
	switch action {
	case ActionStatus, ActionMonitor:
		return code == exitSuccess || code == exitOff
	default:
		return code == exitSuccess
	}
}

// runOnce runs the agent once, bounded by CallTimeout.
func (a *Agent) runOnce(ctx context.Context, action Action, attempt int) (Step, error) {
	logger := klog.FromContext(ctx).WithValues("agent", agentName(a.Path), "action", action, "attempt", attempt)
	r := a.redact()
	step := Step{Action: action, Attempt: attempt, Start: time.Now(), ExitCode: -1}
	fail := func(err error) (Step, error) {
		err = r.error(err)
		step.Error = err.Error()
		return step, err
	}

	stdin, err := encodeStdin(a.Options, action)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", errInvalidOption, err))
	}
	timeout := a.CallTimeout
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// No arguments: everything, the password included, goes through stdin.
	cmd := exec.CommandContext(callCtx, a.Path)
	cmd.Stdin = strings.NewReader(stdin)
	out := &cappedBuffer{limit: maxCapturedOutput}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.Env = a.Env
	if cmd.Env == nil {
		cmd.Env = minimalEnv()
	}
	// The agent runs its helpers (fence_ipmilan runs ipmitool) as children:
	// at the timeout they must end with it (killProcessGroup).
	killProcessGroup(cmd)
	cmd.WaitDelay = processGroupWaitDelay

	logger.V(4).Info("Running fence agent", "path", a.Path, "options", optionNames(a.Options))
	runErr := cmd.Run()
	step.Duration = time.Since(step.Start)
	step.Output = tail(r.redact(out.String()), a.outputLimit())
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		step.ExitCode = cmd.ProcessState.ExitCode()
	}
	logger = logger.WithValues("exitCode", step.ExitCode, "duration", step.Duration)
	logger.V(5).Info("Fence agent output", "output", step.Output)

	var exitErr *exec.ExitError
	switch {
	case callCtx.Err() != nil && step.ExitCode < 0:
		// Killed by us: the call's timeout, or ctx ended. A timeout is a
		// failure, never an answer.
		cause := context.Cause(callCtx)
		if ctx.Err() == nil {
			cause = fmt.Errorf("timed out after %v: %w", timeout, context.DeadlineExceeded)
		}
		return fail(fmt.Errorf("fence agent %s: %w; output: %s", action, cause, lastLine(step.Output)))
	case runErr != nil && !errors.As(runErr, &exitErr):
		// Could not start (missing, not executable) or lost its pipes.
		return fail(fmt.Errorf("fence agent %s: %w", action, runErr))
	case !accepts(action, step.ExitCode):
		logger.V(2).Info("Fence agent refused", "output", lastLine(step.Output))
		return fail(fmt.Errorf("%w; output: %s", &errCode{action: action, code: step.ExitCode}, lastLine(step.Output)))
	}
	logger.V(2).Info("Fence agent done")
	return step, nil
}

func (a *Agent) outputLimit() int {
	if a.OutputLimit > 0 {
		return a.OutputLimit
	}
	return DefaultOutputLimit
}

// minimalEnv is what an agent needs: PATH to find its helpers (ipmitool),
// and a proxy if this process is told to use one for cloud APIs.
func minimalEnv() []string {
	env := []string{"PATH=" + agentPath()}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// agentPath is this process' PATH plus the sbin directories, where Debian
// and Red Hat install the agents and a non-root PATH often lacks.
func agentPath() string {
	path := os.Getenv("PATH")
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if !strings.Contains(":"+path+":", ":"+d+":") {
			path = strings.TrimPrefix(path+":"+d, ":")
		}
	}
	return path
}

func agentName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// cappedBuffer keeps at most limit bytes, the last ones: an agent stuck in a
// loop of messages cannot exhaust memory.
type cappedBuffer struct {
	mu        sync.Mutex
	limit     int
	buf       bytes.Buffer
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if over := c.buf.Len() - c.limit; over > 0 {
		c.buf.Next(over)
		c.truncated = true
	}
	return len(p), nil
}

// String is the kept output. After a cut, the first line is dropped whole:
// the cut may have split a secret, and the half left would escape redaction
// (a secret never spans lines: option values hold no line break).
func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	if c.truncated {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			return s[i+1:]
		}
		return ""
	}
	return s
}

// tail keeps the last n bytes of an (already redacted) text: cutting before
// redacting could leave half a password that no longer matches.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// lastLine is the agent's last non-empty line, its conclusion by convention
// ("Success: Powered OFF", "Failed: Unable to obtain correct plug status").
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return "(none)"
}
