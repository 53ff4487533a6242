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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// A machine fence (backend machine) takes longer than one pass: the Machine
// is deleted in one, the infrastructure provider reports the instance gone
// minutes later. So its intent is recorded once per Machine and fencing,
// and each later pass only reads where the deletion is, until it is
// confirmed (RecordNodeFenceOutcome) or the request starts over.

// MachineIntentRecorded reports whether fr holds the intent, not yet
// confirmed, of a machine fence of the Machine with uid: a pass that finds
// it only follows the deletion that intent started.
func MachineIntentRecorded(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.MachineTarget {
	if fr == nil || fr.Status.Phase == fencingv1alpha1.PhaseComplete {
		return nil
	}
	nf := fr.Status.NodeFence
	if nf == nil || nf.Backend != fencingv1alpha1.BackendMachine || nf.Machine == nil || nf.StartedTime == nil {
		return nil
	}
	return nf.Machine
}

// RecordMachineFenceIntent records, before the Machine is deleted, that
// the node is about to be fenced by deleting target (S8): from then on the
// node's instance may be gone. A second call for the same Machine (UID) in
// the same fencing changes nothing, so that passes that follow a slow
// deletion neither count attempts nor move startedTime.
func RecordMachineFenceIntent(ctx context.Context, c Client, nodeName, reason string, target fencingv1alpha1.MachineTarget) error {
	return update(ctx, c, nodeName, reason, MaxVolumes, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		nf := fr.Status.NodeFence
		if nf != nil && nf.Backend == fencingv1alpha1.BackendMachine && nf.Machine != nil && nf.Machine.UID == target.UID && nf.StartedTime != nil {
			return false
		}
		if nf == nil || nf.Backend != fencingv1alpha1.BackendMachine {
			nf = &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendMachine}
		}
		t := target
		nf.Machine = &t
		nf.Config = target.Namespace + "/" + target.Name
		nf.Agent = target.Infrastructure.Kind + "/" + target.Infrastructure.Name
		nf.StartedTime = &now
		nf.Attempts++
		nf.ConfirmedTime, nf.Error, nf.Output, nf.NotReadySince = nil, "", "", nil
		fr.Status.NodeFence = nf
		started(fr, now)
		return true
	})
}

// RecordMachineDeletion records who started the deletion of the Machine
// the intent names: "fence-attacher", or "other" when it was being deleted
// already (by MachineHealthCheck, a MachineSet, an admin).
func RecordMachineDeletion(ctx context.Context, c Client, nodeName string, uid string, startedBy string) error {
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
		m := MachineIntentRecorded(fr)
		if m == nil || string(m.UID) != uid || m.DeletionStartedBy == startedBy {
			return false
		}
		m.DeletionStartedBy = startedBy
		return true
	})
}

// RecordInfrastructureDeletionSeen records whether the InfraMachine of
// infraUID the intent names was read, present, being deleted through its
// provider (seen) or not (paused, marked for clusterctl move since): the
// read that later finds it gone confirms the fence only if the last read
// before saw that. The time is the first such read's; a record that says
// so already is left as it is.
func RecordInfrastructureDeletionSeen(ctx context.Context, c Client, nodeName string, infraUID types.UID, seen bool) error {
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, now metav1.Time) bool {
		m := MachineIntentRecorded(fr)
		if m == nil || fr.Status.NodeFence.ConfirmedTime != nil || m.Infrastructure.UID != infraUID || (m.Infrastructure.DeletionSeenTime != nil) == seen {
			return false
		}
		m.Infrastructure.DeletionSeenTime = nil
		if seen {
			m.Infrastructure.DeletionSeenTime = &now
		}
		return true
	})
}

// RecordMachineProgress records where the Machine's deletion is while the
// infrastructure has not confirmed it (errMsg: what went wrong, progress:
// what it waits for), changing nothing when both are as recorded: a pass
// every few seconds over a slow provider must not rewrite the record.
func RecordMachineProgress(ctx context.Context, c Client, nodeName, errMsg, progress string) error {
	if len(errMsg) > maxMachineMessage {
		errMsg = errMsg[:maxMachineMessage]
	}
	if len(progress) > maxMachineMessage {
		progress = progress[:maxMachineMessage]
	}
	return updateExisting(ctx, c, nodeName, func(fr *fencingv1alpha1.FencingRequest, _ metav1.Time) bool {
		if MachineIntentRecorded(fr) == nil || fr.Status.NodeFence.ConfirmedTime != nil {
			return false
		}
		nf := fr.Status.NodeFence
		if nf.Error == errMsg && nf.Output == progress {
			return false
		}
		nf.Error, nf.Output = errMsg, progress
		return true
	})
}

// maxMachineMessage bounds what a provider's condition message may put in
// the record.
const maxMachineMessage = 1024
