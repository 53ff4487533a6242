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

package failover

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// What others decided about a node's pods is honoured first, in every pass
// of the owner over a node that is not Ready, before this pass decides
// anything of its own: the out-of-service taint and FencingComplete free
// pods (honourSignals), and an eviction the taint manager lost is taken
// over (takeOverLostEvictions).

// taintsSeen remembers when this process first saw each NoExecute taint of
// each node, on its own clock: the taint's timeAdded is the node lifecycle
// controller's clock, which this process never compares with its own. A
// process that starts later sees every taint afresh, and so takes over an
// eviction later, never earlier. It is safe for concurrent use.
type taintsSeen struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[string]time.Time // node/key/timeAdded
}

func newTaintsSeen(c clock.PassiveClock) *taintsSeen {
	if c == nil {
		c = clock.RealClock{}
	}
	return &taintsSeen{clock: c, seen: map[string]time.Time{}}
}

// observe records the node's NoExecute taints as seen now if they are new,
// forgets the node's taints that are gone, and returns when each taint was
// first seen.
func (t *taintsSeen) observe(node *v1.Node) func(v1.Taint) time.Time {
	key := func(taint v1.Taint) string {
		// A taint added again since is another one; timeAdded is kept
		// to the second, as the API serializes it.
		var added int64
		if taint.TimeAdded != nil {
			added = taint.TimeAdded.Unix()
		}
		return fmt.Sprintf("%s/%s/%d", node.Name, taint.Key, added)
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	current := map[string]bool{}
	for _, taint := range node.Spec.Taints {
		if taint.Effect != v1.TaintEffectNoExecute {
			continue
		}
		k := key(taint)
		current[k] = true
		if _, ok := t.seen[k]; !ok {
			t.seen[k] = now
		}
	}
	for k := range t.seen {
		if strings.HasPrefix(k, node.Name+"/") && !current[k] {
			delete(t.seen, k)
		}
	}
	seen := map[string]time.Time{}
	for k := range current {
		seen[k] = t.seen[k]
	}
	return func(taint v1.Taint) time.Time { return seen[key(taint)] }
}

// forget drops what was seen of a node (it is gone).
func (t *taintsSeen) forget(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.seen {
		if strings.HasPrefix(k, node+"/") {
			delete(t.seen, k)
		}
	}
}

// takeOverLostEvictions evicts the pods of a node that is not Ready whose
// eviction by the taint manager is overdue (podgc.EvictionDue): their
// toleration of the node's NoExecute taints ran out, with a margin, and
// they are not terminating. Kubernetes lost that eviction (its taint
// manager does not retry a failed delete), and without it the pod stays
// Running on the dead node and never fails over. Only a node whose kubelet
// stopped talking is looked at, and each eviction reads it live first
// (podgc.GC.Evict). A pod whose eviction is not due yet brings the node
// back then: no event announces it.
func (c *Controller) takeOverLostEvictions(ctx context.Context, node *v1.Node, pods []*v1.Pod) {
	if !nodehealth.Unreachable(node) {
		return // a kubelet that talks runs its own pods' deletions
	}
	seen := c.taints.observe(node)
	now := c.taints.clock.Now()
	var next time.Duration
	var due []*v1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		at, ok := podgc.EvictionDue(p, node, seen)
		if !ok {
			continue
		}
		if wait := at.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		due = append(due, p)
	}
	// A node's pods go at once, as the force-deletes do.
	workqueue.ParallelizeUntil(ctx, forceDeleteWorkers, len(due), func(i int) {
		msg := fmt.Sprintf("csi-fence-attacher: the taint manager did not evict this pod from node %s, which is not Ready, when its toleration ran out: evicted in its place", node.Name)
		if err := c.pgc.Evict(ctx, due[i], msg); err != nil {
			klog.FromContext(ctx).Error(err, "A lost eviction was not taken over", "pod", klog.KObj(due[i]))
		}
	})
	if next > 0 {
		c.queue.AddAfter(node.Name, next)
	}
}

// honourSignals force-deletes the pods that others' signals free: KEP-2268's
// out-of-service taint and the Node Fencing KEP's FencingComplete, whoever
// set them (each delete guarded by a live read, S3).
func (c *Controller) honourSignals(ctx context.Context, node *v1.Node, pods []*v1.Pod) error {
	var freed []*v1.Pod
	for _, p := range pods {
		if podgc.OutOfService(p, node) || podgc.FencingComplete(p, node) {
			freed = append(freed, p)
		}
	}
	return c.forceDeleteAll(ctx, node.Name, freed, func(p *v1.Pod) string {
		if podgc.OutOfService(p, node) {
			return podgc.ReasonOutOfService
		}
		return podgc.ReasonFencingComplete
	}, nil, nil)
}
