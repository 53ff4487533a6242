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
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// protectionPeriod is how often updateProtection counts the pods that would
// not fail over: each pass reads the storm guard's Lease and assesses every
// pod, and the alert on the count waits an hour.
const protectionPeriod = time.Minute

// protectionCluster is what protection.Assess reads, from this controller's
// caches and options; the storm guard's Lease is read live (once a pass).
func (c *Controller) protectionCluster(ctx context.Context, nodes int) protection.Cluster {
	configured := map[string]bool{}
	cl := protection.Cluster{
		Facts:      c.facts(),
		Registered: true,
		Gate:       c.opts.NonGracefulFailover,
		Backends:   c.opts.Backends,
		// Asked for each pod: answered once a node and backend (the
		// out-of-service one looks at every pod of the node).
		NodeBackend: func(node *v1.Node, backend string) bool {
			key := node.Name + "/" + backend
			if ok, known := configured[key]; known {
				return ok
			}
			b := c.nodeBackend(backend)
			configured[key] = b != nil && b.configured(node)
			return configured[key]
		},
		Nodes: nodes,
	}
	limits := c.registry.limits(klog.FromContext(ctx), guardLimits{maxNodes: c.opts.MaxFencedNodes, maxPercent: c.opts.MaxFencedNodePercent})
	cl.MaxNodes, cl.MaxPercent = limits.maxNodes, limits.maxPercent
	lease, err := c.client.CoordinationV1().Leases(c.opts.StormGuardNamespace).Get(ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
	if err == nil {
		cl.Paused = lease.Annotations[PausedAnnotation]
		cl.Admitted = nodeList(lease.Annotations[stormGuardAnnotation])
	}
	return cl
}

// updateProtection sets the gauge of pods not protected, by reason: each
// running pod on a node, assessed by protection.Assess as if its node died
// now, from the caches. Only the owner of node-level state says it (its
// configuration decides); the others say zero, so that a sum or a max over
// the replicas counts each pod once.
func (c *Controller) updateProtection(ctx context.Context) {
	counts := map[protection.Reason]int{}
	if c.owner.IsOwner() {
		nodes, _ := c.nodes.List(labels.Everything())
		pods, _ := c.factory.Core().V1().Pods().Lister().List(labels.Everything())
		cl := c.protectionCluster(ctx, len(nodes))
		for _, p := range pods {
			if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
				continue
			}
			node, err := c.nodes.Get(p.Spec.NodeName)
			if err != nil {
				continue
			}
			if a := protection.Assess(p, node, cl); !a.Protected && a.Reason.Counted() {
				counts[a.Reason]++
			}
		}
	}
	for _, r := range protection.Reasons {
		unprotectedPods.WithLabelValues(string(r)).Set(float64(counts[r]))
	}
}
