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
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// What a command that runs the framework needs from the machine, checked
// (and provided where the project's hack/ scripts can) before it starts
// anything, so that a missing part fails it in seconds instead of after
// minutes of measuring. The scripts stay the one place that knows how to
// check and install each part; this file runs them as `make test` does.

// FenceAgentsScript installs fence_ipmilan, ipmitool and ipmi_sim, the
// real parts of power fencing (test/bmcsim, the power path of fence-bench).
const FenceAgentsScript = "hack/install-fence-agents.sh"

// FenceAgentsCheck is what `hack/install-fence-agents.sh --check` reports.
type FenceAgentsCheck struct {
	// Missing are the programs not found.
	Missing []string
	// Installer is how the script would install them: "root" or "sudo";
	// empty when it cannot, and then CannotInstall says why.
	Installer     string
	CannotInstall string
}

// parseFenceAgentsCheck reads the two lines of the script's --check.
func parseFenceAgentsCheck(out string) (FenceAgentsCheck, error) {
	var c FenceAgentsCheck
	var sawMissing, sawInstall bool
	for _, line := range strings.Split(out, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "missing":
			sawMissing, c.Missing = true, strings.Fields(value)
		case "install":
			sawInstall = true
			if why, no := strings.CutPrefix(value, "no:"); no {
				c.CannotInstall = strings.TrimSpace(why)
			} else {
				c.Installer = value
			}
		}
	}
	if !sawMissing || !sawInstall || (c.Installer == "" && c.CannotInstall == "") {
		return c, fmt.Errorf("%s --check: unexpected output %q", FenceAgentsScript, out)
	}
	return c, nil
}

// CheckFenceAgents runs `hack/install-fence-agents.sh --check`: it installs
// nothing.
func CheckFenceAgents(ctx context.Context) (FenceAgentsCheck, error) {
	out, err := RunScript(ctx, FenceAgentsScript, "--check")
	if err != nil {
		return FenceAgentsCheck{}, err
	}
	return parseFenceAgentsCheck(out)
}

// decideFenceAgents says what to do about the fence agents: nothing (all
// present), run the script to install them (it can: root or passwordless
// sudo, and apt-get), or fail with what to run instead.
func decideFenceAgents(c FenceAgentsCheck) (install bool, err error) {
	if len(c.Missing) == 0 {
		return false, nil
	}
	if c.Installer != "" {
		return true, nil
	}
	missing := strings.Join(c.Missing, ", ")
	script := filepath.Join(RepoRoot(), FenceAgentsScript)
	if strings.Contains(c.CannotInstall, "apt-get") {
		return false, fmt.Errorf("power fencing needs fence_ipmilan, ipmitool and ipmi_sim; missing: %s, and %s cannot install them here (%s): "+
			"install them by hand (Debian and Ubuntu packages: fence-agents, ipmitool, openipmi)", missing, FenceAgentsScript, c.CannotInstall)
	}
	return false, fmt.Errorf("power fencing needs fence_ipmilan, ipmitool and ipmi_sim; missing: %s, and this user cannot install them (%s): "+
		"run `sudo %s` (it installs the Debian packages fence-agents, ipmitool and openipmi), then run this again", missing, c.CannotInstall, script)
}

// EnsureFenceAgents makes sure fence_ipmilan, ipmitool and ipmi_sim are
// installed, as `make test` does: nothing when they are, the script when it
// can install them, else an error naming the command to run.
func EnsureFenceAgents(ctx context.Context, log Logger) error {
	c, err := CheckFenceAgents(ctx)
	if err != nil {
		return err
	}
	install, err := decideFenceAgents(c)
	if err != nil || !install {
		return err
	}
	log.Logf("installing %s with %s (as %s)", strings.Join(c.Missing, ", "), FenceAgentsScript, c.Installer)
	if _, err := RunScript(ctx, FenceAgentsScript); err != nil {
		return fmt.Errorf("installing the fence agents: %w", err)
	}
	return nil
}

// RunScript runs one of the repository's scripts (a path relative to its
// root) with args, its stderr on this process's, and returns its stdout.
// The script runs in a process group of its own: cancelling ctx ends it and
// everything it started (SIGTERM, SIGKILL 10 s later), so that a build or
// an install interrupted leaves nothing running.
func RunScript(ctx context.Context, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), script), args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil && cmd.Process != nil {
		// Whatever of the group outlived the SIGTERM and the leader.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return "", fmt.Errorf("%s: %w", strings.Join(append([]string{script}, args...), " "), err)
	}
	return string(out), nil
}
