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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A run killed outright (SIGKILL, a test binary's timeout) takes its
// kubelets and containerds with it (Pdeathsig), but not what they made:
// shims and containers re-parented to init, mounts, network namespaces, the
// bridge, cgroups. Each run therefore records itself as the owner of the
// bridge it claimed (/run/fence-e2e-<k>/owner: its PID, that process's start
// time and its work dir), and the next run reclaims whatever a dead owner
// left before it claims a bridge.

func runDir(index int) string { return fmt.Sprintf("/run/fence-e2e-%d", index) }

// owner identifies this process across PID reuse.
func ownerRecord(workDir string) (string, error) {
	start, err := procStartTime(os.Getpid())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %s %s\n", os.Getpid(), start, workDir), nil
}

// procStartTime is the 22nd field of /proc/PID/stat (after the command,
// which may hold spaces and parentheses).
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return f[19], nil
}

// writeOwner records this run as the owner of the bridge it claimed.
func (c *Cluster) writeOwner(rn *realNet) error {
	rec, err := ownerRecord(c.WorkDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(runDir(rn.index), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(runDir(rn.index), "owner"), []byte(rec), 0o644)
}

// ownerAlive reports whether the process an owner record names still runs
// (the same process: same PID and start time).
func ownerAlive(rec string) (alive bool, workDir string, err error) {
	f := strings.Fields(rec)
	if len(f) != 3 {
		return false, "", fmt.Errorf("malformed owner record %q", rec)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false, "", fmt.Errorf("malformed owner record %q", rec)
	}
	start, err := procStartTime(pid)
	return err == nil && start == f[1], f[2], nil
}

// reclaimStale removes what runs that are gone left behind, and reports
// each reclaimed run.
func (c *Cluster) reclaimStale(ctx context.Context, rn *realNet) {
	dirs, _ := filepath.Glob("/run/fence-e2e-*")
	for _, d := range dirs {
		index, err := strconv.Atoi(strings.TrimPrefix(d, "/run/fence-e2e-"))
		if err != nil {
			continue
		}
		rec, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue // being set up by a run that just claimed it, or not ours
		}
		alive, workDir, err := ownerAlive(string(rec))
		if err != nil || alive {
			continue
		}
		c.log.Logf("real nodes: reclaiming what a run that is gone left (bridge fence-br%d, work dir %s)", index, workDir)
		if err := reclaim(ctx, rn, index, workDir); err != nil {
			c.log.Logf("real nodes: reclaiming fence-br%d: %v", index, err)
		}
	}
}

// reclaim removes run index's processes, mounts, network namespaces,
// cgroups, bridge and run dir; the owner file goes last, so that a reclaim
// that failed is tried again by the next run.
func reclaim(ctx context.Context, rn *realNet, index int, workDir string) error {
	stale := &realNet{index: index, hierarchies: rn.hierarchies, freezer: rn.freezer}
	cg := fmt.Sprintf("/fence-e2e-%d", index)
	var errs []error
	if _, _, err := stale.killCgroup(ctx, cg, 30*time.Second); err != nil {
		errs = append(errs, err)
	}
	nodes := filepath.Join(workDir, "nodes")
	errs = append(errs, unmountUnder(nodes), unmountUnder(runDir(index)))
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("fence-%d-", index)) {
				errs = append(errs, ipCmd(ctx, "netns", "delete", e.Name()))
			}
		}
	}
	errs = append(errs, stale.removeCgroup(cg, 10*time.Second))
	removeContainerLogLinks(nodes)
	if err := ipCmd(ctx, "link", "del", fmt.Sprintf("fence-br%d", index)); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join(nodes))
	entries, _ := os.ReadDir(runDir(index))
	for _, e := range entries {
		if e.Name() != "owner" {
			_ = os.RemoveAll(filepath.Join(runDir(index), e.Name()))
		}
	}
	return os.RemoveAll(runDir(index))
}
