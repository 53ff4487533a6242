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

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRequirements: each mode and path needs the control plane, the power
// path the fence agents too, and a run that cannot be right fails before
// it looks at the machine.
func TestRequirements(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    string
		paths   string
		trials  int
		volumes int
		want    needs
		err     string
	}{
		{name: "default failover", mode: "failover", paths: "automatic,out-of-service,power", trials: 5, want: needs{controlPlane: true, fenceAgents: true}},
		{name: "power alone", mode: "failover", paths: "power", trials: 1, want: needs{controlPlane: true, fenceAgents: true}},
		{name: "no power path", mode: "failover", paths: "automatic,out-of-service", trials: 1, want: needs{controlPlane: true}},
		{name: "burst", mode: "burst", paths: "automatic,out-of-service,power", volumes: 200, want: needs{controlPlane: true}},
		{name: "attach", mode: "attach", paths: "power", want: needs{controlPlane: true}},
		{name: "unknown path", mode: "failover", paths: "automatic,powr", trials: 1, err: `unknown path "powr"`},
		{name: "empty path", mode: "failover", paths: "automatic,", trials: 1, err: "--paths=automatic,"},
		{name: "no trials", mode: "failover", paths: "automatic", trials: 0, err: "--trials=0"},
		{name: "no volumes", mode: "burst", volumes: 0, err: "--volumes=0"},
		{name: "scale", mode: "scale", want: needs{controlPlane: true}},
		{name: "unknown mode", mode: "scal", err: `unknown --mode "scal"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := requirements(tc.mode, strings.Split(tc.paths, ","), tc.trials, tc.volumes)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("needs %+v, want %+v", got, tc.want)
			}
		})
	}
}

func seconds(s ...float64) []time.Duration {
	var out []time.Duration
	for _, x := range s {
		out = append(out, time.Duration(x*float64(time.Second)))
	}
	return out
}

const tableHeader = "path             trials      p50      p95      min      max\n"

func TestFailoverTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []pathResult
		want    string
	}{
		{name: "complete paths", results: []pathResult{
			{path: "automatic", trials: 3, samples: seconds(1.5, 1.25, 2)},
			{path: "out-of-service", trials: 1, samples: seconds(16.37)},
		}, want: tableHeader +
			"automatic             3    1.50s    2.00s    1.25s    2.00s\n" +
			"out-of-service        1   16.37s   16.37s   16.37s   16.37s\n"},
		{name: "a path that failed after 2 of 5 trials", results: []pathResult{
			{path: "automatic", trials: 5, samples: seconds(1, 1, 1, 1, 1)},
			{path: "power", trials: 5, samples: seconds(3.5, 3.25)},
		}, want: tableHeader +
			"automatic             5    1.00s    1.00s    1.00s    1.00s\n" +
			"power               2/5    3.25s    3.50s    3.25s    3.50s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := failoverTable(tc.results); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestRunPrintsWhatItMeasured: whichever path fails, the table shows every
// path measured before it (and the failed one's trials that ended), the
// paths after it are not measured, and the error is returned.
func TestRunPrintsWhatItMeasured(t *testing.T) {
	paths := []string{"automatic", "out-of-service", "power"}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		// failAt is the path that fails (-1: none), after ended trials.
		failAt, ended int
		wantRows      []string
		wantMeasured  int
	}{
		{name: "none fails", failAt: -1, wantRows: []string{"automatic", "out-of-service", "power"}, wantMeasured: 3},
		{name: "the last fails at its first trial", failAt: 2, wantRows: []string{"automatic", "out-of-service"}, wantMeasured: 3},
		{name: "the last fails at its second trial", failAt: 2, ended: 1, wantRows: []string{"automatic", "out-of-service", "power               1/2"}, wantMeasured: 3},
		{name: "the second fails", failAt: 1, wantRows: []string{"automatic"}, wantMeasured: 2},
		{name: "the first fails", failAt: 0, wantMeasured: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			measured := 0
			b := &bench{out: &out}
			b.measurePath = func(_ context.Context, trials int, path string) (pathResult, error) {
				i := measured
				measured++
				r := pathResult{path: path, trials: trials}
				if i == tc.failAt {
					r.samples = seconds(make([]float64, tc.ended)...)
					return r, fmt.Errorf("%s trial %d: %w", path, tc.ended, boom)
				}
				r.samples = seconds(1, 2)
				return r, nil
			}
			err := b.run(context.Background(), 2, paths)
			if (tc.failAt >= 0) != errors.Is(err, boom) {
				t.Errorf("error %v, want boom: %v", err, tc.failAt >= 0)
			}
			if measured != tc.wantMeasured {
				t.Errorf("%d paths measured, want %d", measured, tc.wantMeasured)
			}
			got := out.String()
			if len(tc.wantRows) == 0 {
				if got != "" {
					t.Errorf("printed %q with nothing measured", got)
				}
				return
			}
			if !strings.Contains(got, tableHeader) {
				t.Errorf("no table header in %q", got)
			}
			rows := strings.Split(strings.TrimSpace(got[strings.Index(got, tableHeader)+len(tableHeader):]), "\n")
			if len(rows) != len(tc.wantRows) {
				t.Fatalf("rows %q, want %d: %q", rows, len(tc.wantRows), tc.wantRows)
			}
			for i, want := range tc.wantRows {
				if !strings.HasPrefix(rows[i], want) {
					t.Errorf("row %d is %q, want it to begin with %q", i, rows[i], want)
				}
			}
		})
	}
}
