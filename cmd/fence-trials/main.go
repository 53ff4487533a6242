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

// Command fence-trials runs randomized failover trials on a local real
// control plane (see package test/trials) and prints a table per fault
// schedule. Every trial prints its seed; -seed with -trials=1 and
// -schedules replays it. It exits non-zero if any trial broke an invariant,
// and then keeps the logs of the run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
	"github.com/csi-fence/fence-attacher/test/trials"
)

type quiet struct{}

func (quiet) Logf(string, ...interface{}) {}

type stdout struct{}

func (stdout) Logf(format string, args ...interface{}) { fmt.Printf(format+"\n", args...) }

func main() {
	nodes := flag.String("nodes", "kwok", "The nodes the trials fail: kwok (KWOK nodes beside a simulated kubelet) or real (a kubelet and containerd each, the product deployed from deploy/kubernetes/mock-example; needs root)")
	n := flag.Int("trials", 1, "Trials per schedule")
	seed := flag.Int64("seed", 0, "Seed of the first trial (0: from the clock); trial i of the run uses seed+i")
	schedules := flag.String("schedules", "", "Fault schedules to run, comma-separated (default: every schedule of the -nodes kind; -schedules=list prints them)")
	workDir := flag.String("workdir", "", "Directory to hold the run's work dir (default: the system's temp dir)")
	flag.Parse()
	if *nodes != "kwok" && *nodes != "real" {
		fmt.Fprintf(os.Stderr, "fence-trials: --nodes=%q: want kwok or real\n", *nodes)
		os.Exit(2)
	}
	real := *nodes == "real"
	var names []string
	for _, s := range trials.SchedulesOn(real) {
		names = append(names, s.Name)
	}
	if *schedules == "list" {
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	if *schedules == "" {
		*schedules = strings.Join(names, ",")
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	var run []trials.Schedule
	for _, name := range strings.Split(*schedules, ",") {
		s, err := trials.ScheduleOn(name, real)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fence-trials: %v (with --nodes=%s: %s)\n", err, *nodes, strings.Join(names, ", "))
			os.Exit(2)
		}
		run = append(run, s)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	failed, err := runTrials(ctx, run, *n, *seed, *workDir, real)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-trials:", err)
		os.Exit(1)
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "fence-trials: %d trials broke an invariant\n", failed)
		os.Exit(1)
	}
}

// runTrials runs n trials of each schedule, interleaved, on one control
// plane, and prints each result and then the table. It returns how many
// trials failed.
func runTrials(ctx context.Context, schedules []trials.Schedule, n int, seed int64, parent string, real bool) (failed int, err error) {
	kind := "KWOK nodes"
	if real {
		kind = "real nodes"
	}
	fmt.Printf("fence-trials: seed %d, %d trials of each of %d schedules on %s\n", seed, n, len(schedules), kind)
	opts := framework.Options{}
	if parent != "" {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return 0, err
		}
		if opts.WorkDir, err = os.MkdirTemp(parent, "fence-trials-"); err != nil {
			return 0, err
		}
	}
	c, err := framework.Start(ctx, stdout{}, opts)
	if err != nil {
		return 0, err
	}
	defer func() { c.Cleanup(failed > 0 || err != nil) }()
	var run func(s trials.Schedule, seed int64) trials.Result
	// usable says whether the nodes can run the next trial after one that
	// failed: the KWOK trials make nodes of their own, the real ones share
	// theirs.
	usable := func() error { return nil }
	if real {
		env, err := trials.StartReal(ctx, c)
		if err != nil {
			return 0, err
		}
		run = func(s trials.Schedule, seed int64) trials.Result { return trials.RunReal(ctx, env, s, seed) }
		usable = func() error { return env.Usable(ctx, controlPlaneGrace) }
	} else {
		// The mock driver logs every request (--v=5): the trials find in
		// its log when each fence reached it.
		p, err := c.StartProduct(ctx, framework.ProductOptions{MockArgs: trials.MockArgs})
		if err != nil {
			return 0, err
		}
		run = func(s trials.Schedule, seed int64) trials.Result { return trials.Run(ctx, c, p, quiet{}, s, seed) }
	}
	var results []trials.Result
	for i := 0; i < n; i++ {
		for j, s := range schedules {
			r := run(s, seed+int64(i*len(schedules)+j))
			results = append(results, r)
			printResult(r)
			if r.Failed() {
				failed++
			}
			if ctx.Err() != nil {
				return failed, ctx.Err()
			}
			// A trial that could not run to its end may have left the
			// control plane down (an apiserver restart that never got
			// ready): every later trial would fail against it and say
			// nothing of the product. Stop the run instead, with the
			// table of what ran.
			if r.Err != nil {
				if err := c.APIReady(ctx, controlPlaneGrace); err != nil {
					printTable(schedules, results)
					return failed, fmt.Errorf("the control plane is not usable after trial seed=%d (%v): the run's %d other trials were not run", r.Seed, err, n*len(schedules)-len(results))
				}
			}
			if r.Failed() {
				if err := usable(); err != nil {
					printTable(schedules, results)
					return failed, fmt.Errorf("the nodes are not usable after trial seed=%d (%v): the run's %d other trials were not run", r.Seed, err, n*len(schedules)-len(results))
				}
			}
		}
	}
	printTable(schedules, results)
	if failed > 0 {
		fmt.Printf("logs kept in %s/logs\n", c.WorkDir)
	}
	return failed, nil
}

// controlPlaneGrace is how long a run waits for kube-apiserver to answer
// again after a trial that failed before it goes on.
const controlPlaneGrace = 3 * time.Minute

func printResult(r trials.Result) {
	verdict := "ok"
	if r.Failed() {
		verdict = "FAIL"
	}
	fmt.Printf("%-4s seed=%d %-40s recovery %6.2fs failover %6.2fs  %s\n", verdict, r.Seed, r.Schedule,
		r.Recovery.Seconds(), r.Failover.Seconds(), strings.Join(r.Steps, "; "))
	if r.Err != nil {
		fmt.Printf("     error: %v\n", r.Err)
	}
	for _, p := range r.Problems {
		fmt.Printf("     broken: %s\n", p)
	}
}

func printTable(schedules []trials.Schedule, results []trials.Result) {
	fmt.Printf("\n%-40s %6s %6s %12s %12s %12s %12s %10s\n", "schedule", "trials", "failed", "recovery p50", "recovery p95", "failover p50", "failover p95", "stall max")
	for _, s := range schedules {
		var rec, fo []time.Duration
		var stall time.Duration
		total, failed := 0, 0
		for _, r := range results {
			if r.Schedule != s.Name {
				continue
			}
			total++
			if r.Failed() {
				failed++
				continue
			}
			rec, fo = append(rec, r.Recovery), append(fo, r.Failover)
			stall = max(stall, r.Stall)
		}
		stallCol := "-"
		if stall > 0 {
			stallCol = fmt.Sprintf("%.2fs", stall.Seconds())
		}
		fmt.Printf("%-40s %6d %6d %11.2fs %11.2fs %11.2fs %11.2fs %10s\n", s.Name, total, failed,
			timeline.Percentile(rec, 50).Seconds(), timeline.Percentile(rec, 95).Seconds(), timeline.Percentile(fo, 50).Seconds(), timeline.Percentile(fo, 95).Seconds(), stallCol)
	}
}
