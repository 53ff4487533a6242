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

// Package procstat says what the processes of a local cluster cost, from
// /proc: a process's memory and CPU time (Read), its usage over a window
// (UsageOver), and a Sampler of every process of the cluster, of the
// process that runs it and of the machine, out of which a window known only
// afterwards (a failover's) is cut and said in a line: where its CPU went,
// by group of processes (the control plane's, the attacher, the node
// agents, the mock drivers, fence-bench itself). ProfileCPU profiles the
// process itself. test/bench's scale mode measures with it.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK)), 100 on every Linux this runs on.
const clockTicks = 100

// Stat is one reading of a process's memory and CPU from /proc.
type Stat struct {
	RSS, Peak int64 // bytes: VmRSS and VmHWM (the most it was ever resident)
	CPUTicks  int64 // utime + stime, in clock ticks
	At        time.Time
}

// parseProcStatus reads VmRSS and VmHWM from /proc/<pid>/status.
func parseProcStatus(b []byte) (rss, peak int64, err error) {
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: unexpected %q", key, value)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("no VmRSS and VmHWM in the status")
	}
	return rss, peak, nil
}

// parseProcStat reads utime + stime from /proc/<pid>/stat: fields 14 and
// 15, counted after the command name, which is in parentheses and may
// itself hold spaces and parentheses.
func parseProcStat(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	// After ")": field 3 (state) onwards.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var sum int64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// Usage is what one process cost over a window.
type Usage struct {
	Name      string
	RSS, Peak int64   // at the end of the window
	CPU       float64 // cores used on average over the window
}

// UsageOver is what the process named name cost from begin to end.
func UsageOver(name string, begin, end Stat) Usage {
	u := Usage{Name: name, RSS: end.RSS, Peak: end.Peak}
	if d := end.At.Sub(begin.At).Seconds(); d > 0 {
		u.CPU = float64(end.CPUTicks-begin.CPUTicks) / clockTicks / d
	}
	return u
}

// Read reads a process's memory and CPU from /proc.
func Read(pid int) (Stat, error) {
	st := Stat{At: time.Now()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	if st.RSS, st.Peak, err = parseProcStatus(b); err != nil {
		return st, err
	}
	if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil {
		return st, err
	}
	st.CPUTicks, err = parseProcStat(b)
	return st, err
}
