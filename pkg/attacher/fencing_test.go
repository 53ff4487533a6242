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

package attacher

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

func TestDecideFence(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	active := fencingRequest("node-1", fencingv1alpha1.OriginManual, fencingv1alpha1.PhasePending)
	automatic := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, "")
	complete := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete)
	tests := []struct {
		name string
		node *v1.Node
		fr   *fencingv1alpha1.FencingRequest
		// wantedOnNode: a pod on the node, not terminating, uses the volume.
		wantedOnNode bool
		wantReason   string
	}{
		{name: "healthy: graceful", node: node("node-1")},
		{name: "healthy, completed FencingRequest: graceful", node: node("node-1"), fr: complete},
		{name: "healthy, unrelated taint: graceful", node: node("node-1", taint("example.com/x", v1.TaintEffectNoExecute))},
		{name: "node deleted", wantReason: FenceReasonNodeDeleted},
		{name: "node deleted, with a FencingRequest", fr: active, wantReason: FenceReasonNodeDeleted},
		{name: "Ready=False", node: node("node-1", notReady), wantReason: FenceReasonNodeNotReady},
		{name: "Ready=Unknown", node: node("node-1", readyStatus(v1.ConditionUnknown)), wantReason: FenceReasonNodeNotReady},
		{name: "no Ready condition", node: node("node-1", noConditions), wantReason: FenceReasonNodeNotReady},
		// S4 (trial seed 8032): quarantined while down, back before any
		// fence, its pod ended there: nothing recorded, nothing in use.
		{name: "quarantine taint, Ready, nothing recorded: graceful", node: node("node-1", quarantineTaint)},
		{name: "quarantine taint, Ready, the volume's fence recorded (S8)", node: node("node-1", quarantineTaint),
			fr: withEntry(automatic, fencingv1alpha1.FencedVolume{Driver: "drv", VolumeHandle: "h", StartedTime: &metav1.Time{}}), wantReason: FenceReasonQuarantined},
		{name: "quarantine taint, Ready, the volume in use", node: node("node-1", quarantineTaint, inUseOf("drv", "h")), wantReason: FenceReasonVolumeInUse},
		{name: "quarantine taint, NotReady", node: node("node-1", notReady, quarantineTaint), wantReason: FenceReasonQuarantined},
		{name: "out-of-service taint", node: node("node-1", notReady, outOfServiceTaint), wantReason: FenceReasonOutOfService},
		{name: "out-of-service and quarantined", node: node("node-1", notReady, quarantineTaint, outOfServiceTaint), wantReason: FenceReasonOutOfService},
		{name: "manual FencingRequest on a Ready node", node: node("node-1"), fr: active, wantReason: FenceReasonFencingRequest},
		{name: "manual FencingRequest without an origin (the default) on a Ready node", node: node("node-1"), fr: fencingRequest("node-1", "", ""), wantReason: FenceReasonFencingRequest},
		{name: "S4: automatic FencingRequest on a Ready node (the failover's record of an earlier failure): graceful", node: node("node-1"), fr: automatic},
		{name: "S4: manual FencingRequest being deleted (withdrawn): graceful", node: node("node-1"), fr: withdrawn(active)},
		{name: "S4: manual FencingRequest released through its spec: graceful", node: node("node-1"), fr: releasedFR(active)},
		{name: "released manual request still holding an uncleaned entry of the volume: sticky (S8)", node: node("node-1"),
			fr: releasedFR(withEntry(active, fencingv1alpha1.FencedVolume{Driver: "drv", VolumeHandle: "h", StartedTime: &metav1.Time{}})), wantReason: FenceReasonQuarantined},
		{name: "FencingRequest on a NotReady node: the node's state is the reason", node: node("node-1", notReady), fr: active, wantReason: FenceReasonNodeNotReady},
		{name: "healthy, completed request still holding an uncleaned entry of the volume: sticky (S8)", node: node("node-1"),
			fr: withEntry(complete, fencingv1alpha1.FencedVolume{Driver: "drv", VolumeHandle: "h", StartedTime: &metav1.Time{}}), wantReason: FenceReasonQuarantined},
		{name: "healthy, completed request, the volume's entry cleaned: graceful", node: node("node-1"),
			fr: withEntry(complete, fencingv1alpha1.FencedVolume{Driver: "drv", VolumeHandle: "h", StartedTime: &metav1.Time{}, CleanedTime: &metav1.Time{}})},
		{name: "healthy, completed request, another driver's entry of the same handle: graceful", node: node("node-1"),
			fr: withEntry(complete, fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "h", StartedTime: &metav1.Time{}})},
		{name: "S1: Ready, the kubelet still reports the volume in use (a detach forced after the timeout)", node: node("node-1", inUseOf("drv", "h")),
			wantReason: FenceReasonVolumeInUse},
		{name: "S4 (trial seeds 11032, 13100): Ready, in use for a pod on the node that wants the volume: graceful",
			node: node("node-1", inUseOf("drv", "h")), wantedOnNode: true},
		{name: "S8: wanted on the node, but the record holds an uncleaned entry: sticky", node: node("node-1", inUseOf("drv", "h")), wantedOnNode: true,
			fr: withEntry(complete, fencingv1alpha1.FencedVolume{Driver: "drv", VolumeHandle: "h", StartedTime: &metav1.Time{}}), wantReason: FenceReasonQuarantined},
		{name: "wanted on the node, NotReady: the node's state is the reason", node: node("node-1", notReady, inUseOf("drv", "h")), wantedOnNode: true,
			wantReason: FenceReasonNodeNotReady},
		{name: "Ready, another volume in use: graceful", node: node("node-1", inUseOf("drv", "h2"))},
		{name: "Ready, another driver's volume of the same handle in use: graceful", node: node("node-1", inUseOf("other", "h"))},
		{name: "NotReady and in use: the node's state is the reason", node: node("node-1", notReady, inUseOf("drv", "h")), wantReason: FenceReasonNodeNotReady},
		{name: "manual FencingRequest and in use: the request is the reason", node: node("node-1", inUseOf("drv", "h")), fr: active, wantReason: FenceReasonFencingRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, canFence := range []bool{true, false} {
				fence, reason := DecideFence(canFence, tc.node, tc.fr, "drv", "h", tc.wantedOnNode)
				if reason != tc.wantReason {
					t.Errorf("canFence=%v: reason %q, want %q", canFence, reason, tc.wantReason)
				}
				if want := canFence && tc.wantReason != ""; fence != want {
					t.Errorf("canFence=%v: fence %v, want %v", canFence, fence, want)
				}
			}
		})
	}
}

func TestQuarantineRefusal(t *testing.T) {
	quarantinedFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))
	intentFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing,
		fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: "vol-1", StartedTime: &t0})
	tests := []struct {
		name    string
		node    *v1.Node
		fr      *fencingv1alpha1.FencingRequest
		wantErr string
	}{
		{name: "nothing in the way", node: node("node-1")},
		{name: "node gone or unreadable: not our call", node: nil},
		{name: "taint", node: node("node-1", quarantineTaint), wantErr: "is quarantined"},
		{name: "record: fenced", node: node("node-1"), fr: quarantinedFR, wantErr: "volume vol-1 is quarantined on node node-1"},
		{name: "record: fence intended, outcome unknown (S8)", node: node("node-1"), fr: intentFR, wantErr: "volume vol-1 is quarantined on node node-1"},
		{name: "record: cleaned", node: node("node-1"), fr: fencingRequest("node-1", "", "", cleanedEntry("vol-1"))},
		{name: "record: another volume", node: node("node-1"), fr: fencingRequest("node-1", "", "", fencedEntry("vol-2"))},
		{name: "record: another driver's volume of the same handle", node: node("node-1"),
			fr: fencingRequest("node-1", "", "", fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "vol-1", FencedTime: &t0})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, QuarantineRefusal(drv, "vol-1", "node-1", tc.node, tc.fr), tc.wantErr)
		})
	}
}

func TestSecondNodeRefusal(t *testing.T) {
	target := va("va1", "pv1", "node-1")
	other := func(mods ...func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		return va("va0", "pv1", "node-0", mods...)
	}
	rwo := []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	tests := []struct {
		name    string
		modes   []v1.PersistentVolumeAccessMode
		vas     []*storagev1.VolumeAttachment
		wantErr string
	}{
		{name: "alone", modes: rwo, vas: []*storagev1.VolumeAttachment{target}},
		{name: "RWO attached elsewhere", modes: rwo, vas: []*storagev1.VolumeAttachment{other(withFinalizer, attached), target}, wantErr: "still attached to node node-0"},
		{name: "RWO attaching elsewhere (finalizer, not attached yet)", modes: rwo, vas: []*storagev1.VolumeAttachment{other(withFinalizer)}, wantErr: "still attached to node node-0"},
		{name: "RWOP detach pending elsewhere", modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, vas: []*storagev1.VolumeAttachment{other(withFinalizer, deleted)}, wantErr: "node-0"},
		{name: "detached elsewhere", modes: rwo, vas: []*storagev1.VolumeAttachment{other(deleted)}},
		{name: "same node (another VA name)", modes: rwo, vas: []*storagev1.VolumeAttachment{va("va0", "pv1", "node-1", withFinalizer)}},
		{name: "another PV", modes: rwo, vas: []*storagev1.VolumeAttachment{va("va0", "pv2", "node-0", withFinalizer)}},
		{name: "another driver", modes: rwo, vas: []*storagev1.VolumeAttachment{other(withFinalizer, func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "x" })}},
		{name: "not for RWX", modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}, vas: []*storagev1.VolumeAttachment{other(withFinalizer, attached)}},
		{name: "not for ROX", modes: []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany}, vas: []*storagev1.VolumeAttachment{other(withFinalizer, attached)}},
		{name: "RWO+ROX is multi-node, as for the attach/detach controller", modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadOnlyMany},
			vas: []*storagev1.VolumeAttachment{other(withFinalizer, attached)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, SecondNodeRefusal(drv, fin, target, tc.modes, tc.vas), tc.wantErr)
		})
	}
}

// checkErr fails unless err is nil when wantErr is empty, or contains it.
func checkErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("refused: %v", err)
	case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
		t.Errorf("err = %v, want %q", err, wantErr)
	}
}

// withdrawn returns a copy of fr that is being deleted.
func withdrawn(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
	out := fr.DeepCopy()
	now := metav1.Now()
	out.DeletionTimestamp = &now
	return out
}

// releasedFR returns a copy of fr released through its spec (kubectl fence
// release).
func releasedFR(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
	out := fr.DeepCopy()
	out.Spec.Released = true
	return out
}

// withEntry returns a copy of fr that records vol.
func withEntry(fr *fencingv1alpha1.FencingRequest, vol fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	out := fr.DeepCopy()
	out.Status.Volumes = append(out.Status.Volumes, vol)
	return out
}
