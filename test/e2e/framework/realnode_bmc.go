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
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/csi-fence/fence-attacher/test/bmcsim"
)

// A BMC whose machine is a real node (issue 20, step 4): openipmi's ipmi_sim
// (test/bmcsim) on the real nodes' bridge, where the nodes' pods reach it as
// a management network, and a power off through it is the node's PowerOff.
//
// ipmi_sim's machine is a process it starts at power on and sends SIGTERM
// (SIGKILL kill_wait seconds later) at power off; it reports the power off
// once that process is gone. The machine here is this test binary run with
// NodeMachineFlag: it tells the framework over a socket that it runs, and
// on its SIGTERM asks the framework to power the node off and exits only
// once the framework says every process of the node has ended. So the BMC
// reports the node off only when it is (what a fence agent's status
// confirms), and powers it on (PowerOn: a reboot) when asked. If the
// machine dies without asking (SIGKILL), the node loses its power all the
// same.
//
// A test binary that starts node BMCs must hand the machine's arguments to
// RunNodeMachine first thing in its TestMain:
//
//	if len(os.Args) > 1 && os.Args[1] == framework.NodeMachineFlag {
//		os.Exit(framework.RunNodeMachine(os.Args[2:]))
//	}

// NodeMachineFlag, as a test binary's first argument, makes it the machine
// of a node BMC (RunNodeMachine) instead of running its tests.
const NodeMachineFlag = "-realnode.machine"

// machineKillWait is the machine's kill_wait: longer than a PowerOff may
// take (its own bounds are 30 s and 10 s), so that ipmi_sim's SIGKILL does
// not end the machine, and make the BMC report off, while the node still
// runs.
const machineKillWait = 60 * time.Second

// RunNodeMachine is the machine of a node BMC: args[0] is the framework's
// socket. It says "on <pid>" there and waits; on SIGTERM (the BMC's power
// off) it says "off" and exits once the framework answers "off" (the node
// is off). It exits when the framework closes the socket.
func RunNodeMachine(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "node machine: want the framework's socket")
		return 2
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	conn, err := net.Dial("unix", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "node machine:", err)
		return 1
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "on %d\n", os.Getpid()); err != nil {
		fmt.Fprintln(os.Stderr, "node machine:", err)
		return 1
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case <-term:
	case <-lines:
		return 0 // the framework went away: no machine outlives its test
	}
	if _, err := fmt.Fprintln(conn, "off"); err != nil {
		fmt.Fprintln(os.Stderr, "node machine: asking for the power off:", err)
		return 1
	}
	for l := range lines {
		if l == "off" {
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "node machine: the framework went away before the node was off")
	return 1
}

// NodeBMCOptions tune StartNodeBMC.
type NodeBMCOptions struct {
	// User and Password are the BMC's administrator (at most 16
	// characters each, IPMI's limit).
	User, Password string
	// Lie, a negative control, makes a faulty BMC: a power off ends the
	// machine process at once and reports the node off, leaving every
	// process of the node running.
	Lie bool
	// AfterPowerOff, if set, is called once a power off through the BMC has
	// ended every process of the node, before the BMC reports it off.
	AfterPowerOff func(context.Context) error
}

// PowerEvent is one power change of a node through its BMC.
type PowerEvent struct {
	Off bool // a power off; else a power on
	// Asked is when the machine heard of it: its SIGTERM, or its start.
	Asked time.Time
	// Done is when the node was off (every process ended) or, after a
	// power on, Ready again; zero while in progress, or when the BMC lied.
	Done time.Time
	Lied bool
	Err  error
}

func (e PowerEvent) String() string {
	what := "on"
	if e.Off {
		what = "off"
	}
	s := fmt.Sprintf("power %s asked at %s", what, e.Asked.Format(time.RFC3339Nano))
	switch {
	case e.Lied:
		s += ", reported done without cutting the power (Lie)"
	case e.Err != nil:
		s += ", failed: " + e.Err.Error()
	case !e.Done.IsZero():
		s += fmt.Sprintf(", done %.2fs later", e.Done.Sub(e.Asked).Seconds())
	}
	return s
}

// NodeBMC is a running BMC of a real node.
type NodeBMC struct {
	// Host and Port are where the BMC listens (IPMI over LAN, UDP): the
	// real nodes' bridge address, reachable from the nodes' pods.
	Host string
	Port int

	c      *Cluster
	node   *RealNode
	opts   NodeBMCOptions
	bmc    *bmcsim.BMC
	l      net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	events   []PowerEvent
	stopping bool
	stopOnce sync.Once
}

// StartNodeBMC starts a BMC whose machine is real node n, running (n must
// be on). Stop, or the cluster's, stops it; stopping it does not power the
// node off.
func (c *Cluster) StartNodeBMC(ctx context.Context, n *RealNode, opts NodeBMCOptions) (*NodeBMC, error) {
	c.mu.Lock()
	rn := c.realNet
	c.mu.Unlock()
	if rn == nil || c.realNode(n.Name) != n {
		return nil, fmt.Errorf("BMC of %s: not a real node of this cluster", n.Name)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// An abstract socket: no path (and its 107 bytes) to make or remove.
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	addr := "@fence-e2e-bmc-" + n.Name + "-" + hex.EncodeToString(rnd[:])
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("BMC of %s: %w", n.Name, err)
	}
	bctx, cancel := context.WithCancel(context.Background())
	b := &NodeBMC{c: c, node: n, opts: opts, l: l, ctx: bctx, cancel: cancel}
	b.wg.Add(1)
	go b.serve()
	dir := filepath.Join(c.WorkDir, "bmc-"+n.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Stop()
		return nil, err
	}
	b.bmc, err = bmcsim.Start(ctx, bmcsim.Config{Dir: dir, Host: rn.hostIP, User: opts.User, Password: opts.Password,
		Machine: []string{exe, NodeMachineFlag, addr}, KillWait: machineKillWait})
	if err != nil {
		b.Stop()
		return nil, fmt.Errorf("BMC of %s: %w", n.Name, err)
	}
	b.Host, b.Port = b.bmc.Host, b.bmc.Port
	if _, err := b.bmc.WaitMachine(ctx, true); err != nil {
		b.Stop()
		return nil, fmt.Errorf("BMC of %s: its machine does not start: %w; output: %s", n.Name, err, b.bmc.Output())
	}
	c.atStop(b.Stop)
	lie := ""
	if opts.Lie {
		lie = " (a lying BMC: its power off cuts nothing)"
	}
	c.log.Logf("BMC of real node %s on %s:%d (ipmi_sim, %s)%s", n.Name, b.Host, b.Port, dir, lie)
	return b, nil
}

// MachinePID returns the pid of the BMC's machine process; ok is false when
// the BMC reports the power off.
func (b *NodeBMC) MachinePID() (pid int, ok bool) { return b.bmc.MachinePID() }

// Events returns the power changes so far, in order.
func (b *NodeBMC) Events() []PowerEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]PowerEvent(nil), b.events...)
}

// Output is what ipmi_sim and its machine printed.
func (b *NodeBMC) Output() string {
	if b.bmc == nil {
		return ""
	}
	return b.bmc.Output()
}

// Stop stops ipmi_sim and its machine; the node stays as it is.
func (b *NodeBMC) Stop() {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		b.stopping = true
		b.mu.Unlock()
		if b.bmc != nil {
			b.bmc.Stop()
		}
		b.l.Close()
		b.cancel()
		b.wg.Wait()
	})
}

func (b *NodeBMC) serve() {
	defer b.wg.Done()
	for {
		conn, err := b.l.Accept()
		if err != nil {
			return // closed
		}
		b.wg.Add(1)
		go b.handle(conn)
	}
}

// handle serves one machine: from its start (the power is on) to its end.
func (b *NodeBMC) handle(conn net.Conn) {
	defer b.wg.Done()
	defer conn.Close()
	// The machine ends with the BMC: its end must not wait for Stop.
	go func() {
		<-b.ctx.Done()
		conn.Close()
	}()
	sc := bufio.NewScanner(conn)
	if !sc.Scan() {
		return
	}
	if pid, ok := strings.CutPrefix(sc.Text(), "on "); ok {
		if _, err := strconv.Atoi(pid); err == nil {
			b.machineStarted()
		}
	}
	for sc.Scan() {
		if sc.Text() == "off" {
			b.powerOff()
			_, _ = fmt.Fprintln(conn, "off")
			return
		}
	}
	b.mu.Lock()
	stopping := b.stopping
	b.mu.Unlock()
	if !stopping {
		// The machine died without a power off: the node lost its power.
		b.c.log.Logf("BMC of %s: its machine ended without a power off; powering the node off", b.node.Name)
		b.powerOff()
	}
}

// machineStarted boots the node if the machine's start is a power on (the
// node was off); the BMC's first machine finds it running.
func (b *NodeBMC) machineStarted() {
	b.node.mu.Lock()
	off := b.node.poweredOff
	b.node.mu.Unlock()
	if !off {
		return
	}
	i := b.record(PowerEvent{Asked: time.Now()})
	b.c.log.Logf("BMC of %s: power on; the node boots", b.node.Name)
	// PowerOn waits until the node is Ready; the BMC answers meanwhile.
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		err := b.c.PowerOn(b.ctx, b.node, PowerOnOptions{})
		b.finish(i, err)
	}()
}

// powerOff cuts the node's power (unless the BMC lies) and returns once
// every process of the node has ended.
func (b *NodeBMC) powerOff() {
	i := b.record(PowerEvent{Off: true, Asked: time.Now(), Lied: b.opts.Lie})
	if b.opts.Lie {
		b.c.log.Logf("BMC of %s: power off reported done, the node left running (Lie)", b.node.Name)
		return
	}
	err := b.c.PowerOff(b.ctx, b.node)
	if err == nil && b.opts.AfterPowerOff != nil {
		err = b.opts.AfterPowerOff(b.ctx)
	}
	b.finish(i, err)
	if err != nil {
		b.c.log.Logf("BMC of %s: power off failed: %v", b.node.Name, err)
		return
	}
	b.c.log.Logf("BMC of %s: powered off", b.node.Name)
}

func (b *NodeBMC) record(e PowerEvent) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, e)
	return len(b.events) - 1
}

func (b *NodeBMC) finish(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events[i].Done, b.events[i].Err = time.Now(), err
}
