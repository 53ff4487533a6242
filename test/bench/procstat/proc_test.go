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

func TestParseProc(t *testing.T) {
	status := "Name:\tcsi-fence-attac\nVmPeak:\t 1300000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t12\n"
	rss, peak, err := parseProcStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if rss != 100<<20 || peak != 200<<20 {
		t.Errorf("rss %d, peak %d; want 100 MiB and 200 MiB", rss, peak)
	}
	if _, _, err := parseProcStatus([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Error("no error without VmHWM")
	}
	for _, tc := range []struct {
		name, stat string
		want       int64
		err        bool
	}{
		// Fields 14 and 15 (utime 250, stime 50), counted after the name.
		{name: "plain", stat: "4242 (csi-fence-attac) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0", want: 300},
		{name: "a name with spaces and parentheses", stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0", want: 7},
		{name: "cut short", stat: "7 (a) R 1 7", err: true},
		{name: "no name", stat: "7 a R", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.stat))
			if tc.err != (err != nil) {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("ticks %d, want %d", got, tc.want)
			}
		})
	}
}

func TestUsageOver(t *testing.T) {
	at := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	begin := Stat{RSS: 1, Peak: 2, CPUTicks: 1000, At: at}
	end := Stat{RSS: 50 << 20, Peak: 80 << 20, CPUTicks: 1600, At: at.Add(2 * time.Minute)}
	u := UsageOver("controller", begin, end)
	// 600 ticks of 10 ms in 120 s: 5% of a core.
	if u.RSS != 50<<20 || u.Peak != 80<<20 || u.CPU < 0.0499 || u.CPU > 0.0501 {
		t.Errorf("%+v, want the end's memory and 0.05 cores", u)
	}
}
