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
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var metav1GetOptions = metav1.GetOptions{}

// PowerOff ends every process of a real node at once, as a power cut does:
// kubelet, containerd, the shims and every container. It freezes the node's
// cgroup subtree first (the v1 freezer), so that nothing in it can fork or
// react while it is being killed, SIGKILLs every process in the subtree of
// every hierarchy, thaws it so that the kills land, and returns once the
// subtree holds no process. The node's Node object is left as it is: the
// control plane notices it stopped as it would a real one.
func (c *Cluster) PowerOff(ctx context.Context, n *RealNode) error {
	n.mu.Lock()
	if n.poweredOff {
		n.mu.Unlock()
		return nil
	}
	n.poweredOff = true
	n.mu.Unlock()
	daemons := slices.DeleteFunc([]*Process{n.kubelet, n.containerd}, func(p *Process) bool { return p == nil })
	for _, p := range daemons {
		p.markStopped() // its end is intended: Alive must not report it
	}
	begin := time.Now()
	killed, frozen, err := c.realNet.killCgroup(ctx, n.cgroup, 30*time.Second)
	if err != nil {
		return fmt.Errorf("power off %s: %w", n.Name, err)
	}
	how := ""
	if !frozen {
		how = " (the freezer did not reach FROZEN within its bound: a task in uninterruptible sleep; killed as they stood)"
	}
	for _, p := range daemons {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			return fmt.Errorf("power off %s: %s still running after its cgroup was emptied", n.Name, p.Name)
		}
	}
	c.log.Logf("real node %s powered off: %d processes killed in %.2fs%s", n.Name, killed, time.Since(begin).Seconds(), how)
	return nil
}

// Processes returns the PIDs of every process in the node's cgroup subtree
// (in any v1 hierarchy): its kubelet, containerd, shims and containers.
func (c *Cluster) Processes(n *RealNode) ([]int, error) {
	return c.realNet.cgroupPids(n.cgroup)
}

// cgroupPids lists the processes in path's subtree in every hierarchy.
func (rn *realNet) cgroupPids(path string) ([]int, error) {
	seen := map[int]bool{}
	for _, h := range rn.hierarchies {
		root := filepath.Join(h, path)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile, or never made in this hierarchy
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}

// killCgroup freezes path's subtree, SIGKILLs every process in it, thaws
// it and waits until it is empty; it returns how many processes it killed
// and whether the subtree reached FROZEN before the kills.
func (rn *realNet) killCgroup(ctx context.Context, path string, timeout time.Duration) (int, bool, error) {
	state := filepath.Join(rn.freezer, path, "freezer.state")
	frozen, reached := false, false
	if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err == nil {
		frozen = true
		// A task in uninterruptible sleep delays FROZEN; the kills and the
		// thaw below end it anyway, so the wait is bounded and not fatal.
		reached = waitFor(ctx, 5*time.Second, 10*time.Millisecond, "freezing "+path, func(context.Context) (bool, error) {
			b, err := os.ReadFile(state)
			return err == nil && strings.TrimSpace(string(b)) == "FROZEN", err
		}) == nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, false, fmt.Errorf("freezing %s: %w", path, err)
	}
	killed := map[int]bool{}
	err := waitFor(ctx, timeout, 20*time.Millisecond, "every process of "+path+" to end", func(context.Context) (bool, error) {
		pids, err := rn.cgroupPids(path)
		if err != nil {
			return false, err
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed[pid] = true
			}
		}
		if frozen {
			// Thawed only after the first round of kills: each process
			// then dies as it wakes, none runs another instruction.
			if err := os.WriteFile(state, []byte("THAWED"), 0o644); err != nil {
				return false, err
			}
			frozen = false
		}
		return len(pids) == 0, nil
	})
	if err != nil {
		pids, _ := rn.cgroupPids(path)
		return len(killed), reached, fmt.Errorf("%w (left: %v)", err, pids)
	}
	return len(killed), reached, nil
}

// removeCgroup removes path's subtree in every hierarchy, deepest first.
// A cgroup whose last task has just died may still be busy for a moment, so
// rmdir is retried, within one deadline for the whole removal: a cgroup that
// still holds a process must not cost every other one a full wait.
func (rn *realNet) removeCgroup(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, h := range rn.hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for {
				err := syscall.Rmdir(dirs[i])
				if err == nil || errors.Is(err, syscall.ENOENT) {
					break
				}
				if time.Now().After(deadline) {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir (deepest first):
// containerd's overlay root file systems, its sandboxes' shm and network
// namespace mounts, the kubelet's volume mounts.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountPath(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, mp := range mounts {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stopRealNodes powers off every real node and removes what they made:
// mounts, network namespaces, veths, the bridge, cgroups, the kubelet's
// container log links, their state (their logs stay in the work dir's logs).
func (c *Cluster) stopRealNodes() {
	c.mu.Lock()
	rn := c.realNet
	c.realNet = nil
	c.mu.Unlock()
	if rn == nil {
		return
	}
	ctx := context.Background()
	failed := false
	report := func(err error) {
		if err != nil {
			failed = true
			c.log.Logf("real nodes cleanup: %v", err)
		}
	}
	c.mu.Lock()
	nodes := rn.nodes
	c.mu.Unlock()
	// Every node's subtree is emptied, also a node powered off before: it
	// is then empty already, unless something was left, which must die
	// before its cgroups can go.
	for _, n := range nodes {
		n.mu.Lock()
		n.poweredOff = true
		n.mu.Unlock()
		for _, p := range []*Process{n.kubelet, n.containerd} {
			if p != nil {
				p.markStopped()
			}
		}
		_, _, err := rn.killCgroup(ctx, n.cgroup, 30*time.Second)
		report(err)
	}
	if rn.forward != nil {
		rn.forward.Close()
	}
	for _, n := range nodes {
		report(n.healOnStop(ctx))
		report(unmountUnder(n.Dir))
		report(unmountUnder(n.shimDir()))
		report(ipCmd(ctx, "netns", "delete", n.netns))
		// The namespace, and its end of the veth pair with it, lives on
		// while a socket of it does (a connection in TIME_WAIT): delete
		// the pair now rather than leave the host end behind.
		if err := ipCmd(ctx, "link", "del", n.hostVeth); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			report(err)
		}
		report(rn.removeCgroup(n.cgroup, 10*time.Second))
		removeContainerLogLinks(n.Dir)
		for _, d := range []string{"containerd", "kubelet", "cni-ipam"} {
			report(os.RemoveAll(filepath.Join(n.Dir, d)))
		}
		report(os.RemoveAll(filepath.Dir(n.shimDir())))
	}
	// The shared bind mount of the nodes' directory (makeSharedMount),
	// with anything a node plugin left under it.
	report(unmountUnder(c.NodesDir()))
	report(rn.removeCgroup(fmt.Sprintf("/fence-e2e-%d", rn.index), 5*time.Second))
	if rn.bridge != "" {
		report(ipCmd(ctx, "link", "del", rn.bridge))
	}
	for n, v := range rn.sysctls {
		if cur := readSysctls([]string{n}); cur[n] != v {
			report(os.WriteFile("/proc/sys/"+n, []byte(v), 0o644))
		}
	}
	// The owner record goes last, and only when everything else went: what
	// is left is then the next run's to reclaim.
	if !failed {
		_ = os.Remove(filepath.Join(runDir(rn.index), "owner"))
		_ = os.Remove(runDir(rn.index))
	}
}

// removeContainerLogLinks removes the kubelet's links in
// /var/log/containers (a fixed, host-wide path) to the node's pod logs.
func removeContainerLogLinks(nodeDir string) {
	const dir = "/var/log/containers"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, nodeDir+"/") {
			_ = os.Remove(p)
		}
	}
}

// forwarder accepts TCP connections on one address and relays each to
// target: the real nodes reach the apiserver, which listens on loopback
// only, at the bridge's address.
type forwarder struct {
	addr   string
	target string
	l      net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newForwarder(addr, target string) (*forwarder, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forwarding the apiserver to %s: %w", addr, err)
	}
	f := &forwarder{addr: addr, target: target, l: l, conns: map[net.Conn]struct{}{}}
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	for {
		in, err := f.l.Accept()
		if err != nil {
			return // closed
		}
		go f.relay(in)
	}
}

func (f *forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *forwarder) relay(in net.Conn) {
	out, err := net.DialTimeout("tcp", f.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !f.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	defer func() {
		f.mu.Lock()
		delete(f.conns, in)
		delete(f.conns, out)
		f.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction drains, then both end.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
	in.Close()
	out.Close()
}

// Close stops accepting and ends every relayed connection.
func (f *forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	f.l.Close()
	for c := range conns {
		c.Close()
	}
}
