//go:build e2e

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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReclaimStale leaves what a killed run leaves (an owner record of a
// process that is gone, a bridge, a network namespace, a cgroup with a
// process in it, a mount under the run's work dir) and checks that the
// next run's reclaim removes all of it and leaves a live owner's run alone.
func TestReclaimStale(t *testing.T) {
	if os.Getenv("FENCE_E2E_REAL_NODES") == "" {
		t.Skip("real nodes run only with FENCE_E2E_REAL_NODES=1 (make test-realnodes)")
	}
	if err := CheckRealNodeHost(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	hier, err := cgroupV1Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	rn := &realNet{freezer: hier["freezer"]}
	seen := map[string]bool{}
	for _, m := range hier {
		if !seen[m] {
			seen[m] = true
			rn.hierarchies = append(rn.hierarchies, m)
		}
	}
	const dead, live = 30, 31
	work := t.TempDir()

	// The dead run: its owner is a process that has ended.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(runDir(dead), 0o755))
	must(t, os.WriteFile(filepath.Join(runDir(dead), "owner"), []byte(fmt.Sprintf("%d 1 %s\n", gone.Process.Pid, work)), 0o644))
	must(t, ipCmd(ctx, "link", "add", fmt.Sprintf("fence-br%d", dead), "type", "bridge"))
	netns := fmt.Sprintf("fence-%d-n0", dead)
	must(t, ipCmd(ctx, "netns", "add", netns))
	procs, err := rn.createCgroup(fmt.Sprintf("/fence-e2e-%d/n0/daemons", dead))
	must(t, err)
	// A container left running: a sleep in the node's cgroup and netns,
	// re-parented away from us as a shim's child would be.
	script := `for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 1; shift; done; shift; exec "$@"`
	args := append([]string{"-c", script, "sh"}, procs...)
	args = append(args, "--", "nsenter", "--net=/run/netns/"+netns, "--", "sleep", "600")
	sleeper := exec.Command("/bin/sh", args...)
	must(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	mnt := filepath.Join(work, "nodes", "n0", "shm")
	must(t, os.MkdirAll(mnt, 0o755))
	must(t, exec.Command("mount", "-t", "tmpfs", "tmpfs", mnt).Run())
	err = WaitFor(ctx, 10*time.Second, "the sleeper in its cgroup", func(context.Context) (bool, error) {
		pids, err := rn.cgroupPids(fmt.Sprintf("/fence-e2e-%d", dead))
		return len(pids) == 1, err
	})
	must(t, err)

	// A live run: this process owns it.
	must(t, os.MkdirAll(runDir(live), 0o755))
	rec, err := ownerRecord(work)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(runDir(live), "owner"), []byte(rec), 0o644))
	t.Cleanup(func() { _ = os.RemoveAll(runDir(live)) })

	c := &Cluster{WorkDir: work, log: t}
	c.reclaimStale(ctx, rn)

	if err := WaitFor(ctx, 10*time.Second, "the sleeper to end", func(context.Context) (bool, error) {
		return sleeper.ProcessState != nil || processGone(sleeper.Process.Pid), nil
	}); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(runDir(dead)); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", runDir(dead), err)
	}
	if err := ipCmd(ctx, "link", "show", fmt.Sprintf("fence-br%d", dead)); err == nil {
		t.Errorf("bridge fence-br%d still there", dead)
	}
	if _, err := os.Stat("/run/netns/" + netns); !os.IsNotExist(err) {
		t.Errorf("netns %s still there: %v", netns, err)
	}
	for _, h := range rn.hierarchies {
		if _, err := os.Stat(filepath.Join(h, fmt.Sprintf("fence-e2e-%d", dead))); !os.IsNotExist(err) {
			t.Errorf("cgroup %s/fence-e2e-%d still there: %v", h, dead, err)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), mnt) {
		t.Errorf("%s still mounted", mnt)
	}
	if _, err := os.Stat(filepath.Join(runDir(live), "owner")); err != nil {
		t.Errorf("the live run's owner record was removed: %v", err)
	}
}

// processGone: no such process, or a zombie (ended, not yet reaped).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
