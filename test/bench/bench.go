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

// Package bench is fence-bench (cmd/fence-bench): it measures the failover
// overhead on the local real control plane, from the moment a pod becomes
// eligible (Terminating on a NotReady node) to its replacement's volume
// attached on another node, over repeated trials, for each failover path,
// and prints p50/p95 and where the time goes (budget.go).
//
// With Mode burst it measures instead what a burst of detaches from one
// node costs, fenced (the node NotReady) against plain: the time until all
// are detached, and the attacher's API requests from the apiserver's audit
// log (FencingRequest writes, conflicts, reads), see burst.go.
//
// With Mode attach it measures what the fencing Attacher costs on the
// attach path: N VolumeAttachments attached and detached on a Ready node,
// with the fence (the product) and without (--disable-fencing:
// external-attacher's controller unchanged), at external-attacher's default
// API client rate and at a high one, side by side; then attaches alone and
// during a burst of fences from a failed node (external-attacher issue
// #761), see attach.go.
//
// With Mode scale it builds a large cluster (1,000 KWOK nodes, 30,000
// pods, 3,000 volumes attached through the product) and measures the
// controller role's and a node agent's memory, CPU and API requests in
// steady state, one node with 110 pods failing (beside the in-tree
// out-of-service path), and a rack of nodes losing power at once under the
// storm guard, see scale.go (the tables: scale_table.go).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/csi-fence/fence-attacher/test/bmcsim"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// Config is one run of the bench: fence-bench's flags.
type Config struct {
	// Mode is failover (the failover overhead per path: Trials, Paths),
	// burst (a burst of fenced and of plain detaches from one node:
	// Volumes), attach (attach/detach throughput with and without the
	// fence, and attaches during a fence burst: Attach) or scale (a large
	// cluster's steady state, a 110-pod node failing and a rack losing
	// power: Scale).
	Mode string
	// Trials per path, and the Paths measured, of FailoverPaths.
	Trials int
	Paths  []string
	// Volumes are the VolumeAttachments Mode burst detaches at once from
	// one node.
	Volumes int
	Attach  AttachOptions
	Scale   ScaleOptions
	// RealNodes runs Mode failover on real nodes (a kubelet and containerd
	// each, the product deployed from its manifests, a container writing
	// to the volume) instead of KWOK nodes, its Paths of RealNodePaths on
	// one cluster, and measures node down -> replacement writing too, see
	// realnodes.go.
	RealNodes bool
	// Keep keeps each control plane's work dir (its components' logs and
	// the API audit log; not etcd's data) after a run that went well too,
	// to trace where the time went.
	Keep bool
}

type quiet struct{}

func (quiet) Logf(string, ...interface{}) {}

// bench is one run of fence-bench.
type bench struct {
	out io.Writer
	// opts start every control plane (the binaries the preflight found).
	opts framework.Options
	// measurePath measures one failover path (measure; a test's fake).
	measurePath func(ctx context.Context, trials int, path string) (pathResult, error)
	// keep keeps each control plane's work dir (its components' logs and
	// the audit log) after a run that went well too.
	keep bool
}

// cleanup stops a control plane, keeping its logs if the run failed (not
// when it was interrupted) or when asked to.
func (b *bench) cleanup(ctx context.Context, c *framework.Cluster, err error) {
	c.Cleanup(b.keep || (err != nil && ctx.Err() == nil))
}

// Logf prints the framework's progress.
func (b *bench) Logf(format string, args ...interface{}) { fmt.Fprintf(b.out, format+"\n", args...) }

func (b *bench) printf(format string, args ...interface{}) { fmt.Fprintf(b.out, format, args...) }

// Run runs the bench cfg describes, printing its progress and tables to
// out. A cfg that cannot be right fails before anything is looked at on
// the machine; then the preflight provides what the run needs. Whatever
// happens, and on SIGINT or SIGTERM, it prints what it measured, stops
// everything it started and checks that nothing of it is left running: the
// error then joins the run's and that check's (errors.Join).
func Run(cfg Config, out io.Writer) error {
	if cfg.Mode == "scale" {
		if _, err := planScale(cfg.Scale); err != nil {
			return err
		}
	}
	need, err := requirements(cfg.Mode, cfg.Paths, cfg.Trials, cfg.Volumes)
	if err != nil {
		return err
	}
	if cfg.RealNodes {
		if err := realRequirements(cfg.Mode, cfg.Paths); err != nil {
			return err
		}
		need.realNodes = true
	}

	// Every process started from here on, and whatever it starts, carries
	// the run's tag: what is left of them at the end is found wherever it
	// was reparented.
	tag, err := framework.TagRun()
	if err != nil {
		return err
	}
	err = func() error {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		b := &bench{out: out, keep: cfg.Keep}
		b.measurePath = b.measure
		var err error
		if b.opts, err = b.preflight(ctx, need); err != nil {
			return fmt.Errorf("preflight: %w", err)
		}
		switch cfg.Mode {
		case "failover":
			if cfg.RealNodes {
				return b.runReal(ctx, cfg.Trials, cfg.Paths)
			}
			return b.run(ctx, cfg.Trials, cfg.Paths)
		case "burst":
			return b.runBurst(ctx, cfg.Volumes)
		case "attach":
			return b.runAttach(ctx, cfg.Attach)
		case "scale":
			return b.runScale(ctx, cfg.Scale)
		}
		return nil
	}()
	// Everything was stopped on the way out; a process killed a moment ago
	// may still be ending.
	return errors.Join(err, tag.WaitNoProcesses(context.Background(), 10*time.Second))
}

// run measures each path in turn and prints the table of those measured,
// also when one fails (its trials so far in a row of its own) or the run is
// interrupted; the paths after a failure are not measured.
func (b *bench) run(ctx context.Context, trials int, paths []string) error {
	var results []pathResult
	var err error
	for _, path := range paths {
		var r pathResult
		r, err = b.measurePath(ctx, trials, path)
		if len(r.samples) > 0 {
			results = append(results, r)
		}
		if err != nil {
			break
		}
	}
	if len(results) > 0 {
		b.printf("\n%s", failoverTable(results))
		for _, r := range results {
			if t := budgetTable(r); t != "" {
				b.printf("\n%s", t)
			}
		}
	}
	return err
}

// pathResult is what the trials of one failover path measured.
type pathResult struct {
	path    string
	trials  int             // asked for
	samples []time.Duration // one per trial that ended, in order
	// timelines are the milestones of the same trials, for the budget.
	timelines [][]timeline.Event
	// recovery are, on real nodes, the same trials' node down ->
	// replacement writing (its first record on the volume).
	recovery []time.Duration
}

// failoverTable is the table of the paths' p50, p95, min and max; a path
// whose trials did not all end shows how many did (2/5).
func failoverTable(results []pathResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-16s %6s %8s %8s %8s %8s\n", "path", "trials", "p50", "p95", "min", "max")
	for _, r := range results {
		samples := slices.Clone(r.samples)
		slices.Sort(samples)
		n := strconv.Itoa(len(samples))
		if len(samples) < r.trials {
			n += "/" + strconv.Itoa(r.trials)
		}
		fmt.Fprintf(&sb, "%-16s %6s %7.2fs %7.2fs %7.2fs %7.2fs\n", r.path, n,
			timeline.Percentile(samples, 50).Seconds(), timeline.Percentile(samples, 95).Seconds(), samples[0].Seconds(), samples[len(samples)-1].Seconds())
	}
	return sb.String()
}

// measure runs the trials of one path on a control plane of its own: the
// in-tree path runs with the NonGracefulFailover gate off, so that only
// Kubernetes' own pod GC and attach/detach controller act on the taint. It
// returns the trials that ended, also on an error. The control plane's logs
// are kept when it fails (not when interrupted).
func (b *bench) measure(ctx context.Context, trials int, path string) (r pathResult, err error) {
	r = pathResult{path: path, trials: trials}
	c, err := framework.Start(ctx, b, b.opts)
	if err != nil {
		return r, err
	}
	defer func() { b.cleanup(ctx, c, err) }()
	var args, mockArgs []string
	switch path {
	case "out-of-service":
		args = []string{"--feature-gates=NonGracefulFailover=false"}
	case "power":
		mockArgs = []string{"--disable-fence"}
	}
	p, err := c.StartProduct(ctx, framework.ProductOptions{AttacherArgs: args, MockArgs: mockArgs})
	if err != nil {
		return r, err
	}
	for i := 0; i < trials; i++ {
		d, events, err := trial(ctx, c, p, fmt.Sprintf("b%s%d", path[:1], i), path)
		if err != nil {
			return r, fmt.Errorf("%s trial %d: %w", path, i, err)
		}
		b.printf("%s trial %d: %.2fs\n", path, i, d.Seconds())
		r.samples = append(r.samples, d)
		r.timelines = append(r.timelines, events)
	}
	return r, nil
}

// trial fails one node and returns eligible -> attached elsewhere.
func trial(ctx context.Context, c *framework.Cluster, p *framework.Product, prefix, path string) (time.Duration, []timeline.Event, error) {
	if path == "power" {
		// Each node's plugin is the machine of a BMC: the power fence
		// really stops it.
		// Their state lives as long as they do, in the work dir: the
		// cluster stops them.
		for i := 0; i < 2; i++ {
			node := fmt.Sprintf("%s-node-%d", prefix, i)
			dir := filepath.Join(c.WorkDir, "bmc", node)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return 0, nil, err
			}
			p.SetPowerSwitch(node, p.Driver, bmcsim.Config{Dir: dir, User: "admin", Password: "bench-secret"})
		}
	}
	env, err := scenario.Setup(ctx, c, p, quiet{}, prefix, 2, 1)
	if err != nil {
		return 0, nil, err
	}
	if path == "power" {
		unconfigure, err := p.ConfigurePowerSwitches(ctx, prefix+"-bmc", p.Driver, env.Nodes, "admin", "bench-secret")
		if err != nil {
			return 0, nil, err
		}
		defer unconfigure()
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		return 0, nil, err
	}
	rec := timeline.New(timeline.Target{Node: victim, Namespace: env.NS, Pod: env.PodName(0), PVName: env.Volumes[0]}, nil)
	stop := make(chan struct{})
	defer func() { close(stop); rec.Wait() }()
	if err := rec.Watch(c.Client, c.Dynamic, stop); err != nil {
		return 0, nil, err
	}
	if err := env.Failover(ctx, rec, scenario.FailoverOptions{OutOfServiceTaint: path == "out-of-service", Partition: path == "power", Return: false}); err != nil {
		return 0, nil, err
	}
	d, ok := rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere)
	if !ok {
		return 0, nil, fmt.Errorf("milestones missing: %v", rec.Events())
	}
	return d, rec.Events(), nil
}
