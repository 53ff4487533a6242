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

package procstat

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// Where a failover's CPU goes. On this machine every process of the cluster
// shares two cores; the window that matters (the first pod eligible -> the
// last attached elsewhere) is known only afterwards, so the CPU time of
// every process is sampled through the failover and the window cut out of
// the samples.

// cpuSample is one reading of the CPU time used so far.
type cpuSample struct {
	at    time.Time
	ticks map[int]int64  // by PID: utime + stime, in clock ticks
	group map[int]string // by PID: cpuGroup of its name
	// busy and all are the machine's ticks from /proc/stat, of every CPU:
	// busy (user, nice, system, irq, softirq, steal) and all (busy, idle,
	// iowait).
	busy, all int64
	// benchGC is the CPU time this process's Go garbage collector used so
	// far, in seconds (runtime/metrics): the bench's own cost of watching
	// a large cluster.
	benchGC float64
}

// Sampler samples the cluster's processes and this one until stopped.
type Sampler struct {
	mu      sync.Mutex
	samples []cpuSample
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// benchGroup is this process's group: the bench's watches and the
// simulated kubelets run in it.
const benchGroup = "fence-bench"

// controlPlaneGroups are the control plane's processes, a group each by
// their own name.
var controlPlaneGroups = []string{"kube-apiserver", "etcd", "kwok", "kube-controller-manager", "kube-scheduler"}

// cpuGroups are every group, in the order the table breaks ties.
var cpuGroups = append(slices.Clone(controlPlaneGroups), "csi-fence-attacher", "node agents", "mock drivers", benchGroup, "other")

// cpuGroup is the group of a process of the cluster, by its name.
func cpuGroup(name string) string {
	switch {
	case slices.Contains(controlPlaneGroups, name):
		return name
	case strings.HasPrefix(name, "csi-fence-attacher"):
		return "csi-fence-attacher"
	case strings.HasPrefix(name, "node-agent-"):
		return "node agents"
	case strings.HasPrefix(name, "mock-"):
		return "mock drivers"
	}
	return "other"
}

// StartSampler samples every interval the CPU time of the processes
// running returns, of this process and of the machine.
func StartSampler(running func() []*framework.Process, every time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.take(running())
			select {
			case <-s.stop:
				s.take(running())
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// take reads one sample; a process that ended meanwhile is left out of it.
func (s *Sampler) take(procs []*framework.Process) {
	cs := cpuSample{at: time.Now(), ticks: map[int]int64{}, group: map[int]string{}}
	read := func(pid int, group string) {
		if st, err := Read(pid); err == nil {
			cs.ticks[pid], cs.group[pid] = st.CPUTicks, group
		}
	}
	for _, p := range procs {
		if !p.Exited() {
			read(p.Pid(), cpuGroup(p.Name))
		}
	}
	read(os.Getpid(), benchGroup)
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		cs.busy, cs.all, _ = parseMachineStat(b)
	}
	gc := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	if metrics.Read(gc); gc[0].Value.Kind() == metrics.KindFloat64 {
		cs.benchGC = gc[0].Value.Float64()
	}
	s.mu.Lock()
	s.samples = append(s.samples, cs)
	s.mu.Unlock()
}

// Finish stops the sampler after a last sample; again, it does nothing.
func (s *Sampler) Finish() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// parseMachineStat reads the first line of /proc/stat, every CPU's ticks.
func parseMachineStat(b []byte) (busy, all int64, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	return busy, busy + v[3] + v[4], nil
}

// Window is the CPU a window used, on a machine of cores.
type Window struct {
	wall  time.Duration
	cores int
	// used are core-seconds by group; machine is the machine's busy share
	// of its cores over the window (0-1).
	used    map[string]float64
	machine float64
	// benchGC is the core-seconds of used[benchGroup] its garbage
	// collector took.
	benchGC float64
}

// Over cuts the window from to to out of the samples: from the last sample
// at or before from to the first at or after to. A process started inside
// the window counts from zero; one that ended inside it is left out.
func (s *Sampler) Over(from, to time.Time) (Window, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cpuOver(s.samples, from, to, runtime.NumCPU())
}

func cpuOver(samples []cpuSample, from, to time.Time, cores int) (Window, bool) {
	begin, end := -1, -1
	for i, cs := range samples {
		if !cs.at.After(from) {
			begin = i
		}
		if end < 0 && !cs.at.Before(to) {
			end = i
		}
	}
	if begin < 0 || end < 0 || end <= begin {
		return Window{}, false
	}
	a, b := samples[begin], samples[end]
	w := Window{wall: b.at.Sub(a.at), cores: cores, used: map[string]float64{}}
	for pid, t := range b.ticks {
		d := t - a.ticks[pid]
		if a.group[pid] != "" && a.group[pid] != b.group[pid] {
			d = t // the PID was reused by another process
		}
		w.used[b.group[pid]] += float64(d) / clockTicks
	}
	if all := b.all - a.all; all > 0 {
		w.machine = float64(b.busy-a.busy) / float64(all)
	}
	w.benchGC = b.benchGC - a.benchGC
	return w, true
}

// Line says where the window's CPU went: the machine's busy share, then each
// group's core-seconds, the largest first.
func (w Window) Line() string {
	parts := []string{fmt.Sprintf("%.2fs on %d cores, the machine %.0f%% busy", w.wall.Seconds(), w.cores, 100*w.machine)}
	groups := slices.Clone(cpuGroups)
	slices.SortStableFunc(groups, func(a, b string) int { return cmp.Compare(w.used[b], w.used[a]) })
	total := 0.0
	for _, g := range groups {
		total += w.used[g]
		switch {
		case w.used[g] < 0.005:
		case g == benchGroup && w.benchGC >= 0.005:
			parts = append(parts, fmt.Sprintf("%s %.2f (its garbage collector %.2f)", g, w.used[g], w.benchGC))
		default:
			parts = append(parts, fmt.Sprintf("%s %.2f", g, w.used[g]))
		}
	}
	return fmt.Sprintf("%s (core-seconds; %.2f of %.2f measured by process)", strings.Join(parts, ", "), total, w.wall.Seconds()*float64(w.cores))
}

// ProfileCPU writes a CPU profile of this process to file until the
// returned stop is first called: where the bench's own share goes.
func ProfileCPU(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		f.Close()
	}), nil
}
