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

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// The real-node demo's workload: a StatefulSet of one writer whose volume
// is a static PersistentVolume of the mock's array.
const (
	realNS     = "default"
	realSet    = "demo-writer"
	realVolume = "demo-vol-0"
	realClass  = "fence-demo"
)

// runRealNodes is the demo on two real nodes (a kubelet and containerd
// each, in their own network namespace and cgroup) with the product
// deployed as a user deploys it: deploy/kubernetes/mock-example applied
// with the images built here, the controller pod on the second node. A
// container on the first node writes to its volume through the real
// kubelet's mounts; that node is powered off (every process of it killed
// through its cgroup) or cut off the network, and the failover is followed
// as in the KWOK demo, then the node comes back and is cleaned and
// released.
func runRealNodes(ctx context.Context, log printer, keep, partition bool) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("--real-nodes runs kubelets and containerd: run it as root (make demo-real-nodes)")
	}
	if err := framework.CheckRealNodeHost(); err != nil {
		return fmt.Errorf("this host cannot run real nodes: %w", err)
	}
	c, err := startCluster(ctx, log)
	if err != nil {
		return err
	}
	defer func() { c.Cleanup(keep || err != nil) }()
	log.Logf("starting two real nodes (the kubelet and containerd are built once into ~/.cache/fence-attacher/node-bin) and building the product's images")
	nodes, err := c.StartRealNodes(ctx, 2, framework.RealNodeOptions{Prefix: "demo", ProductImages: true})
	if err != nil {
		return err
	}
	victim, other := nodes[0], nodes[1]
	log.Logf("applying deploy/kubernetes/mock-example as it ships (the images built here; the controller pod on %s)", other.Name)
	dep, err := c.DeployMockExample(ctx, nodes, framework.RealDeployOptions{ControllerNode: other.Name})
	if err != nil {
		return err
	}
	first, err := startRealWriter(ctx, c, dep, victim.Name, other.Name)
	if err != nil {
		return err
	}
	log.Logf("writer %s runs on %s: its container writes to %s, staged and published by the real kubelet", first.Name, victim.Name, realVolume)

	rec := timeline.New(timeline.Target{Node: victim.Name, Namespace: realNS, Pod: first.Name, PVName: realVolume},
		func(e timeline.Event) { log.Logf("  -> %s %s", e.What, e.Detail) })
	stop := make(chan struct{})
	defer func() {
		close(stop)
		rec.Wait()
	}()
	if err := rec.Watch(c.Client, c.Dynamic, stop); err != nil {
		return err
	}
	failErr := realFailover(ctx, c, rec, victim, other, first.UID, partition)

	fmt.Println("\nTimeline of the failover (real nodes):")
	rec.Print(os.Stdout)
	if d, ok := rec.Since(timeline.NodeDown, timeline.AttachedElsewhere); ok {
		fmt.Printf("\nnode down -> volume attached elsewhere: %.1fs\n", d.Seconds())
	}
	if d, ok := rec.Since(timeline.PodEvicted, timeline.AttachedElsewhere); ok {
		fmt.Printf("pod eligible (Terminating) -> volume attached elsewhere: %.1fs\n", d.Seconds())
	}
	data, err := os.ReadFile(filepath.Join(dep.DataDir(realVolume), "writes.log"))
	if err != nil {
		return err
	}
	byNode, recErr := recordsByNode(data)
	fmt.Printf("the writer's records on the volume, by node: %s\n", byNode)
	arr, err := dep.Array()
	if err != nil {
		return err
	}
	s, err := arr.Snapshot()
	if err != nil {
		return err
	}
	v := s.CountViolations()
	fmt.Printf("Safety violations on the array: S1=%d S2=%d\n", v[array.S1], v[array.S2])
	if failErr != nil {
		return fmt.Errorf("failover did not complete: %w", failErr)
	}
	if v[array.S1] != 0 || v[array.S2] != 0 {
		return fmt.Errorf("safety violations: %v", v)
	}
	if recErr != nil {
		return fmt.Errorf("the volume's data is not intact: %w", recErr)
	}
	fmt.Println("Failover complete on real nodes, no violations.")
	return nil
}

// startRealWriter makes the writer's volume and runs the writer on node
// on (the other node is unschedulable until it runs), and waits for its
// first writes.
func startRealWriter(ctx context.Context, c *framework.Cluster, dep *framework.RealDeployment, on, other string) (*corev1.Pod, error) {
	if err := c.StaticVolume(ctx, dep, realVolume, realNS, "data-"+realSet+"-0", realClass); err != nil {
		return nil, err
	}
	if err := c.SetUnschedulable(ctx, other, true); err != nil {
		return nil, err
	}
	if _, err := c.Client.AppsV1().StatefulSets(realNS).Create(ctx, framework.WriterStatefulSet(realSet, realClass), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pod, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", "", 3*time.Minute)
	if err != nil {
		return nil, err
	}
	if err := c.SetUnschedulable(ctx, other, false); err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != on {
		return nil, fmt.Errorf("the writer runs on %s, want %s", pod.Spec.NodeName, on)
	}
	return pod, c.WaitWrites(ctx, realNS, pod.Name, 5, time.Minute)
}

// realFailover fails victim, waits for the writer to run and write on
// other, then brings victim back and waits until it is cleaned and
// released.
func realFailover(ctx context.Context, c *framework.Cluster, rec *timeline.Recorder, victim, other *framework.RealNode, old types.UID, partition bool) error {
	if partition {
		rec.Mark(timeline.NodeDown, victim.Name+" cut off the network (its container keeps writing)")
		if err := c.Node(victim.Name).Partition(ctx); err != nil {
			return err
		}
	} else {
		rec.Mark(timeline.NodeDown, victim.Name+" powered off")
		if err := c.Node(victim.Name).PowerOff(ctx); err != nil {
			return err
		}
	}
	second, err := c.WaitWriterRunning(ctx, realNS, realSet+"-0", old, 4*time.Minute)
	if err != nil {
		return err
	}
	if second.Spec.NodeName != other.Name {
		return fmt.Errorf("the replacement runs on %s, want %s", second.Spec.NodeName, other.Name)
	}
	if err := framework.WaitFor(ctx, time.Minute, "the volume attached to "+other.Name, func(context.Context) (bool, error) {
		return rec.Has(timeline.AttachedElsewhere), nil
	}); err != nil {
		return err
	}
	if err := c.WaitWrites(ctx, realNS, second.Name, 3, time.Minute); err != nil {
		return err
	}
	rec.Mark("replacement writes", "3 writes on "+other.Name)

	if partition {
		rec.Mark(timeline.NodeBack, victim.Name+" connected again")
		if err := c.Node(victim.Name).Heal(ctx); err != nil {
			return err
		}
	} else {
		rec.Mark(timeline.NodeBack, victim.Name+" powered on (a reboot: its containers gone, its disk kept)")
		if err := c.Node(victim.Name).PowerOn(ctx); err != nil {
			return err
		}
	}
	return framework.WaitFor(ctx, 3*time.Minute, victim.Name+" cleaned and released", func(context.Context) (bool, error) {
		return rec.Has(timeline.NodeCleaned) && rec.Has(timeline.TaintsRemoved), nil
	})
}

// recordsByNode checks the writer's records on the volume (numbered 1, 2,
// 3, ... without gap, repeat or tear, each with its checksum) and counts
// them by the node that wrote them.
func recordsByNode(data []byte) (string, error) {
	recs, err := records.Check(data)
	counts := map[string]int{}
	for _, r := range recs {
		counts[r.Node]++
	}
	var out []string
	for n, k := range counts {
		out = append(out, fmt.Sprintf("%s %d", n, k))
	}
	sort.Strings(out)
	return strings.Join(out, ", "), err
}
