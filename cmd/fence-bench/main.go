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
// control plane (see package test/bench): from the moment a pod becomes
// eligible (Terminating on a NotReady node) to its replacement's volume
// attached on another node, over repeated trials, for each failover path,
// and prints p50/p95.
//
//	go run ./cmd/fence-bench --trials=5 --paths=out-of-service,automatic
//
// With --nodes=real (as root) it measures the same on real nodes, each a
// kubelet and containerd of its own, the product deployed from its shipped
// manifests and a container writing to the volume: also node down ->
// replacement writing, with each step's share, beside the in-tree
// out-of-service path on the same nodes.
//
//	go run ./cmd/fence-bench --nodes=real --trials=10
//
// With --mode=burst it measures instead what a burst of detaches from one
// node costs, fenced (the node NotReady) against plain.
//
//	go run ./cmd/fence-bench --mode=burst --volumes=200
//
// With --mode=attach it measures what the fencing Attacher costs on the
// attach path, with the fence and without, and attaches during a burst of
// fences from a failed node (external-attacher issue #761).
//
//	go run ./cmd/fence-bench --mode=attach --counts=100,500 --qps=default,1000
//
// With --mode=scale it builds a large cluster (1,000 KWOK nodes, 30,000
// pods, 3,000 volumes attached through the product) and measures its
// steady state, one node with 110 pods failing and a rack losing power.
//
//	go run ./cmd/fence-bench --mode=scale --nodes=1000 --pods=30000 --volumes=3000
//
// It exits 0 when every measurement ran, 1 when one failed or was
// interrupted (after printing what it measured), 2 on a bad flag.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/test/bench"
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain runs fence-bench with args, printing its progress and tables to
// stdout and its failure to stderr, and returns its exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if err == nil {
		err = bench.Run(cfg, stdout)
	}
	if err == nil {
		return 0
	}
	// The run's failure and, after it, what it left running.
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		fmt.Fprintln(stderr, "fence-bench:", e)
	}
	return 1
}

// errUsage is a flag the flag package could not parse (it printed why).
var errUsage = errors.New("usage")

// parseFlags reads fence-bench's flags into the bench's Config.
func parseFlags(args []string, stderr io.Writer) (bench.Config, error) {
	fs := flag.NewFlagSet("fence-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trials := fs.Int("trials", 5, "Trials per path")
	paths := fs.String("paths", strings.Join(bench.FailoverPaths, ","), "Failover paths to measure: out-of-service (the in-tree path: taint added by the benchmark the moment the pod is eligible), automatic (SafeDetach pod GC, storage fence) and power (SafeDetach pod GC of a driver without UNPUBLISH_FENCE, the node powered off by fence_ipmilan through an ipmi_sim BMC; needs fence_ipmilan, ipmitool and ipmi_sim, which hack/install-fence-agents.sh installs)")
	mode := fs.String("mode", "failover", "failover: the failover overhead per path (--trials, --paths); burst: a burst of fenced and of plain detaches from one node (--volumes); attach: attach/detach throughput with and without the fence, and attaches during a fence burst (--counts, --qps, --burst-volumes); scale: a large cluster's steady state, a 110-pod node failing and a rack losing power (--nodes, --pods, --volumes, --rack)")
	volumes := fs.Int("volumes", 200, "With --mode=burst: VolumeAttachments detached at once from one node")
	counts := fs.String("counts", "100,500", "With --mode=attach: VolumeAttachments attached and detached at once per round")
	qps := fs.String("qps", "default,1000", "With --mode=attach: the attacher's --kube-api-qps (and --kube-api-burst) per round; default is external-attacher's 5 (10)")
	burstVols := fs.Int("burst-volumes", 200, "With --mode=attach: volumes fenced at once from a failed node while attaches run (0: skip)")
	burstQPS := fs.String("burst-qps", "1000", "With --mode=attach: the attacher's --kube-api-qps in the fence-burst phase")
	fenceDelay := fs.Duration("fence-delay", 500*time.Millisecond, "With --mode=attach: the mock driver's latency of each ControllerUnpublishVolume during the fence burst")
	attachCount := fs.Int("attaches", 200, "With --mode=attach: attaches measured alone and during the fence burst")
	nodes := fs.String("nodes", "kwok", "kwok: KWOK nodes beside simulated kubelets; real (with --mode=failover, as root): three real nodes, each a kubelet and containerd of its own, the product deployed from deploy/kubernetes/mock-example, a container writing to the volume, and node down -> replacement writing measured too (--paths of automatic, out-of-service); with --mode=scale: the number of KWOK nodes (default 1000)")
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
			return bench.Config{}, err
		}
		return bench.Config{}, errUsage
	}
	cfg := bench.Config{Mode: *mode, Trials: *trials, Paths: strings.Split(*paths, ","), Volumes: *volumes, Keep: *keep}
	scaleNodes := 1000
	switch *nodes {
	case "kwok":
	case "real":
		cfg.RealNodes = true
		// On real nodes the paths are the product's and the in-tree one,
		// unless given.
		cfg.Paths = bench.RealNodePaths
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "paths" {
				cfg.Paths = strings.Split(*paths, ",")
			}
		})
	default:
		n, err := strconv.Atoi(*nodes)
		if err != nil || *mode != "scale" {
			return cfg, fmt.Errorf("--nodes=%s: want kwok, real, or with --mode=scale a number of KWOK nodes", *nodes)
		}
		scaleNodes = n
	}
	switch *mode {
	case "attach":
		c, err := parseInts(*counts)
		if err != nil {
			return cfg, err
		}
		cfg.Attach = bench.AttachOptions{Counts: c, QPS: strings.Split(*qps, ","), BurstVolumes: *burstVols,
			BurstQPS: strings.Split(*burstQPS, ","), FenceDelay: *fenceDelay, Attaches: *attachCount}
	case "scale":
		cfg.Scale = bench.ScaleOptions{Nodes: scaleNodes, Pods: *pods, Volumes: 3000, HotPods: *hotPods, Rack: *rack, RackPods: *rackPods,
			GuardPercent: *guardPercent, InTree: *inTree, Window: *window, Settle: *settle, QPS: bench.APISetting(*controllerQPS),
			ControlPlaneQPS: *controlPlaneQPS, Workers: *workers, EnforceMemory: *enforceMemory, ProfileDir: *profileDir}
		// --volumes is the burst's 200 unless given: here 3,000.
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "volumes" {
				cfg.Scale.Volumes = *volumes
			}
		})
	}
	return cfg, nil
}

// parseInts reads "100,500".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}
