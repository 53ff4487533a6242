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

package fencerecord

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// The node-level fence (a power fence) is recorded in the same request as the
// volumes, by the same rules: the intent before the backend acts (S8), the
// outcome after. A request that completed and starts over forgets the last
// node-level fence (update): a node powered off in an earlier failure and
// back since is not off now.

// RecordQuarantine makes sure, before a node is quarantined, that it has a
// FencingRequest in phase Fencing (created if need be, started over if it
// had completed): the quarantine taint is lifted only by a release that
// reads the record, and a quarantine with no record behind it could never
// be told from one whose record was lost (S6: a node that comes back
// before anything was fenced is released, not left for an admin).
func RecordQuarantine(ctx context.Context, c Client, nodeName, reason string) error {
	return update(ctx, c, nodeName, reason, MaxVolumes, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		changed := fr.Status.Phase != fencingv1alpha1.PhaseFencing || fr.Status.StartTime == nil
		started(fr, now)
		return changed
	})
}

// RecordNodeFenceIntent records, before the backend acts, that the node is
// about to be fenced as a whole by backend (config, agent: what will run).
func RecordNodeFenceIntent(ctx context.Context, c Client, nodeName, reason, backend, config, agent string) error {
	return update(ctx, c, nodeName, reason, MaxVolumes, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		nf := fr.Status.NodeFence
		if nf == nil || nf.Backend != backend {
			nf = &fencingv1alpha1.NodeFence{Backend: backend}
		}
		nf.Config, nf.Agent = config, agent
		nf.StartedTime = &now
		nf.Attempts++
		nf.ConfirmedTime, nf.Error = nil, ""
		fr.Status.NodeFence = nf
		started(fr, now)
		return true
	})
}

// RecordNodeFenceOutcome records what the backend's fence did: confirmed
// (the node is off) or the error; output is the agent's redacted output.
//
// notReadySince is the node's Ready condition's lastTransitionTime read
// just before the fence (NodeFenced holds it against the node's).
func RecordNodeFenceOutcome(ctx context.Context, c Client, nodeName, backend string, confirmed bool, errMsg, output string, notReadySince *metav1.Time) error {
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		nf := fr.Status.NodeFence
		if nf == nil || nf.Backend != backend {
			return false // the request started over meanwhile
		}
		nf.Output = output
		if confirmed {
			nf.ConfirmedTime, nf.Error, nf.NotReadySince = &now, "", notReadySince
		} else {
			nf.Error = errMsg
		}
		return true
	})
}

// NodeFenced reports whether fr records the node confirmed fenced as a whole
// (powered off) in the current fencing of it, and the node has not been
// Ready since: a node powered on again is not fenced, whatever the record
// says. node is the node as last read. The record keeps the Ready
// condition's transition time as read before the fence (notReadySince):
// while the condition has not transitioned since, the node has not been
// Ready in between. Those are times of one clock, the node lifecycle
// controller's, compared for equality; this process's clock (the
// confirmation time) is never compared with them. A record without
// notReadySince (written by an older version, or confirmed while the node
// could not be read) says nothing of the episode it ended: the only
// comparison left would be of the controller's clock with this one's,
// whose skew is unknown, so it is not taken as fenced. The backend fences
// again (a power off is idempotent), or a person acts.
func NodeFenced(fr *fencingv1alpha1.FencingRequest, node *v1.Node) bool {
	if fr == nil || fr.Status.Phase == fencingv1alpha1.PhaseComplete {
		return false
	}
	nf := fr.Status.NodeFence
	if nf == nil || nf.ConfirmedTime == nil {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type != v1.NodeReady {
			continue
		}
		if c.Status == v1.ConditionTrue {
			return false
		}
		return nf.NotReadySince != nil && c.LastTransitionTime.Equal(nf.NotReadySince)
	}
	return false
}

// RecordOutOfServiceTaint records, before the taint is added, that this
// system adds the out-of-service taint to the node for its current
// node-level fence, and returns the taint's timeAdded to use: the one
// recorded already in this fence if any (a pass that crashed, or read a
// stale cache, before its taint), so that the taint and the record always
// agree. A node without a node-level fence in its record gets no taint.
func RecordOutOfServiceTaint(ctx context.Context, c Client, nodeName string) (metav1.Time, error) {
	var added metav1.Time
	recorded := false
	err := updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		nf := fr.Status.NodeFence
		if nf == nil {
			return false
		}
		recorded = true
		if nf.OutOfServiceTaintAdded != nil {
			added = *nf.OutOfServiceTaintAdded
			return false
		}
		// Taint times travel with a precision of seconds.
		added = metav1.NewTime(now.Truncate(time.Second))
		nf.OutOfServiceTaintAdded = &added
		return true
	})
	if err == nil && !recorded {
		err = fmt.Errorf("no node-level fence of node %s is recorded: not adding the out-of-service taint", nodeName)
	}
	return added, err
}

// OwnOutOfServiceTaint reports whether taint is the out-of-service taint
// this system added to the node for the fence fr records.
func OwnOutOfServiceTaint(fr *fencingv1alpha1.FencingRequest, taint *v1.Taint) bool {
	if fr == nil || fr.Status.NodeFence == nil || fr.Status.NodeFence.OutOfServiceTaintAdded == nil || taint == nil || taint.TimeAdded == nil {
		return false
	}
	return taint.TimeAdded.Equal(fr.Status.NodeFence.OutOfServiceTaintAdded)
}

// ReadyTransition is the node's Ready condition's lastTransitionTime (nil
// without one), to record as NodeFence.NotReadySince.
func ReadyTransition(node *v1.Node) *metav1.Time {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			t := c.LastTransitionTime
			return &t
		}
	}
	return nil
}

// MaxForceDeletedPods bounds status.forceDeletedPods: more than a node's pods
// (kubelet's default --max-pods is 110), so that a failure's entries outlive
// the next ones until the node is back.
const MaxForceDeletedPods = 256

// RecordForceDeletedPods records, before the pods are force-deleted, the
// termination reason their containers' preStop hooks are to get when the
// node is back (status.forceDeletedPods), in one write for all of them; its
// agent serves them from there. A node without a request has none to keep
// them in: the hooks get Unknown.
func RecordForceDeletedPods(ctx context.Context, c Client, nodeName string, deleted []fencingv1alpha1.ForceDeletedPod) error {
	if len(deleted) == 0 {
		return nil
	}
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		pods, changed := fr.Status.ForceDeletedPods, false
		for _, pod := range deleted {
			if i := slices.IndexFunc(pods, func(p fencingv1alpha1.ForceDeletedPod) bool { return p.UID == pod.UID }); i >= 0 {
				if pods[i].TerminationReason == pod.TerminationReason {
					continue
				}
				pods = slices.Delete(slices.Clone(pods), i, i+1)
			}
			pod.DeletedTime = &now
			pods, changed = append(slices.Clip(pods), pod), true
		}
		if !changed {
			return false
		}
		if n := len(pods) - MaxForceDeletedPods; n > 0 {
			pods = pods[n:]
		}
		fr.Status.ForceDeletedPods = pods
		return true
	})
}

// ForceDeletedPodReason returns the termination reason recorded for the pod
// with uid, if fr has one.
func ForceDeletedPodReason(fr *fencingv1alpha1.FencingRequest, uid types.UID) (fencingv1alpha1.ForceDeletedPod, bool) {
	if fr != nil {
		for _, p := range fr.Status.ForceDeletedPods {
			if p.UID == uid {
				return p, true
			}
		}
	}
	return fencingv1alpha1.ForceDeletedPod{}, false
}
