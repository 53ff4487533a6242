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
	"fmt"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// budgetStep is one step of a failover, from the pod eligible (its
// eviction seen) to its volume attached elsewhere: the milestone that ends
// it, the milestones that had to happen before it could start (the latest
// of them starts it), and who takes it.
type budgetStep struct {
	what  string
	after []string
	who   string
}

// budgetSteps are the failover's steps in causal order. The replacement's
// scheduling and the old attachment's removal run side by side; the new
// attachment waits for both (a ReadWriteOnce volume is attached to one
// node at a time).
var budgetSteps = []budgetStep{
	{timeline.StorageFenced, []string{timeline.PodEvicted}, "the product: quarantine, fence (one RPC)"},
	{timeline.PodForceDeleted, []string{timeline.StorageFenced}, "force delete (the product; the pod GC on the in-tree path)"},
	{timeline.PodRecreated, []string{timeline.PodForceDeleted}, "StatefulSet controller"},
	{timeline.PodReplaced, []string{timeline.PodRecreated}, "kube-scheduler"},
	{timeline.OldVADeleted, []string{timeline.PodForceDeleted}, "the product (its attachment deleted; the A/D controller on the in-tree path), attacher"},
	{timeline.NewAttachment, []string{timeline.OldVADeleted, timeline.PodReplaced}, "A/D controller's attach"},
	{timeline.AttachedElsewhere, []string{timeline.NewAttachment}, "attacher: ControllerPublish"},
}

// recoverySteps are the steps of a failover on real nodes from the node
// down to the replacement writing: the control plane's detection and
// eviction before the pod is eligible, the failover's steps (budgetSteps),
// then the new node's kubelet and container runtime, milestones read from
// their logs (realnodes.go) and the writer's first record on the volume.
var recoverySteps = append(append([]budgetStep{
	{timeline.NodeNotReady, []string{timeline.NodeDown}, "node lifecycle controller: NotReady (grace period)"},
	{timeline.PodEvicted, []string{timeline.NodeNotReady}, "taint eviction controller: the toleration"},
}, budgetSteps...),
	budgetStep{AttachVerified, []string{timeline.AttachedElsewhere, timeline.PodReplaced}, "kubelet: attach verified (Node volumesAttached, its own volumesInUse reported)"},
	budgetStep{VolumeStaged, []string{AttachVerified}, "kubelet: NodeStageVolume"},
	budgetStep{VolumeMounted, []string{VolumeStaged}, "kubelet: NodePublishVolume"},
	budgetStep{SandboxReady, []string{VolumeMounted}, "kubelet, containerd: the pod's sandbox (pause, CNI)"},
	budgetStep{ContainerStarted, []string{SandboxReady}, "kubelet, containerd: the writer's container"},
	// The writer writes at once when it starts, before containerd logs
	// that its StartContainer returned: both from the sandbox.
	budgetStep{ReplacementWriting, []string{SandboxReady}, "the writer's container started, its first record on the volume"},
)

// budgetTable says where the time of r's trials went, step by step: when
// each step ended after the pod became eligible (p50, p95) and how long
// the step itself took (from the latest of the milestones it waited for),
// as the bench's watches saw them. A step a path does not take (no fence
// on the in-tree path) is left out; a milestone a trial missed is left out
// of that trial's figures. Empty without timelines.
func budgetTable(r pathResult) string {
	return stepTable(r, timeline.PodEvicted, "the pod eligible", budgetSteps)
}

// recoveryTable is budgetTable from the node down to the replacement
// writing, on real nodes (recoverySteps).
func recoveryTable(r pathResult) string {
	return stepTable(r, timeline.NodeDown, "the node down", recoverySteps)
}

// stepTable is the table of steps of r's trials, each step's end counted
// from the milestone from (said as fromWhat).
func stepTable(r pathResult, from, fromWhat string, steps []budgetStep) string {
	if len(r.timelines) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Where the time goes, %s path (%d trials; from %s):\n", r.path, len(r.timelines), fromWhat)
	fmt.Fprintf(&sb, "  %-30s %8s %8s | %8s %8s  %s\n", "step ends", "at p50", "p95", "step p50", "p95", "taken by")
	// Each trial's milestones by name, once.
	var trials []map[string]time.Time
	for _, events := range r.timelines {
		when := map[string]time.Time{}
		for _, e := range events {
			if _, ok := when[e.What]; !ok {
				when[e.What] = e.At
			}
		}
		trials = append(trials, when)
	}
	for _, st := range steps {
		var at, took []time.Duration
		for _, when := range trials {
			origin, ok1 := when[from]
			end, ok2 := when[st.what]
			if !ok1 || !ok2 {
				continue
			}
			at = append(at, end.Sub(origin))
			var start time.Time
			for _, a := range st.after {
				if t, ok := when[a]; ok && t.After(start) {
					start = t
				}
			}
			if !start.IsZero() {
				took = append(took, max(end.Sub(start), 0))
			}
		}
		if len(at) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "  %-30s %7.2fs %7.2fs | %7.2fs %7.2fs  %s\n", st.what,
			timeline.Percentile(at, 50).Seconds(), timeline.Percentile(at, 95).Seconds(),
			timeline.Percentile(took, 50).Seconds(), timeline.Percentile(took, 95).Seconds(), st.who)
	}
	return sb.String()
}
