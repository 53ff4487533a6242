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
	"testing"
	"time"
)

func TestParseMachineStat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		busy, all int64
		err       bool
	}{
		{name: "a kernel's first line", in: "cpu  100 2 30 500 7 4 5 1 0 0\ncpu0 50 1 15 250 3 2 2 0 0 0\n", busy: 142, all: 649},
		{name: "not the total", in: "cpu0 1 2 3 4 5 6 7 8\n", err: true},
		{name: "too few fields", in: "cpu 1 2 3\n", err: true},
		{name: "not a number", in: "cpu 1 2 x 4 5 6 7 8\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy, all, err := parseMachineStat([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want an error: %v", err, tc.err)
			}
			if !tc.err && (busy != tc.busy || all != tc.all) {
				t.Errorf("busy %d of %d, want %d of %d", busy, all, tc.busy, tc.all)
			}
		})
	}
}

func TestCPUOver(t *testing.T) {
	at := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return at.Add(time.Duration(x * float64(time.Second))) }
	samples := []cpuSample{
		{at: s(0), ticks: map[int]int64{1: 1000, 2: 50, 3: 7, 9: 100}, group: map[int]string{1: "kube-apiserver", 2: "etcd", 3: "mock drivers", 9: benchGroup}, busy: 0, all: 0, benchGC: 0.5},
		{at: s(1), ticks: map[int]int64{1: 1100, 2: 60, 3: 9, 9: 110}, group: map[int]string{1: "kube-apiserver", 2: "etcd", 3: "mock drivers", 9: benchGroup}, busy: 150, all: 200, benchGC: 0.55},
		// PID 3 ended; PID 2 is now another process; PID 4 started.
		{at: s(3), ticks: map[int]int64{1: 1300, 2: 5, 4: 40, 9: 180}, group: map[int]string{1: "kube-apiserver", 2: "kwok", 4: "csi-fence-attacher", 9: benchGroup}, busy: 500, all: 600, benchGC: 0.75},
	}
	for _, tc := range []struct {
		name     string
		from, to time.Time
		ok       bool
		wall     time.Duration
		used     map[string]float64
		machine  float64
	}{
		{name: "between two samples: the samples around it", from: s(0.5), to: s(2), ok: true, wall: 3 * time.Second,
			used: map[string]float64{"kube-apiserver": 3, "kwok": 0.05, "csi-fence-attacher": 0.4, benchGroup: 0.8}, machine: 500.0 / 600},
		{name: "on samples", from: s(0), to: s(1), ok: true, wall: time.Second,
			used: map[string]float64{"kube-apiserver": 1, "etcd": 0.1, "mock drivers": 0.02, benchGroup: 0.1}, machine: 150.0 / 200},
		{name: "before the first sample", from: s(-1), to: s(1)},
		{name: "after the last sample", from: s(1), to: s(4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, ok := cpuOver(samples, tc.from, tc.to, 2)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if w.wall != tc.wall || w.cores != 2 {
				t.Errorf("wall %s on %d cores, want %s on 2", w.wall, w.cores, tc.wall)
			}
			for g, want := range tc.used {
				if got := w.used[g]; got < want-1e-9 || got > want+1e-9 {
					t.Errorf("%s used %.3f core-s, want %.3f", g, got, want)
				}
			}
			for g, got := range w.used {
				if _, ok := tc.used[g]; !ok && got != 0 {
					t.Errorf("%s used %.3f core-s, want none", g, got)
				}
			}
			if d := w.machine - tc.machine; d < -1e-9 || d > 1e-9 {
				t.Errorf("machine %.3f busy, want %.3f", w.machine, tc.machine)
			}
		})
	}
	w, _ := cpuOver(samples, s(0.5), s(2), 2)
	if got, want := w.Line(), "3.00s on 2 cores, the machine 83% busy, kube-apiserver 3.00, fence-bench 0.80 (its garbage collector 0.25), csi-fence-attacher 0.40, kwok 0.05 (core-seconds; 4.25 of 6.00 measured by process)"; got != want {
		t.Errorf("line\n%s\nwant\n%s", got, want)
	}
}

func TestCPUGroup(t *testing.T) {
	for name, want := range map[string]string{
		"kube-apiserver":                    "kube-apiserver",
		"csi-fence-attacher-intree":         "csi-fence-attacher",
		"csi-fence-attacher-standby":        "csi-fence-attacher",
		"node-agent-hot-0":                  "node agents",
		"mock-controller-intree":            "mock drivers",
		"mock-node-hot-0":                   "mock drivers",
		"prestop-webhook":                   "other",
		"kube-controller-manager-elsewhere": "other",
	} {
		if got := cpuGroup(name); got != want {
			t.Errorf("cpuGroup(%q) = %q, want %q", name, got, want)
		}
	}
}
