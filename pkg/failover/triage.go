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
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// triage sorts the pods of a node that may fail over.
type triage struct {
	// candidates are the Terminating pods that fail over once their
	// volumes are fenced (every volume node-local or of a SafeDetach
	// driver that can fence, none RWX, at least one of them a CSI volume).
	candidates []candidate
	// staying holds the volumes (driver^handle) of the pods that stay on
	// the node, which are not fenced under them.
	staying map[string]bool
	// blocked are the Terminating pods that storage fencing cannot move,
	// and why; optedOut those whose owner said no (FailoverAllowed).
	blocked, optedOut []podNote
}

// candidate is a Terminating pod that fails over once its volumes are fenced.
type candidate struct {
	pod  *v1.Pod
	vols []podgc.Volume
}

type podNote struct {
	pod *v1.Pod
	why string
}

// sort triages the pods of node from the caches (protection.Triage, the
// decision `kubectl fence explain` calls too); it has no effect (sayTriage
// says what it found).
func (c *Controller) sort(node *v1.Node, pods []*v1.Pod) triage {
	t := triage{staying: map[string]bool{}}
	facts, wholeNode := c.facts(), c.fencesWhole(node)
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			vols, _ := podgc.Volumes(p, protection.Resolve(c.pvOf, p.Namespace))
			for _, v := range vols {
				t.staying[v.Driver+"^"+v.VolumeHandle] = true
			}
			continue
		}
		switch v := protection.Triage(p, facts, wholeNode); v.Class {
		case protection.Blocked:
			t.blocked = append(t.blocked, podNote{p, v.Why})
		case protection.OptedOut:
			t.optedOut = append(t.optedOut, podNote{p, v.Why})
		default:
			t.candidates = append(t.candidates, candidate{pod: p, vols: v.Vols})
		}
	}
	return t
}

// sayTriage says why pods do not fail over, and starts timing the
// candidates' failover (the failover duration metric).
func (c *Controller) sayTriage(ctx context.Context, node *v1.Node, t triage) {
	for _, n := range t.blocked {
		c.blocked(ctx, node, n.pod, n.why)
	}
	for _, n := range t.optedOut {
		klog.FromContext(ctx).V(4).Info("Pod does not fail over", "pod", klog.KObj(n.pod), "why", n.why)
		c.recorder.Eventf(n.pod, v1.EventTypeNormal, "FailoverDisabled", "Not failing over pod %s: %s", n.pod.Name, n.why)
	}
	for _, cand := range t.candidates {
		c.eligible.seen(cand.pod)
	}
}

// facts are what the triage reads, from the caches.
func (c *Controller) facts() protection.Facts {
	return protection.Facts{
		PV:                   c.pvOf,
		Driver:               c.drivers.Get,
		StorageFences:        c.storageFences,
		FencesOnOutOfService: c.fencesOnOutOfService,
		NamespaceLabels: func(namespace string) map[string]string {
			if ns, err := c.ns.Get(namespace); err == nil {
				return ns.Labels
			}
			return nil
		},
		OptIn: c.opts.FailoverOptIn,
	}
}

// fencesWhole reports whether the node has a power switch (or a Cluster API
// Machine) to fence it as a whole.
func (c *Controller) fencesWhole(node *v1.Node) bool {
	return c.powerConfigured(node.Name) || c.machineConfigured(node)
}

// failsOver returns whether a driver's volumes on node may fail over
// (protection.FailsOver).
func (c *Controller) failsOver(node *v1.Node) func(driver string) bool {
	facts, wholeNode := c.facts(), c.fencesWhole(node)
	return func(driver string) bool {
		ok, _, _ := protection.FailsOver(facts, wholeNode, driver)
		return ok
	}
}

// pvOf resolves a claim to its bound PersistentVolume, from the caches.
func (c *Controller) pvOf(namespace, claim string) (*v1.PersistentVolume, error) {
	pvc, err := c.pvcs.PersistentVolumeClaims(namespace).Get(claim)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("claim %s/%s %w", namespace, claim, protection.ErrUnbound)
	}
	pv, err := c.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", pvc.Spec.VolumeName, err)
	}
	return pv, nil
}

// blocked says, once per pod and reason, why a Terminating pod on an
// unreachable node will not be moved by storage fencing: an Event on the
// pod (FailoverBlocked), so that its owner sees why it stays Terminating
// (unless a power fence or an admin's out-of-service taint moves it).
func (c *Controller) blocked(ctx context.Context, node *v1.Node, p *v1.Pod, why string) {
	klog.FromContext(ctx).V(4).Info("Pod cannot fail over by SafeDetach", "pod", klog.KObj(p), "why", why)
	if !nodehealth.Unreachable(node) || !c.notices.first(p.UID, why) {
		return
	}
	c.recorder.Eventf(p, v1.EventTypeWarning, "FailoverBlocked", "Pod %s on unreachable node %s is not failed over by storage fencing: %s", p.Name, node.Name, why)
}

// notices remembers the last reason said of each pod (by UID), so that a
// pass over a node says it once, not at every sync; forgotten with the pod.
type notices struct {
	mu   sync.Mutex
	last map[types.UID]string
}

// first records why for uid and reports whether it is news.
func (n *notices) first(uid types.UID, why string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last == nil {
		n.last = map[types.UID]string{}
	}
	if n.last[uid] == why {
		return false
	}
	n.last[uid] = why
	return true
}

func (n *notices) forget(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.last, uid)
}
