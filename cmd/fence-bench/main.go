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
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
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

// bench is one run of fence-bench: where it prints.
type bench struct {
	out io.Writer
}

// Logf prints the framework's progress.
func (b *bench) Logf(format string, args ...interface{}) { fmt.Fprintf(b.out, format+"\n", args...) }

func (b *bench) printf(format string, args ...interface{}) { fmt.Fprintf(b.out, format, args...) }

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs fence-bench with args, printing its progress and tables to
// stdout and its failure to stderr, and returns its exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fence-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trials := fs.Int("trials", 5, "Trials per path")
	paths := fs.String("paths", "automatic,out-of-service,power", "Failover paths to measure: out-of-service (the in-tree path: taint added by the benchmark the moment the pod is eligible), automatic (SafeDetach pod GC, storage fence) and power (SafeDetach pod GC of a driver without UNPUBLISH_FENCE, the node powered off by fence_ipmilan through an ipmi_sim BMC)")
	mode := fs.String("mode", "failover", "failover: the failover overhead per path (--trials, --paths); burst: a burst of fenced and of plain detaches from one node (--volumes); attach: attach/detach throughput with and without the fence, and attaches during a fence burst (--counts, --qps, --burst-volumes)")
	volumes := fs.Int("volumes", 200, "With --mode=burst: VolumeAttachments detached at once from one node")
	counts := fs.String("counts", "100,500", "With --mode=attach: VolumeAttachments attached and detached at once per round")
	qps := fs.String("qps", "default,1000", "With --mode=attach: the attacher's --kube-api-qps (and --kube-api-burst) per round; default is external-attacher's 5 (10)")
	burstVols := fs.Int("burst-volumes", 200, "With --mode=attach: volumes fenced at once from a failed node while attaches run (0: skip)")
	burstQPS := fs.String("burst-qps", "1000", "With --mode=attach: the attacher's --kube-api-qps in the fence-burst phase")
	fenceDelay := fs.Duration("fence-delay", 500*time.Millisecond, "With --mode=attach: the mock driver's latency of each ControllerUnpublishVolume during the fence burst")
	attachCount := fs.Int("attaches", 200, "With --mode=attach: attaches measured alone and during the fence burst")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	b := &bench{out: stdout}
	var err error
	switch *mode {
	case "failover":
		err = b.run(ctx, *trials, strings.Split(*paths, ","))
	case "burst":
		err = b.runBurst(ctx, *volumes)
	case "attach":
		var o attachOptions
		if o.counts, err = parseInts(*counts); err == nil {
			o.qps, o.burstQPS = strings.Split(*qps, ","), strings.Split(*burstQPS, ",")
			o.burstVols, o.fenceDelay, o.attachCount = *burstVols, *fenceDelay, *attachCount
			err = b.runAttach(ctx, o)
		}
	default:
		err = fmt.Errorf("unknown --mode %q: want failover, burst or attach", *mode)
	}
	if err != nil {
		fmt.Fprintln(stderr, "fence-bench:", err)
		return 1
	}
	return 0
}

func (b *bench) run(ctx context.Context, trials int, paths []string) error {
	var lines []string
	for _, path := range paths {
		line, err := b.measure(ctx, trials, path)
		if err != nil {
			return err
		}
		lines = append(lines, line)
	}
	b.printf("\n%-16s %6s %8s %8s %8s %8s\n", "path", "trials", "p50", "p95", "min", "max")
	for _, l := range lines {
		b.printf("%s\n", l)
	}
	return nil
}

// measure runs the trials of one path on a control plane of its own: the
// in-tree path runs with the NonGracefulFailover gate off, so that only
// Kubernetes' own pod GC and attach/detach controller act on the taint.
func (b *bench) measure(ctx context.Context, trials int, path string) (string, error) {
	c, err := framework.Start(ctx, b, framework.Options{})
	if err != nil {
		return "", err
	}
	defer c.Cleanup(false)
	var args, mockArgs []string
	switch path {
	case "out-of-service":
		args = []string{"--feature-gates=NonGracefulFailover=false"}
	case "power":
		mockArgs = []string{"--disable-fence"}
	}
	p, err := c.StartProduct(ctx, framework.ProductOptions{AttacherArgs: args, MockArgs: mockArgs})
	if err != nil {
		return "", err
	}
	{
		var samples []time.Duration
		for i := 0; i < trials; i++ {
			d, err := trial(ctx, c, p, fmt.Sprintf("b%s%d", path[:1], i), path)
			if err != nil {
				return "", fmt.Errorf("%s trial %d: %w", path, i, err)
			}
			b.printf("%s trial %d: %.2fs\n", path, i, d.Seconds())
			samples = append(samples, d)
		}
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		return fmt.Sprintf("%-16s %6d %7.2fs %7.2fs %7.2fs %7.2fs", path, len(samples),
			timeline.Percentile(samples, 50).Seconds(), timeline.Percentile(samples, 95).Seconds(), samples[0].Seconds(), samples[len(samples)-1].Seconds()), nil
	}
}

// trial fails one node and returns eligible -> attached elsewhere.
func trial(ctx context.Context, c *framework.Cluster, p *framework.Product, prefix, path string) (time.Duration, error) {
	if path == "power" {
		// Each node's plugin is the machine of a BMC: the power fence
		// really stops it.
		for i := 0; i < 2; i++ {
			dir, err := os.MkdirTemp("", "fence-bench-bmc-")
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			p.SetPowerSwitch(fmt.Sprintf("%s-node-%d", prefix, i), p.Driver, bmcsim.Config{Dir: dir, User: "admin", Password: "bench-secret"})
		}
	}
	env, err := scenario.Setup(ctx, c, p, quiet{}, prefix, 2, 1)
	if err != nil {
		return 0, err
	}
	if path == "power" {
		unconfigure, err := p.ConfigurePowerSwitches(ctx, prefix+"-bmc", p.Driver, env.Nodes, "admin", "bench-secret")
		if err != nil {
			return 0, err
		}
		defer unconfigure()
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		return 0, err
	}
	rec := timeline.New(timeline.Target{Node: victim, Namespace: env.NS, Pod: env.PodName(0), PVName: env.Volumes[0]}, nil)
	stop := make(chan struct{})
	defer close(stop)
	if err := rec.Watch(c.Client, c.Dynamic, stop); err != nil {
		return 0, err
	}
	if err := env.Failover(ctx, rec, scenario.FailoverOptions{OutOfServiceTaint: path == "out-of-service", Partition: path == "power", Return: false}); err != nil {
		return 0, err
	}
	d, ok := rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere)
	if !ok {
		return 0, fmt.Errorf("milestones missing: %v", rec.Events())
	}
	return d, nil
}
