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

// Command fence-bench measures the failover overhead on the local real
// control plane: from the moment a pod becomes eligible (Terminating on a
// NotReady node) to its replacement's volume attached on another node, over
// repeated trials, for each failover path, and prints p50/p95.
//
//	go run ./cmd/fence-bench --trials=5 --paths=out-of-service,automatic
//
// With --mode=burst it measures instead what a burst of detaches from one
// node costs, fenced (the node NotReady) against plain: the time until all
// are detached, and the attacher's API requests from the apiserver's audit
// log (FencingRequest writes, conflicts, reads), see burst.go.
//
//	go run ./cmd/fence-bench --mode=burst --volumes=200
//
// With --mode=attach it measures what the fencing Attacher costs on the
// attach path: N VolumeAttachments attached and detached on a Ready node,
// with the fence (the product) and without (--disable-fencing:
// external-attacher's controller unchanged), at external-attacher's default
// API client rate and at a high one, side by side; then attaches alone and
// during a burst of fences from a failed node (external-attacher issue
// #761), see attach.go.
//
//	go run ./cmd/fence-bench --mode=attach --counts=100,500 --qps=default,1000
//
// With --mode=scale it builds a large cluster (1,000 KWOK nodes, 30,000
// pods, 3,000 volumes attached through the product) and measures the
// controller role's and a node agent's memory, CPU and API requests in
// steady state, one node with 110 pods failing (beside the in-tree
// out-of-service path), and a rack of nodes losing power at once under the
// storm guard, see scale.go.
//
//	go run ./cmd/fence-bench --mode=scale --nodes=1000 --pods=30000 --volumes=3000
package main

import (
	"context"
	"errors"
	"flag"
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

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs fence-bench with args, printing its progress and tables to
// stdout and its failure to stderr, and returns its exit code. Whatever
// happens, and on SIGINT or SIGTERM, it prints what it measured, stops
// everything it started and checks that nothing of it is left running.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fence-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trials := fs.Int("trials", 5, "Trials per path")
	paths := fs.String("paths", "automatic,out-of-service,power", "Failover paths to measure: out-of-service (the in-tree path: taint added by the benchmark the moment the pod is eligible), automatic (SafeDetach pod GC, storage fence) and power (SafeDetach pod GC of a driver without UNPUBLISH_FENCE, the node powered off by fence_ipmilan through an ipmi_sim BMC; needs fence_ipmilan, ipmitool and ipmi_sim, which hack/install-fence-agents.sh installs)")
	mode := fs.String("mode", "failover", "failover: the failover overhead per path (--trials, --paths); burst: a burst of fenced and of plain detaches from one node (--volumes); attach: attach/detach throughput with and without the fence, and attaches during a fence burst (--counts, --qps, --burst-volumes); scale: a large cluster's steady state, a 110-pod node failing and a rack losing power (--nodes, --pods, --volumes, --rack)")
	volumes := fs.Int("volumes", 200, "With --mode=burst: VolumeAttachments detached at once from one node")
	counts := fs.String("counts", "100,500", "With --mode=attach: VolumeAttachments attached and detached at once per round")
	qps := fs.String("qps", "default,1000", "With --mode=attach: the attacher's --kube-api-qps (and --kube-api-burst) per round; default is external-attacher's 5 (10)")
	burstVols := fs.Int("burst-volumes", 200, "With --mode=attach: volumes fenced at once from a failed node while attaches run (0: skip)")
	burstQPS := fs.String("burst-qps", "1000", "With --mode=attach: the attacher's --kube-api-qps in the fence-burst phase")
	fenceDelay := fs.Duration("fence-delay", 500*time.Millisecond, "With --mode=attach: the mock driver's latency of each ControllerUnpublishVolume during the fence burst")
	attachCount := fs.Int("attaches", 200, "With --mode=attach: attaches measured alone and during the fence burst")
	nodes := fs.Int("nodes", 1000, "With --mode=scale: KWOK nodes")
	pods := fs.Int("pods", 30000, "With --mode=scale: pods, --volumes of them with a volume each (StatefulSets), the others without (Deployments)")
	hotPods := fs.Int("hot-pods", 110, "With --mode=scale: pods, each with a volume, of the node that fails (and of the in-tree path's)")
	rack := fs.Int("rack", 20, "With --mode=scale: nodes of the rack that loses power at once (0: skip)")
	rackPods := fs.Int("rack-pods", 5, "With --mode=scale: pods, each with a volume, per node of the rack")
	guardPercent := fs.Int("max-fenced-node-percent", 0, "With --mode=scale: the attacher's storm guard limit; 0: the smallest that admits the failed node and half the rack")
	inTree := fs.Bool("in-tree", true, "With --mode=scale: measure the in-tree out-of-service path beside the product's on a node of its own")
	window := fs.Duration("window", 2*time.Minute, "With --mode=scale: the steady-state window")
	settle := fs.Duration("settle", 30*time.Second, "With --mode=scale: from the restarted attacher leading to the steady-state window")
	controllerQPS := fs.String("controller-qps", "default", "With --mode=scale: the attacher's --kube-api-qps (and burst) while measuring, and its --failover-kube-api-qps (and burst); default is external-attacher's 5 (10), and 20 (30) for the failover")
	workers := fs.Int("attacher-workers", 0, "With --mode=scale: the attachers' --worker-threads while measuring; 0 is external-attacher's 10")
	controlPlaneQPS := fs.Int("control-plane-qps", 0, "With --mode=scale: kube-controller-manager's and kube-scheduler's --kube-api-qps (burst twice as much); 0 is their defaults, 20 (30) and 50 (100)")
	keep := fs.Bool("keep-work-dir", false, "Keep each control plane's work dir (its components' logs and the API audit log; not etcd's data) after a run that went well too, to trace where the time went")
	profileDir := fs.String("cpu-profile-dir", "", "With --mode=scale: write a CPU profile of fence-bench itself over each failed node's failover to this directory (PATH.pprof), to see what watching the cluster costs")
	enforceMemory := fs.Bool("enforce-memory-goal", false, "With --mode=scale: fail when the controller role's RSS in steady state is over the goal (300 MiB)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "fence-bench:", err)
		return 1
	}
	var o attachOptions
	if *mode == "attach" {
		var err error
		if o.counts, err = parseInts(*counts); err != nil {
			return fail(err)
		}
		o.qps, o.burstQPS = strings.Split(*qps, ","), strings.Split(*burstQPS, ",")
		o.burstVols, o.fenceDelay, o.attachCount = *burstVols, *fenceDelay, *attachCount
	}
	var so scaleOptions
	if *mode == "scale" {
		// --volumes is the burst's 200 unless given: here 3,000.
		so.volumes = 3000
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "volumes" {
				so.volumes = *volumes
			}
		})
		so.nodes, so.pods, so.hotPods, so.rack, so.rackPods = *nodes, *pods, *hotPods, *rack, *rackPods
		so.guardPercent, so.inTree, so.window, so.settle = *guardPercent, *inTree, *window, *settle
		so.qps, so.controlPlaneQPS, so.enforceMemory, so.workers = apiSetting(*controllerQPS), *controlPlaneQPS, *enforceMemory, *workers
		so.profileDir = *profileDir
		if _, err := planScale(so); err != nil {
			return fail(err)
		}
	}
	pathList := strings.Split(*paths, ",")
	need, err := requirements(*mode, pathList, *trials, *volumes)
	if err != nil {
		return fail(err)
	}

	// Every process started from here on, and whatever it starts, carries
	// the run's tag: what is left of them at the end is found wherever it
	// was reparented.
	tag, err := framework.TagRun()
	if err != nil {
		return fail(err)
	}
	code := func() int {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		b := &bench{out: stdout, keep: *keep}
		b.measurePath = b.measure
		if b.opts, err = b.preflight(ctx, need); err != nil {
			return fail(fmt.Errorf("preflight: %w", err))
		}
		switch *mode {
		case "failover":
			err = b.run(ctx, *trials, pathList)
		case "burst":
			err = b.runBurst(ctx, *volumes)
		case "attach":
			err = b.runAttach(ctx, o)
		case "scale":
			err = b.runScale(ctx, so)
		}
		if err != nil {
			return fail(err)
		}
		return 0
	}()
	// Everything was stopped on the way out; a process killed a moment ago
	// may still be ending.
	if err := tag.WaitNoProcesses(context.Background(), 10*time.Second); err != nil {
		return fail(err)
	}
	return code
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
