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
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// realNode returns the real node called name, nil if there is none (a
// KWOK node, or no real nodes).
func (c *Cluster) realNode(name string) *RealNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.realNet == nil {
		return nil
	}
	for _, n := range c.realNet.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// partitionReal cuts real node n off the network while everything on it
// keeps running: its kubelet, containerd and containers go on (a
// partitioned writer keeps writing to storage it can still reach, which is
// what fencing is for), but no packet passes between the node's network
// namespace and the bridge, so neither the apiserver's forwarder nor the
// other nodes are reachable, nor is the node from them. The cut is the host
// end of the node's veth pair going down, as a switch port would: the
// node's own addresses, routes and connections stay as they are,
// connections stall rather than end, and healReal brings the port up
// again. The Node object is left as it is: the control plane notices the
// silence as it would a real partition.
func (c *Cluster) partitionReal(ctx context.Context, n *RealNode) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.poweredOff {
		return fmt.Errorf("partition %s: the node is powered off", n.Name)
	}
	if err := n.setLink(ctx, false); err != nil {
		return fmt.Errorf("partition %s: %w", n.Name, err)
	}
	n.partitioned = true
	c.log.Logf("real node %s partitioned (%s down): its processes keep running", n.Name, n.hostVeth)
	return nil
}

// healReal undoes partitionReal: the node's veth is up again and its
// connections resume. Healing a node that is not partitioned does nothing.
func (c *Cluster) healReal(ctx context.Context, n *RealNode) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.partitioned {
		return nil
	}
	if err := n.setLink(ctx, true); err != nil {
		return fmt.Errorf("heal %s: %w", n.Name, err)
	}
	n.partitioned = false
	c.log.Logf("real node %s healed (%s up)", n.Name, n.hostVeth)
	return nil
}

// Partitioned reports whether n is cut off by Partition.
func (n *RealNode) Partitioned() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.partitioned
}

// setLink brings the host end of the node's veth pair up or down.
func (n *RealNode) setLink(ctx context.Context, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd(ctx, "link", "set", n.hostVeth, state)
}

// healOnStop brings a partitioned node's veth up again as the node is
// stopped, so that nothing of the partition outlives the run even if the
// namespace (which takes the veth pair with it) cannot be deleted.
func (n *RealNode) healOnStop(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.partitioned {
		return nil
	}
	n.partitioned = false
	if err := n.setLink(ctx, true); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	return nil
}

// LogLine is one line a container wrote, as its node's kubelet keeps it.
type LogLine struct {
	Time   time.Time
	Stream string // stdout or stderr
	Text   string
}

// ContainerLog reads what container of pod (namespace, name, uid) wrote,
// from the node's own log directory (the kubelet's podLogsDir), every
// restart of it in order: unlike `kubectl logs`, this needs no apiserver
// and no kubelet, so it works on a partitioned node too.
func (n *RealNode) ContainerLog(namespace, pod string, uid types.UID, container string) ([]LogLine, error) {
	dir := filepath.Join(n.Dir, "pod-logs", fmt.Sprintf("%s_%s_%s", namespace, pod, uid), container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the log of container %s of pod %s/%s on %s: %w", container, namespace, pod, n.Name, err)
	}
	// <restart count>.log, and rotated ones <n>.log.<timestamp>: by
	// restart, the current file of each last.
	type logFile struct {
		restart int
		name    string
	}
	var files []logFile
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), ".")
		r, err := strconv.Atoi(num)
		if err != nil || !strings.Contains(e.Name(), ".log") {
			continue
		}
		files = append(files, logFile{r, e.Name()})
	}
	sort.Slice(files, func(i, j int) bool {
		a, b := files[i], files[j]
		if a.restart != b.restart {
			return a.restart < b.restart
		}
		aCur, bCur := strings.HasSuffix(a.name, ".log"), strings.HasSuffix(b.name, ".log")
		if aCur != bCur {
			return bCur
		}
		return a.name < b.name
	})
	var out []LogLine
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return nil, err
		}
		lines, err := parseCRILog(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, f.name), err)
		}
		out = append(out, lines...)
	}
	return out, nil
}

// parseCRILog reads the CRI log format containerd writes: one line per
// chunk, "<RFC 3339 time> <stream> <P|F> <text>", a partial chunk (P)
// continued by the next of its stream up to a full one (F). A last line
// still being written (no newline yet) is left out.
func parseCRILog(b []byte) ([]LogLine, error) {
	var out []LogLine
	partial := map[string]*LogLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	complete := bytes.HasSuffix(b, []byte("\n"))
	n := bytes.Count(b, []byte("\n"))
	for i := 0; sc.Scan(); i++ {
		if i == n && !complete {
			break
		}
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) < 3 {
			return nil, fmt.Errorf("malformed CRI log line %q", sc.Text())
		}
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			return nil, fmt.Errorf("malformed CRI log line %q: %w", sc.Text(), err)
		}
		text := ""
		if len(f) == 4 {
			text = f[3]
		}
		l := partial[f[1]]
		if l == nil {
			l = &LogLine{Time: ts, Stream: f[1]}
		}
		l.Text += text
		switch f[2] {
		case "P":
			partial[f[1]] = l
		case "F":
			delete(partial, f[1])
			out = append(out, *l)
		default:
			return nil, fmt.Errorf("malformed CRI log line %q: tag %q", sc.Text(), f[2])
		}
	}
	return out, sc.Err()
}

// ContainerLogFollower reads a container's log file as it grows, through a
// descriptor it keeps open: the kubelet removes the dead containers of a
// deleted pod, their logs with them, within a second or two of their end
// (which ContainerLog, reading by path, may then miss), and a removed
// file stays readable to whoever holds it open.
type ContainerLogFollower struct {
	path   string
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	data []byte
	err  error
}

// FollowContainerLog follows the log of the first run (restart count 0) of
// container of pod (namespace, name, uid) on the node, from when the file
// appears until Stop.
func (n *RealNode) FollowContainerLog(ctx context.Context, namespace, pod string, uid types.UID, container string) *ContainerLogFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &ContainerLogFollower{
		path:   filepath.Join(n.Dir, "pod-logs", fmt.Sprintf("%s_%s_%s", namespace, pod, uid), container, "0.log"),
		cancel: cancel, done: make(chan struct{}),
	}
	go f.follow(ctx)
	return f
}

// followPoll is how often the follower looks for the file and for more of it.
const followPoll = 100 * time.Millisecond

func (f *ContainerLogFollower) follow(ctx context.Context) {
	defer close(f.done)
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	var file *os.File
	defer func() {
		if file != nil {
			file.Close()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		if file == nil {
			var err error
			if file, err = os.Open(f.path); err != nil && !os.IsNotExist(err) {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
		}
		for file != nil {
			n, err := file.Read(buf)
			f.mu.Lock()
			f.data = append(f.data, buf[:n]...)
			f.mu.Unlock()
			if err != nil || n == 0 {
				break // io.EOF: no more yet
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Lines returns the complete lines read so far.
func (f *ContainerLogFollower) Lines() ([]LogLine, error) {
	f.mu.Lock()
	data, err := append([]byte(nil), f.data...), f.err
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		if _, serr := os.Stat(f.path); serr != nil {
			return nil, fmt.Errorf("nothing read from %s yet: %w", f.path, serr)
		}
	}
	return parseCRILog(data)
}

// Stop ends the following; Lines keeps what was read.
func (f *ContainerLogFollower) Stop() {
	f.cancel()
	<-f.done
}
