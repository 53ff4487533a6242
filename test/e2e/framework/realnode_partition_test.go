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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestPartitionCutsAndHeals: a node namespace on a bridge, as StartRealNodes
// makes it, reaches a listener on the bridge's address; partitioned, it
// does not (and the node's own end of the link stays configured); healed,
// it does again; Heal of a healed node and the stop path's heal of a node
// that is not partitioned do nothing. Needs root (namespaces, links), no
// kubelet.
func TestPartitionCutsAndHeals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces and links need root")
	}
	for _, p := range []string{"ip", "nsenter", "bash"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipped: %s not found", p)
		}
	}
	ctx := context.Background()
	// Names of this test only: StartRealNodes' are fence-br<k>, fence-<k>-*,
	// fv<k>-*, which a concurrent run's reclaim may look for.
	id := os.Getpid() % 100000
	sub := 20 + os.Getpid()%200
	rn := &realNet{bridge: fmt.Sprintf("fpbr%d", id), hostIP: fmt.Sprintf("10.219.%d.1", sub)}
	n := &RealNode{Name: "pt", IP: fmt.Sprintf("10.219.%d.10", sub), netns: fmt.Sprintf("fpart-%d", id), hostVeth: fmt.Sprintf("fpv%d", id)}
	if err := ipCmd(ctx, "link", "add", rn.bridge, "type", "bridge"); err != nil {
		t.Skipf("skipped: no bridge devices here: %v", err)
	}
	t.Cleanup(func() { _ = ipCmd(ctx, "link", "del", rn.bridge) })
	for _, args := range [][]string{{"addr", "add", rn.hostIP + "/24", "dev", rn.bridge}, {"link", "set", rn.bridge, "up"}} {
		if err := ipCmd(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The veth pair first: a namespace lives on while a socket of it
		// does, and its end of the pair with it.
		_ = ipCmd(ctx, "link", "del", n.hostVeth)
		_ = ipCmd(ctx, "netns", "delete", n.netns)
	})
	if err := n.createNetwork(ctx, rn); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", rn.hostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	// connects reports whether a TCP connection from the node's namespace
	// to the listener is established within a second.
	connects := func() bool {
		cmd := exec.CommandContext(ctx, "timeout", "1", "nsenter", "--net=/run/netns/"+n.netns, "--",
			"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", rn.hostIP, port))
		return cmd.Run() == nil
	}
	c := &Cluster{log: t}
	// A new link's carrier comes up asynchronously too (seen failing a
	// single try under load): wait for the first connection, with a
	// deadline.
	if err := WaitFor(ctx, 10*time.Second, "the node's namespace reaching the bridge before any partition", func(context.Context) (bool, error) {
		return connects(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.partitionReal(ctx, n); err != nil {
		t.Fatal(err)
	}
	if !n.Partitioned() {
		t.Error("Partitioned() is false after the partition")
	}
	if connects() {
		t.Fatal("the partitioned node's namespace still reaches the bridge")
	}
	if out, err := exec.Command("ip", "-n", n.netns, "addr", "show", "eth0").CombinedOutput(); err != nil || !strings.Contains(string(out), n.IP+"/24") {
		t.Errorf("the node's own address is gone during the partition: %s %v", out, err)
	}
	if err := c.healReal(ctx, n); err != nil {
		t.Fatal(err)
	}
	// The link's carrier comes back asynchronously: wait for the first
	// connection, with a deadline.
	if err := WaitFor(ctx, 10*time.Second, "the healed node reaching the bridge", func(context.Context) (bool, error) {
		return connects(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.healReal(ctx, n); err != nil {
		t.Errorf("a second heal: %v", err)
	}
	if err := n.healOnStop(ctx); err != nil {
		t.Errorf("the stop path's heal of a node that is not partitioned: %v", err)
	}
	// The stop path heals a partitioned node.
	if err := c.partitionReal(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := n.healOnStop(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "link", "show", n.hostVeth).CombinedOutput(); err != nil || !strings.Contains(string(out), ",UP") {
		t.Errorf("the stop path left %s down: %s %v", n.hostVeth, out, err)
	}
	n.poweredOff = true
	if err := c.partitionReal(ctx, n); err == nil {
		t.Error("a powered-off node was partitioned")
	}
}

func TestParseCRILog(t *testing.T) {
	log := "2026-11-25T21:00:00.000000001Z stdout F write 1 ok\n" +
		"2026-11-25T21:00:00.1Z stderr P half \n" +
		"2026-11-25T21:00:00.2Z stdout F write 2 ok\n" +
		"2026-11-25T21:00:00.3Z stderr F and half\n" +
		"2026-11-25T21:00:00.4Z stdout F \n" +
		"2026-11-25T21:00:00.5Z stdout F being wri"
	got, err := parseCRILog([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"stdout:write 1 ok", "stdout:write 2 ok", "stderr:half and half", "stdout:"}
	var have []string
	for _, l := range got {
		have = append(have, l.Stream+":"+l.Text)
	}
	if strings.Join(have, "|") != strings.Join(want, "|") {
		t.Errorf("parsed %q, want %q", have, want)
	}
	if !got[2].Time.Equal(time.Date(2026, 11, 25, 21, 0, 0, 100000000, time.UTC)) {
		t.Errorf("a joined line has the time of its first chunk, got %v", got[2].Time)
	}
	for _, bad := range []string{"nonsense\n", "yesterday stdout F x\n", "2026-11-25T21:00:00Z stdout X x\n"} {
		if _, err := parseCRILog([]byte(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// ContainerLog reads every restart's file in order, rotated files before
// the current one of their restart.
func TestContainerLog(t *testing.T) {
	n := &RealNode{Name: "x", Dir: t.TempDir()}
	dir := filepath.Join(n.Dir, "pod-logs", "default_w-0_uid1", "writer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"0.log.20261125-210000": "a", "0.log": "b", "1.log": "c", "10.log": "d", "unrelated.txt": "x",
	} {
		line := "2026-11-25T21:00:00Z stdout F " + text + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lines, err := n.ContainerLog("default", "w-0", types.UID("uid1"), "writer")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	if got := strings.Join(texts, ""); got != "abcd" {
		t.Errorf("read %q, want abcd", got)
	}
	if _, err := n.ContainerLog("default", "w-1", "uid2", "writer"); err == nil || !strings.Contains(err.Error(), "w-1") {
		t.Errorf("a missing log: %v", err)
	}
}
