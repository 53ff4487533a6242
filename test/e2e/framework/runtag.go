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
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A run's processes are found by an environment variable that names the
// run: TagRun sets it in this process, every process started afterwards
// inherits it (the framework's, a BMC's machine, what those start), and
// /proc/<pid>/environ keeps it wherever the process was reparented to. So a
// command or a test can list, once it has stopped everything, what of its
// own is still running, which a list of its children would miss (a BMC's
// machine is ipmi_sim's child, and init's once ipmi_sim is gone).

// runTagPrefix begins the name of a run's variable; its value is 1.
const runTagPrefix = "FENCE_RUN_"

// RunTag names the processes of one run.
type RunTag string

// TagRun tags every process this one starts from now on (and theirs) with a
// new RunTag. Runs nest: a tagged process that tags again carries both.
func TagRun() (RunTag, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tag := RunTag(runTagPrefix + hex.EncodeToString(b))
	return tag, os.Setenv(string(tag), "1")
}

// RunProcess is a live process of a run.
type RunProcess struct {
	PID     int
	Command string
}

func (p RunProcess) String() string { return fmt.Sprintf("%d %s", p.PID, p.Command) }

// Processes lists the live processes (not zombies) tagged with t, other
// than this one.
func (t RunTag) Processes() ([]RunProcess, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []RunProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process may end, or belong to a user we cannot read: skip it.
		environ, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !t.in(environ) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || !liveStat(string(stat)) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, RunProcess{PID: pid, Command: strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))})
	}
	return out, nil
}

// in reports whether a /proc/<pid>/environ (NUL-separated) carries t.
func (t RunTag) in(environ []byte) bool {
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if string(kv) == string(t)+"=1" {
			return true
		}
	}
	return false
}

// liveStat reports whether a /proc/<pid>/stat is of a process that has not
// ended (its state, after the command name in parentheses, is not Z or X).
func liveStat(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(stat[i+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// WaitNoProcesses waits until no process of the run is left, for at most
// timeout (a process killed a moment ago may still be ending), and else
// returns an error listing them.
func (t RunTag) WaitNoProcesses(ctx context.Context, timeout time.Duration) error {
	var left []RunProcess
	err := waitFor(ctx, timeout, 100*time.Millisecond, "the run's processes to end", func(context.Context) (bool, error) {
		var err error
		left, err = t.Processes()
		return err == nil && len(left) == 0, err
	})
	if err == nil {
		return nil
	}
	if len(left) == 0 {
		return err
	}
	lines := make([]string, len(left))
	for i, p := range left {
		lines[i] = "  " + p.String()
	}
	return fmt.Errorf("%d processes of this run still running:\n%s", len(left), strings.Join(lines, "\n"))
}
