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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A real node comes back (issue 20, step 4 "Reboot"), in one of two ways:
//
//   - PowerOn boots a node that PowerOff ended, as the same machine powered
//     on again: what lived in memory and in /run is gone (containers,
//     mounts, containerd's state and sockets), what is on disk stays (the
//     kubelet's root with pods/*/volumes/.../vol_data.json and the staging
//     and publish directories, containerd's images and metadata, pod logs),
//     and its containerd and kubelet start again with the same identity,
//     network namespace and cgroup root. The kubelet re-registers and runs
//     the node's pods again, the DaemonSets' among them.
//   - Hang and Resume stop every process of a node where it stands and let
//     it go on (the v1 freezer on its cgroup subtree): a machine that hung
//     and recovers, or a VM that was paused. Nothing dies, so its mounts,
//     containers and connections are all there when it resumes; the control
//     plane sees it NotReady meanwhile, as it sees a powered-off one.

// PowerOnOptions tune PowerOn.
type PowerOnOptions struct {
	// Inspect, if set, is called once the reboot has taken what a reboot
	// takes and before any process of the node starts: the node's disk as
	// its kubelet and the node's pods will find it. An error stops the
	// power-on (the node stays off) and is returned.
	Inspect func() error
}

// PowerOn boots a node that PowerOff ended and waits until it is Ready. See
// above for what a reboot keeps and loses.
func (c *Cluster) PowerOn(ctx context.Context, n *RealNode, opts PowerOnOptions) error {
	c.mu.Lock()
	rn := c.realNet
	c.mu.Unlock()
	if rn == nil {
		return fmt.Errorf("power on %s: the cluster has no real nodes (stopped?)", n.Name)
	}
	n.mu.Lock()
	off := n.poweredOff
	n.mu.Unlock()
	if !off {
		return fmt.Errorf("power on %s: it is running (PowerOff it first)", n.Name)
	}
	begin := time.Now()
	if err := rn.rebootLosses(n); err != nil {
		return fmt.Errorf("power on %s: %w", n.Name, err)
	}
	if opts.Inspect != nil {
		if err := opts.Inspect(); err != nil {
			return fmt.Errorf("power on %s: inspecting its disk before it boots: %w", n.Name, err)
		}
	}
	// From here on its processes may run: Stop must end them, and a
	// second PowerOff must kill them.
	n.mu.Lock()
	n.poweredOff = false
	n.mu.Unlock()
	// The images are still in containerd's root, as on a disk: nothing is
	// imported again.
	procs, err := c.startContainerd(ctx, rn, n)
	if err != nil {
		return fmt.Errorf("power on %s: %w", n.Name, err)
	}
	if err := c.startKubelet(ctx, rn, n, procs); err != nil {
		return fmt.Errorf("power on %s: %w", n.Name, err)
	}
	if err := c.waitRealNodeReady(ctx, n, 120*time.Second); err != nil {
		return fmt.Errorf("power on %s: %w", n.Name, err)
	}
	c.log.Logf("real node %s powered on and Ready again in %.1fs", n.Name, time.Since(begin).Seconds())
	return nil
}

// rebootLosses takes from a powered-off node what a reboot takes: every
// mount under its directories (its processes are dead, but their mounts
// live in the host's mount namespace, where a real machine's would have
// gone with its kernel), what a real host keeps in /run (containerd's state
// dir, runc's state, its sockets, the shims' sockets), and its cgroups (a
// booting machine starts with an empty tree; the kubelet makes its pods'
// again). The kubelet's root and containerd's root stay.
func (rn *realNet) rebootLosses(n *RealNode) error {
	if pids, err := rn.cgroupPids(n.cgroup); err != nil || len(pids) > 0 {
		return fmt.Errorf("it still runs processes %v (%v): not powered off", pids, err)
	}
	if err := unmountUnder(n.Dir); err != nil {
		return err
	}
	if err := unmountUnder(n.shimDir()); err != nil {
		return err
	}
	if left, err := mountsUnder(n.Dir); err != nil || len(left) > 0 {
		return fmt.Errorf("mounts left under %s after unmounting: %v (%v)", n.Dir, left, err)
	}
	for _, p := range volatilePaths(n) {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("what a reboot loses: %w", err)
		}
	}
	for _, d := range []string{filepath.Join(n.Dir, "containerd", "state"), filepath.Join(n.Dir, "containerd", "tmp"), n.shimDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return rn.removeCgroup(n.cgroup, 10*time.Second)
}

// volatilePaths are the node's paths that a real host keeps in memory
// (/run, tmpfs) and a reboot empties: containerd's state dir (sandboxes'
// network namespace mounts, shm, rootfs mount points), its temp dir, runc's
// root, containerd's sockets and the shims' socket dir.
func volatilePaths(n *RealNode) []string {
	d := func(p string) string { return filepath.Join(n.Dir, p) }
	return []string{d("containerd/state"), d("containerd/tmp"), d("containerd/runc"),
		n.ContainerdSocket, n.ContainerdSocket + ".ttrpc", n.shimDir()}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountsUnder(string(b), dir), nil
}

func parseMountsUnder(mountinfo, dir string) []string {
	var out []string
	for _, l := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMountPath(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// Hang freezes every process of a real node (kubelet, containerd, shims,
// containers) where it stands, through the v1 freezer on its cgroup
// subtree, and returns once the kernel reports the subtree FROZEN. Its
// heartbeats stop, so the control plane marks it NotReady; its mounts and
// containers stay. Resume lets it go on; PowerOff kills it as it is.
func (c *Cluster) Hang(ctx context.Context, n *RealNode) error {
	return c.setFreezer(ctx, n, "FROZEN")
}

// Resume thaws a node that Hang froze: every process goes on from where it
// stood, unaware of the time it lost.
func (c *Cluster) Resume(ctx context.Context, n *RealNode) error {
	return c.setFreezer(ctx, n, "THAWED")
}

func (c *Cluster) setFreezer(ctx context.Context, n *RealNode, to string) error {
	c.mu.Lock()
	rn := c.realNet
	c.mu.Unlock()
	if rn == nil {
		return fmt.Errorf("%s: the cluster has no real nodes (stopped?)", n.Name)
	}
	n.mu.Lock()
	off := n.poweredOff
	n.mu.Unlock()
	if off {
		return fmt.Errorf("%s is powered off: nothing to freeze or thaw", n.Name)
	}
	state := filepath.Join(rn.freezer, n.cgroup, "freezer.state")
	if err := os.WriteFile(state, []byte(to), 0o644); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s has no freezer cgroup %s: %w", n.Name, state, err)
		}
		return fmt.Errorf("%s: writing %s to %s: %w", n.Name, to, state, err)
	}
	// FREEZING lasts while a task is in uninterruptible sleep (a hung NFS
	// read, a fenced FUSE request): wait, with a deadline, for the kernel
	// to say it is done.
	begin := time.Now()
	err := waitFor(ctx, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("%s's cgroup %s", n.Name, to), func(context.Context) (bool, error) {
		b, err := os.ReadFile(state)
		if err != nil {
			return false, err
		}
		got := strings.TrimSpace(string(b))
		return got == to, fmt.Errorf("freezer.state %s", got)
	})
	if err != nil {
		return err
	}
	c.log.Logf("real node %s %s in %.2fs", n.Name, map[string]string{"FROZEN": "hung", "THAWED": "resumed"}[to], time.Since(begin).Seconds())
	return nil
}

// RestartKubelet kills the node's kubelet (SIGKILL, as a crash or an
// upgrade's restart past its stop timeout) and starts it again with the same
// configuration and root directory, while containerd and the containers run
// on: the new kubelet finds its pods' containers running and rebuilds its
// volumes from its directory (the kubelet's volume reconstruction). It
// returns once the new kubelet answers on its healthz port and the Node is
// Ready.
func (c *Cluster) RestartKubelet(ctx context.Context, n *RealNode) error {
	c.mu.Lock()
	rn := c.realNet
	c.mu.Unlock()
	if rn == nil {
		return fmt.Errorf("restart the kubelet of %s: the cluster has no real nodes (stopped?)", n.Name)
	}
	n.mu.Lock()
	off, old := n.poweredOff, n.kubelet
	n.mu.Unlock()
	if off || old == nil {
		return fmt.Errorf("restart the kubelet of %s: the node is powered off", n.Name)
	}
	begin := time.Now()
	old.Kill()
	// The daemons' cgroup exists: createCgroup only returns its procs files.
	procs, err := rn.createCgroup(n.cgroup + "/daemons")
	if err != nil {
		return fmt.Errorf("restart the kubelet of %s: %w", n.Name, err)
	}
	if err := c.startKubelet(ctx, rn, n, procs); err != nil {
		return fmt.Errorf("restart the kubelet of %s: %w", n.Name, err)
	}
	if err := c.waitRealNodeReady(ctx, n, 120*time.Second); err != nil {
		return fmt.Errorf("restart the kubelet of %s: %w", n.Name, err)
	}
	c.log.Logf("real node %s: kubelet restarted and the node Ready in %.1fs", n.Name, time.Since(begin).Seconds())
	return nil
}
