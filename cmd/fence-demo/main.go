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

// Command fence-demo runs the product's main job on a local, real control
// plane: a StatefulSet of 3 replicas with volumes of the mock driver on 4
// KWOK nodes, one node powered off, the failover followed to its end and
// printed as a timeline, then the array's safety violations. It exits non-zero
// if the failover did not complete or any violation occurred.
//
// With --real-nodes (as root) the same story runs on two real nodes, a
// kubelet and containerd each, with the product deployed from
// deploy/kubernetes/mock-example as a user deploys it and a container
// writing to its volume through the real kubelet's mounts (realnodes.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

type printer struct{ start time.Time }

func (p printer) Logf(format string, args ...interface{}) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	keep := flag.Bool("keep", false, "Keep the work directory (logs, array state) after the run")
	partition := flag.Bool("partition", false, "Partition the node instead of powering it off: its workload keeps writing, and the fence must stop it")
	realNodes := flag.Bool("real-nodes", false, "Run on two real nodes (a kubelet and containerd each) with the product deployed from deploy/kubernetes/mock-example, as root (make demo-real-nodes)")
	outOfService := flag.Bool("out-of-service", false, "Fail over the KEP-2268 way, an operator adding the out-of-service taint, instead of the automatic SafeDetach failover")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	if *realNodes {
		if *outOfService {
			fmt.Fprintln(os.Stderr, "fence-demo: --out-of-service is not available with --real-nodes")
			os.Exit(2)
		}
		err = runRealNodes(ctx, printer{start: time.Now()}, *keep, *partition)
	} else {
		err = run(ctx, *keep, *partition, *outOfService)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-demo: FAILED:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, keep, partition, outOfService bool) (err error) {
	log := printer{start: time.Now()}
	c, err := startCluster(ctx, log)
	if err != nil {
		return err
	}
	defer func() { c.Cleanup(keep || err != nil) }()
	log.Logf("building and starting the mock driver and csi-fence-attacher")
	p, err := c.StartProduct(ctx, framework.ProductOptions{})
	if err != nil {
		return err
	}
	env, err := scenario.Setup(ctx, c, p, log, "demo", 4, 3)
	if err != nil {
		return err
	}
	victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		return err
	}
	rec := timeline.New(timeline.Target{Node: victim, Namespace: env.NS, Pod: env.PodName(0), PVName: env.Volumes[0]},
		func(e timeline.Event) { log.Logf("  -> %s %s", e.What, e.Detail) })
	stop := make(chan struct{})
	defer close(stop)
	if err := rec.Watch(c.Client, c.Dynamic, stop); err != nil {
		return err
	}
	log.Logf("failing node %s, which runs %s", victim, env.PodName(0))
	failErr := env.Failover(ctx, rec, scenario.FailoverOptions{Partition: partition, OutOfServiceTaint: outOfService, Return: true})

	fmt.Println("\nTimeline of the failover:")
	rec.Print(os.Stdout)
	if d, ok := rec.Since(timeline.NodeDown, timeline.AttachedElsewhere); ok {
		fmt.Printf("\nnode down -> volume attached elsewhere: %.1fs\n", d.Seconds())
	}
	if d, ok := rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere); ok {
		fmt.Printf("pod eligible (Terminating) -> volume attached elsewhere: %.1fs\n", d.Seconds())
	}
	v, verr := p.Violations()
	if verr != nil {
		return verr
	}
	fmt.Printf("\nSafety violations on the array: S1=%d S2=%d\n", v["S1"], v["S2"])
	if failErr != nil {
		return fmt.Errorf("failover did not complete: %w", failErr)
	}
	if v["S1"] != 0 || v["S2"] != 0 {
		return fmt.Errorf("safety violations: %v", v)
	}
	fmt.Println("Failover complete, no violations.")
	return nil
}

// startCluster starts the local control plane, building its pinned binaries
// first when they are not cached.
func startCluster(ctx context.Context, log printer) (*framework.Cluster, error) {
	log.Logf("preparing the control-plane binaries (a cold build takes several minutes; cached afterwards)")
	return framework.Start(ctx, log, framework.Options{})
}
