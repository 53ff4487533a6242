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
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func TestEncodeStdin(t *testing.T) {
	const secret = "s3cr'et p@ss"
	tests := []struct {
		name    string
		opts    []Option
		action  Action
		want    string
		wantErr string
	}{
		{
			name:   "options then the action, one per line",
			opts:   []Option{{Name: "ip", Value: "10.0.0.1"}, {Name: "lanplus", Value: "1"}, {Name: "password", Value: secret, Secret: true}},
			action: ActionOff,
			want:   "ip=10.0.0.1\nlanplus=1\npassword=" + secret + "\naction=off\n",
		},
		{name: "no options", action: ActionStatus, want: "action=status\n"},
		{name: "the action is ours", opts: []Option{{Name: "action", Value: "on"}}, action: ActionOff, wantErr: `"action" is set by the fence itself`},
		{name: "nor its old alias", opts: []Option{{Name: "option", Value: "on"}}, action: ActionOff, wantErr: `"option" is set by the fence itself`},
		{name: "name with a space", opts: []Option{{Name: "ip addr", Value: "x"}}, action: ActionOff, wantErr: "invalid agent option name"},
		{name: "name with =", opts: []Option{{Name: "a=b", Value: "x"}}, action: ActionOff, wantErr: "invalid agent option name"},
		{name: "value with a newline would inject an option", opts: []Option{{Name: "password", Value: secret + "\naction=on", Secret: true}}, action: ActionOff, wantErr: "line break"},
		{name: "value the agent would strip", opts: []Option{{Name: "password", Value: " " + secret, Secret: true}}, action: ActionOff, wantErr: "white space"},
		{name: "value the agent would unquote", opts: []Option{{Name: "password", Value: `"` + secret + `"`, Secret: true}}, action: ActionOff, wantErr: "double quotes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeStdin(tc.opts, tc.action)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows the value: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The agent protocol: exit codes per action, retries with backoff, a bound
// on every call.
func TestAgentRun(t *testing.T) {
	tests := []struct {
		name      string
		plans     map[Action][]int
		action    Action
		retries   int
		wantCalls int
		wantCodes []int
		wantErr   string
	}{
		{name: "status on", plans: map[Action][]int{ActionStatus: {0}}, action: ActionStatus, retries: 2, wantCalls: 1, wantCodes: []int{0}},
		{name: "status off is an answer, not an error", plans: map[Action][]int{ActionStatus: {2}}, action: ActionStatus, retries: 2, wantCalls: 1, wantCodes: []int{2}},
		{name: "status unreachable is retried, then fails", plans: map[Action][]int{ActionStatus: {1}}, action: ActionStatus, retries: 2, wantCalls: 3, wantCodes: []int{1, 1, 1}, wantErr: "exited with 1"},
		{name: "off fails twice then succeeds", plans: map[Action][]int{ActionOff: {1, 1, 0}}, action: ActionOff, retries: 3, wantCalls: 3, wantCodes: []int{1, 1, 0}},
		{name: "off: 2 is not success", plans: map[Action][]int{ActionOff: {2}}, action: ActionOff, retries: 0, wantCalls: 1, wantCodes: []int{2}, wantErr: "exited with 2"},
		{name: "on", plans: map[Action][]int{ActionOn: {0}}, action: ActionOn, wantCalls: 1, wantCodes: []int{0}},
		{name: "monitor off (single-port device) is an answer", plans: map[Action][]int{ActionMonitor: {2}}, action: ActionMonitor, wantCalls: 1, wantCodes: []int{2}},
		{name: "no retries", plans: map[Action][]int{ActionOff: {1, 0}}, action: ActionOff, retries: 0, wantCalls: 1, wantCodes: []int{1}, wantErr: "exited with 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFakeAgent(t, tc.plans, "")
			a := &Agent{Path: f.path, Retries: tc.retries, RetryInterval: time.Millisecond, CallTimeout: 10 * time.Second}
			steps, err := a.Run(ctx, tc.action)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if got := f.calls(tc.action); got != tc.wantCalls {
				t.Errorf("agent ran %d times, want %d", got, tc.wantCalls)
			}
			var codes []int
			for i, s := range steps {
				codes = append(codes, s.ExitCode)
				if s.Attempt != i+1 || s.Action != tc.action {
					t.Errorf("step %d is %+v", i, s)
				}
				if !strings.Contains(s.Output, "fake: "+string(tc.action)+" call "+strconv.Itoa(i+1)) {
					t.Errorf("step %d output %q lacks the agent's words", i, s.Output)
				}
				if (s.Error == "") != accepts(tc.action, s.ExitCode) {
					t.Errorf("step %d: exit %d with error %q", i, s.ExitCode, s.Error)
				}
			}
			if !slices.Equal(codes, tc.wantCodes) {
				t.Errorf("exit codes %v, want %v", codes, tc.wantCodes)
			}
		})
	}
}

// A hung agent is killed at the call's timeout with everything it started:
// its helper (ipmitool for fence_ipmilan) holds the output pipe, and killing
// only the agent would leave the call waiting for that pipe. A timeout is a
// failure, and a retry is still bounded.
func TestAgentCallTimeoutKillsProcessGroup(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFakeAgent(t, map[Action][]int{ActionOff: {-1}}, "")
	// The script runs a dozen commands before it starts its grandchild:
	// long enough a timeout that it gets there on a loaded machine (with
	// 300 ms, CI's four lanes once killed both runs before it did).
	a := &Agent{Path: f.path, CallTimeout: 3 * time.Second, Retries: 1, RetryInterval: time.Millisecond}
	steps, err := a.Run(ctx, ActionOff)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 3s") {
		t.Fatalf("error %v, want a timeout", err)
	}
	if len(steps) != 2 || steps[0].ExitCode != -1 || steps[1].ExitCode != -1 {
		t.Fatalf("steps %+v, want two killed runs", steps)
	}
	// With only the agent killed, a call would wait processGroupWaitDelay
	// (2 s) more for the pipe the grandchild holds.
	for i, s := range steps {
		if s.Duration >= a.CallTimeout+processGroupWaitDelay*3/4 {
			t.Errorf("call %d took %v: the agent's children were not killed with it", i+1, s.Duration)
		}
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "grandchild.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Killed, its pipe closed; it may take a moment more to be a zombie.
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's child %d outlived the call (it would live for 30 s)", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive: the pid exists and is not a zombie (a killed orphan waits
// for init to reap it).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// Retries back off exponentially.
func TestAgentBackoff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFakeAgent(t, map[Action][]int{ActionOff: {1}}, "")
	const interval = 50 * time.Millisecond
	a := &Agent{Path: f.path, Retries: 3, RetryInterval: interval, MaxRetryPause: 150 * time.Millisecond}
	steps, err := a.Run(ctx, ActionOff)
	if err == nil || len(steps) != 4 {
		t.Fatalf("steps %d, error %v; want 4 failed runs", len(steps), err)
	}
	// Lower bounds only: the pause before run i+1 is at least interval*2^(i-1),
	// capped by MaxRetryPause.
	for i, want := range []time.Duration{interval, 2 * interval, 150 * time.Millisecond} {
		if gap := steps[i+1].Start.Sub(steps[i].Start.Add(steps[i].Duration)); gap < want {
			t.Errorf("pause before run %d was %v, want at least %v", i+2, gap, want)
		}
	}
}

// The caller's context ends a fence at once, also between two tries.
func TestAgentRunStopsWithContext(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	f := newFakeAgent(t, map[Action][]int{ActionOff: {1}}, "")
	a := &Agent{Path: f.path, Retries: 5, RetryInterval: time.Hour}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(ctx, ActionOff)
		done <- err
	}()
	// Cancel once the first run is over and Run waits for its retry (it
	// says so in the log just before it waits).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), "Fence agent failed, retrying") {
		if time.Now().After(deadline) {
			t.Fatal("the agent never failed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was canceled")
	}
	if n := f.calls(ActionOff); n != 1 {
		t.Errorf("agent ran %d times after the cancel, want 1", n)
	}
}

// An agent that is not there is not retried.
func TestAgentMissingIsPermanent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	a := &Agent{Path: filepath.Join(t.TempDir(), "fence_nothere"), Retries: 5, RetryInterval: time.Hour}
	steps, err := a.Run(ctx, ActionOff)
	if !errors.Is(err, os.ErrNotExist) || len(steps) != 1 {
		t.Fatalf("steps %d, error %v; want one run failing with not-exist", len(steps), err)
	}
}

// S7 at the process boundary: the options, password included, reach the
// agent on stdin only; its command line is empty and its environment holds
// nothing of them, so ps and /proc/<pid>/{cmdline,environ} show no password.
func TestAgentOptionsOnlyOnStdin(t *testing.T) {
	const secret = "Pa55-w0rd-only-on-stdin"
	_, ctx := ktesting.NewTestContext(t)
	f := newFakeAgent(t, map[Action][]int{ActionStatus: {0}}, "")
	a := &Agent{Path: f.path, Options: []Option{
		{Name: "ip", Value: "192.0.2.10"}, {Name: "username", Value: "admin", Secret: true}, {Name: "password", Value: secret, Secret: true},
	}}
	if _, err := a.Run(ctx, ActionStatus); err != nil {
		t.Fatal(err)
	}
	if got, want := f.read("stdin", ActionStatus, 1), "ip=192.0.2.10\nusername=admin\npassword="+secret+"\naction=status\n"; got != want {
		t.Errorf("stdin %q, want %q", got, want)
	}
	if got := f.read("args", ActionStatus, 1); got != "0\n" {
		t.Errorf("the agent got arguments: %q", got)
	}
	env := f.read("env", ActionStatus, 1)
	if strings.Contains(env, secret) || strings.Contains(env, "192.0.2.10") {
		t.Errorf("options leaked into the environment:\n%s", env)
	}
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		// The shell adds PWD (and SHLVL); everything else is ours: PATH only.
		name, _, _ := strings.Cut(line, "=")
		if !slices.Contains([]string{"PATH", "PWD", "SHLVL", "_", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"}, name) {
			t.Errorf("agent environment has %s", line)
		}
	}
}
