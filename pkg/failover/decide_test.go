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
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

const driver = "fence.csi-fence.io"

func fr(vols ...fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{Volumes: vols}}
}

func TestStormGuard(t *testing.T) {
	tests := []struct {
		name                         string
		quarantined, total, max, pct int
		already, want                bool
	}{
		{"first of ten, 50%", 0, 10, 0, 50, false, true},
		{"sixth of ten, 50%", 5, 10, 0, 50, false, false},
		{"absolute limit reached", 2, 100, 2, 0, false, false},
		{"below absolute limit", 1, 100, 2, 0, false, true},
		{"continuing a node already fenced", 5, 10, 1, 10, true, true},
		{"no limits", 99, 100, 0, 0, false, true},
		{"half of two nodes", 0, 2, 0, 50, false, true},
		{"all of one node", 0, 1, 0, 50, false, false},
	}
	for _, tc := range tests {
		got, why := StormGuard(tc.quarantined, tc.total, tc.max, tc.pct, tc.already)
		if got != tc.want {
			t.Errorf("%s: StormGuard = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

func TestRelease(t *testing.T) {
	now := metav1.Now()
	pvName := "pv1"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va1"}, Spec: storagev1.VolumeAttachmentSpec{Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}}
	handle := func(string) (string, string) { return driver, "h1" }
	withdrawn := func(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
		fr.DeletionTimestamp = &now
		return fr
	}
	released := func(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
		fr.Spec.Released = true
		return fr
	}
	automatic := func(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
		fr.Spec.Origin = fencingv1alpha1.OriginAutomatic
		return fr
	}
	attached := va.DeepCopy()
	attached.Status.Attached = true
	deleting := va.DeepCopy()
	deleting.DeletionTimestamp = &now
	cleaned := func() *fencingv1alpha1.FencingRequest {
		return fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now})
	}
	tests := []struct {
		name        string
		fr          *fencingv1alpha1.FencingRequest
		quarantined bool
		vas         []*storagev1.VolumeAttachment
		want        bool
		wanted      bool // a pod on the node wants the VA's volume
	}{
		{"nothing fenced", nil, false, nil, true, false},
		{"quarantined with no record: never means nothing to clean", nil, true, nil, false, false},
		{"fence intended, outcome unknown (S8)", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", StartedTime: &now}), true, nil, false, false},
		{"fence refused: may still have been applied", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", StartedTime: &now, FenceError: "refused"}), true, nil, false, false},
		{"fenced, not cleaned: never by time", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now}), true, nil, false, false},
		{"cleanup failed", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanupError: "plugin down"}), true, nil, false, false},
		{"cleaned", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), true, nil, true, false},
		{"cleaned but its VA is still on the node", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), true, []*storagev1.VolumeAttachment{va}, false, false},
		{"withdrawn, cleaned, its VA still there (a manual request on a live node)",
			withdrawn(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now})), true, []*storagev1.VolumeAttachment{va}, true, false},
		{"automatic record deleted, cleaned, its VA still there: nobody withdrew the fence",
			automatic(withdrawn(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}))), true, []*storagev1.VolumeAttachment{attached}, false, false},
		{"automatic record released through its spec by an admin, cleaned, its VA still there",
			automatic(released(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}))), true, []*storagev1.VolumeAttachment{attached}, true, false},
		{"withdrawn, not cleaned: deleting a record never skips the cleanup",
			withdrawn(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now})), true, nil, false, false},
		{"released through its spec, cleaned, its VA still there (kubectl fence release)",
			released(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now})), true, []*storagev1.VolumeAttachment{va}, true, false},
		{"released through its spec, not cleaned: releasing never skips the cleanup",
			released(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now})), true, nil, false, false},
		{"cleaned, a new attachment (not attached) for a pod now on the node", cleaned(), true, []*storagev1.VolumeAttachment{va}, true, true},
		{"cleaned, the fenced attachment still attached, a pod on the node wants it", cleaned(), true, []*storagev1.VolumeAttachment{attached}, false, true},
		{"cleaned, an attachment being deleted, a pod on the node wants it", cleaned(), true, []*storagev1.VolumeAttachment{deleting}, false, true},
	}
	for _, tc := range tests {
		got, why := Release(tc.fr, tc.quarantined, tc.vas, handle, func(*storagev1.VolumeAttachment) bool { return tc.wanted })
		if got != tc.want {
			t.Errorf("%s: Release = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

func pvcVol(claim string) v1.Volume {
	return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestMaintenance(t *testing.T) {
	for _, tc := range []struct {
		name string
		node v1.Node
		want bool
	}{
		{name: "in service"},
		{name: "drain in progress", want: true, node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "DrainInProgress", Status: v1.ConditionTrue}}}}},
		{name: "maintenance over", node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "MaintenanceInProgress", Status: v1.ConditionFalse}}}}},
		{name: "graceful shutdown", want: true, node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "GracefulNodeShutdownInProgress", Status: v1.ConditionTrue}}}}},
		{name: "cordoned", want: true, node: v1.Node{Spec: v1.NodeSpec{Unschedulable: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Maintenance(&tc.node) != ""; got != tc.want {
				t.Errorf("Maintenance = %q, want in maintenance: %v", Maintenance(&tc.node), tc.want)
			}
		})
	}
}

func TestUnattachedStorage(t *testing.T) {
	pv := func(name string, src v1.PersistentVolumeSource) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: src}}
	}
	pvs := map[string]*v1.PersistentVolume{
		"csi":   pv("pv-csi", v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}),
		"local": pv("pv-local", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt"}}),
		"nfs":   pv("pv-nfs", v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}),
	}
	pvOf := func(_, claim string) (*v1.PersistentVolume, error) {
		if p, ok := pvs[claim]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("claim %s not found", claim)
	}
	claim := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}
	pod := func(phase v1.PodPhase, vols ...v1.Volume) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{Volumes: vols}, Status: v1.PodStatus{Phase: phase}}
	}
	emptyDir := v1.Volume{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	inlineCSI := v1.Volume{Name: "ic", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}}
	tests := []struct {
		name     string
		pod      *v1.Pod
		attached bool
		want     string // "" or a word the reason must hold
	}{
		{"node-local only", pod(v1.PodRunning, emptyDir), false, ""},
		{"attached CSI volume", pod(v1.PodRunning, claim("csi")), true, ""},
		{"local PersistentVolume", pod(v1.PodRunning, claim("local")), false, ""},
		{"CSI volume without attachment", pod(v1.PodRunning, claim("csi")), false, "no VolumeAttachment"},
		{"NFS PersistentVolume", pod(v1.PodRunning, claim("nfs")), true, "not a CSI volume"},
		{"inline CSI volume", pod(v1.PodRunning, inlineCSI), true, "inline volume ic"},
		{"claim that cannot be resolved", pod(v1.PodRunning, claim("gone")), true, "not found"},
		{"a finished pod's storage", pod(v1.PodSucceeded, inlineCSI), false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := UnattachedStorage([]*v1.Pod{tc.pod}, pvOf, func(string) bool { return tc.attached })
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("UnattachedStorage = %q, want %q", got, tc.want)
			}
		})
	}
}
