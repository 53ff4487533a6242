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

// Package bmcsim runs a real IPMI BMC on loopback (or another local
// address, Config.Host) for tests of power fencing: openipmi's ipmi_sim (Debian package openipmi), configured so that
// the "machine" it powers is a process of the test's choosing, the simulated
// node. Powering the BMC off really stops that process, and with it the
// node's writes; powering it on starts it again.
//
// How ipmi_sim (2.0.33, Debian bookworm) powers its machine, read from its
// source (lanserv/bmc.c, bmc_chassis.c, serial_ipmi.c, ipmi_sim.c) and,
// except for the connected-VM case, seen here with fence_ipmilan and
// ipmitool:
//
//   - startcmd is run as /bin/sh -c "exec <startcmd>", so it must be one
//     simple command: in a compound command only the first part runs (the
//     exec replaces the shell), and power reads off as soon as it exits. The
//     machine is then ipmi_sim's child, with ipmi_sim's stdout and stderr.
//     Power status is "on" while that child exists (until ipmi_sim reaps
//     it), so "off" from the BMC means the process is gone.
//   - "chassis power off" is refused ("Invalid data field in request",
//     completion code 0xcc) unless the system interface (channel 15) can
//     control power. Only a `serial 15 ... codec VM` line gives it that (the
//     interface qemu's ipmi-bmc-extern connects to); no VM needs to connect.
//     Without that line, status and "on" work but fence_ipmilan's off fails
//     after its power_timeout with the machine still running.
//   - With no VM connected, power off skips the graceful shutdown request and
//     sends SIGTERM at the simulator's next one-second tick, then SIGKILL
//     kill_wait seconds later if the machine is still there (kill_wait 0
//     would send none). A machine that ignores SIGTERM (a hung node) is
//     therefore still powered off, kill_wait seconds later. poweroff_wait is
//     the grace a connected VM gets before the SIGTERM; 0 there disables both
//     kills (source only: no VM connects here), hence 1.
//   - ipmi_sim does not stop its machine when it exits itself: Stop kills the
//     process group, and a machine run by RunMachine exits when it is
//     orphaned.
//   - ipmitool 1.8.19 with lanplus asks for the channel's cipher suites, which
//     ipmi_sim does not implement: each call then waits 10-14 s for timeouts
//     before falling back. Name a cipher suite (fence_ipmilan's cipher=3,
//     ipmitool -C 3) and a call takes a few milliseconds.
package bmcsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config describes a BMC and its machine.
type Config struct {
	// Dir holds the configuration, the BMC's persistent state and nothing
	// else; a test's t.TempDir().
	Dir string
	// User and Password are the BMC's administrator (IPMI user 2).
	User, Password string
	// Machine is the command line of the simulated node: what the BMC starts
	// at power on and kills at power off. No argument may hold a double quote
	// or a line break (ipmi_sim's configuration has no escapes).
	Machine []string
	// PoweredOff, if set, starts the BMC with the machine off.
	PoweredOff bool
	// KillWait is how long after SIGTERM a machine still running is killed
	// with SIGKILL (default 2 s, whole seconds).
	KillWait time.Duration
	// Env is ipmi_sim's environment and so its machine's; nil: this process'.
	Env []string
	// Host is the address the BMC listens on (IPMI over LAN); default
	// 127.0.0.1. An address of a bridge makes it reachable from network
	// namespaces on that bridge (a real node's pods), as a BMC on the
	// management network is. The system interface stays on loopback.
	Host string
}

// BMC is a running ipmi_sim.
type BMC struct {
	// Host and Port are where the BMC listens (IPMI over LAN, UDP).
	Host string
	Port int

	cfg    Config
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// LanConf is ipmi_sim's lan.conf for cfg, listening on lanPort (UDP) of
// cfg.Host with its system interface on serialPort (TCP) of 127.0.0.1.
func LanConf(cfg Config, lanPort, serialPort int) (string, error) {
	if cfg.User == "" || cfg.Password == "" {
		return "", errors.New("bmcsim: a user and a password are needed")
	}
	for _, s := range []string{cfg.User, cfg.Password} {
		if strings.ContainsAny(s, "\"\n") || len(s) > 16 {
			return "", errors.New("bmcsim: user and password are at most 16 characters (IPMI), with no double quote or line break")
		}
	}
	if len(cfg.Machine) == 0 {
		return "", errors.New("bmcsim: no machine command")
	}
	if ip := net.ParseIP(cfg.host()); ip == nil || ip.To4() == nil {
		return "", fmt.Errorf("bmcsim: host %q: want an IPv4 address", cfg.host())
	}
	var quoted []string
	for _, a := range cfg.Machine {
		if strings.ContainsAny(a, "\"\n") {
			return "", fmt.Errorf("bmcsim: machine argument %q has a double quote or a line break", a)
		}
		// Single quotes for the shell that runs startcmd.
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	startcmd := strings.Join(quoted, " ")
	killWait := int(cfg.KillWait / time.Second)
	if killWait <= 0 {
		killWait = 2
	}
	conf := fmt.Sprintf(`# Written by bmcsim: one BMC whose machine is a local process.
name "bmcsim"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  # The system interface, where a VM would connect: it is what lets the
  # chassis power commands reach startcmd's process at all.
  serial 15 127.0.0.1 %d codec VM
  startcmd "%s"
  startnow %t
  poweroff_wait 1
  kill_wait %d
  user 2 true "%s" "%s" admin 10 md5
`, cfg.host(), lanPort, serialPort, startcmd, !cfg.PoweredOff, killWait, cfg.User, cfg.Password)
	for i, line := range strings.Split(conf, "\n") {
		if len(line) >= 1000 {
			return "", fmt.Errorf("bmcsim: lan.conf line %d is %d bytes, ipmi_sim reads at most 1023", i+1, len(line))
		}
	}
	return conf, nil
}

func (cfg Config) host() string {
	if cfg.Host == "" {
		return "127.0.0.1"
	}
	return cfg.Host
}

// CommandFile is ipmi_sim's command file: one management controller, the
// BMC, at IPMB address 0x20 (the ipmi_sim_cmd(5) minimum: mc_add, mc_setbmc,
// mc_enable).
const CommandFile = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
mc_enable 0x20
`

// Start runs ipmi_sim for cfg and returns once it answers on its port.
func Start(ctx context.Context, cfg Config) (*BMC, error) {
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		return nil, fmt.Errorf("bmcsim: %w (hack/install-fence-agents.sh installs openipmi)", err)
	}
	var lastErr error
	// The free ports are found by binding and releasing them; another
	// process may take one in between, so a failed start is tried again.
	for try := 0; try < 3; try++ {
		b, err := start(ctx, cfg)
		if err == nil {
			return b, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, cfg Config) (*BMC, error) {
	lanPort, err := freePort("udp", cfg.host())
	if err != nil {
		return nil, err
	}
	serialPort, err := freePort("tcp", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	conf, err := LanConf(cfg, lanPort, serialPort)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(cfg.Dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	confPath, cmdPath := filepath.Join(cfg.Dir, "lan.conf"), filepath.Join(cfg.Dir, "bmc.emu")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cmdPath, []byte(CommandFile), 0o600); err != nil {
		return nil, err
	}

	b := &BMC{Host: cfg.host(), Port: lanPort, cfg: cfg, out: &syncBuffer{}, exited: make(chan struct{})}
	// -n: no console on stdin/stdout; -s: persistent state here, not in
	// /var/ipmi_sim.
	b.cmd = exec.Command("ipmi_sim", "-n", "-c", confPath, "-f", cmdPath, "-s", state)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.Env = cfg.Env
	// Its own process group, which its machine inherits: Stop kills both.
	// Pdeathsig: a test binary that dies leaves no BMC behind.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	b.cmd.WaitDelay = time.Second
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()

	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		err := b.Ping(pingCtx)
		if err == nil {
			return b, nil
		}
		select {
		case <-b.exited:
			return nil, fmt.Errorf("bmcsim: ipmi_sim exited: %s", b.Output())
		case <-pingCtx.Done():
			b.Stop()
			return nil, fmt.Errorf("bmcsim: ipmi_sim does not answer on %s:%d: %v; output: %s", b.Host, lanPort, err, b.Output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Ping sends an RMCP presence ping (ASF, the ping every BMC answers without
// a session) and waits for the pong.
func (b *BMC) Ping(ctx context.Context) error {
	conn, err := net.Dial("udp", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(500 * time.Millisecond)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	// RMCP v1.0, no ACK (seq 0xff), class ASF; ASF: IANA 4542, Presence
	// Ping (0x80), tag, reserved, no data.
	ping := []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0x2a, 0x00, 0x00}
	if _, err := conn.Write(ping); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	if n < 10 || buf[3] != 0x06 || buf[8] != 0x40 || buf[9] != 0x2a {
		return fmt.Errorf("bmcsim: not a presence pong: % x", buf[:n])
	}
	return nil
}

// MachinePID returns the pid of the running machine: the live child of
// ipmi_sim. ok is false when the machine is off.
func (b *BMC) MachinePID() (pid int, ok bool) {
	return liveChild(b.cmd.Process.Pid)
}

// WaitMachine waits until the machine runs (on) or not (!on), and returns
// its pid (0 when off).
func (b *BMC) WaitMachine(ctx context.Context, on bool) (int, error) {
	for {
		pid, running := b.MachinePID()
		if running == on {
			return pid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("bmcsim: machine running=%v, waiting for %v: %w", running, on, ctx.Err())
		case <-b.exited:
			return 0, fmt.Errorf("bmcsim: ipmi_sim exited: %s", b.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Output is what ipmi_sim (and its machine) printed.
func (b *BMC) Output() string { return b.out.String() }

// Stop kills ipmi_sim and its machine (one process group) and waits for
// ipmi_sim.
func (b *BMC) Stop() {
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
}

func freePort(network, host string) (int, error) {
	if network == "udp" {
		c, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// liveChild finds a child of parent that is not a zombie, in /proc.
func liveChild(parent int) (int, bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, ppid, ok := procStat(pid)
		if ok && ppid == parent && state != "Z" && state != "X" {
			return pid, true
		}
	}
	return 0, false
}

// ProcessAlive says whether pid exists and is not a zombie.
func ProcessAlive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// procStat reads a process' state and parent from /proc/<pid>/stat (the
// command name, in parentheses, may hold spaces: parse after the last ')').
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
