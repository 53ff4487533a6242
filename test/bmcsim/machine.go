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

package bmcsim

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MachineFlag, as a test binary's first argument, makes it run RunMachine
// with the arguments after it instead of its tests (see MachineCommand).
const MachineFlag = "-bmcsim.machine"

// HeartbeatInterval is how often a machine writes.
const HeartbeatInterval = 10 * time.Millisecond

// MachineCommand is the command line that makes the running test binary a
// machine writing heartbeats to path; with ignoreTERM it ignores SIGTERM,
// like a hung node that no polite shutdown reaches. The test's TestMain must
// hand it to RunMachine:
//
//	if len(os.Args) > 1 && os.Args[1] == bmcsim.MachineFlag {
//		os.Exit(bmcsim.RunMachine(os.Args[2:]))
//	}
func MachineCommand(path string, ignoreTERM bool) ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := []string{exe, MachineFlag, path}
	if ignoreTERM {
		cmd = append(cmd, "ignore-sigterm")
	}
	return cmd, nil
}

// RunMachine is the simulated node: it appends "pid seq unixnano" to the
// heartbeat file every HeartbeatInterval, as a workload writes to its
// volume, until it is killed. By default SIGTERM ends it at once (Go's
// default); "ignore-sigterm" leaves only SIGKILL. It also exits when its
// parent (ipmi_sim) is gone, so that no machine outlives its BMC.
func RunMachine(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "bmcsim machine: heartbeat file needed")
		return 2
	}
	if len(args) > 1 && args[1] == "ignore-sigterm" {
		signal.Ignore(syscall.SIGTERM)
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bmcsim machine:", err)
		return 1
	}
	parent := os.Getppid()
	pid := os.Getpid()
	for seq := 1; ; seq++ {
		if _, err := fmt.Fprintf(f, "%d %d %d\n", pid, seq, time.Now().UnixNano()); err != nil {
			return 1
		}
		if os.Getppid() != parent {
			return 0
		}
		time.Sleep(HeartbeatInterval)
	}
}

// Beat is one heartbeat line.
type Beat struct {
	PID  int
	Seq  int
	Time time.Time
}

// Heartbeats reads a heartbeat file: its size and its last complete beat.
func Heartbeats(path string) (size int64, last Beat, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, Beat{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, Beat{}, err
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line being written
		}
		pid, err1 := strconv.Atoi(fields[0])
		seq, err2 := strconv.Atoi(fields[1])
		ns, err3 := strconv.ParseInt(fields[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			last = Beat{PID: pid, Seq: seq, Time: time.Unix(0, ns)}
		}
	}
	return fi.Size(), last, sc.Err()
}
