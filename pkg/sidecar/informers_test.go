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

package sidecar

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: managed},
		Status: v1.NodeStatus{Images: []v1.ContainerImage{{Names: []string{"busybox"}}}, VolumesInUse: []v1.UniqueVolumeName{"kubernetes.io/csi/d^h"},
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	got, err := trimForCache(node)
	if err != nil {
		t.Fatal(err)
	}
	n := got.(*v1.Node)
	if n.ManagedFields != nil || n.Status.Images != nil {
		t.Errorf("not trimmed: %+v", n)
	}
	if len(n.Status.VolumesInUse) != 1 || len(n.Status.Conditions) != 1 {
		t.Errorf("trimmed what the controllers read: %+v", n.Status)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: managed}, Spec: v1.PodSpec{NodeName: "n1"}}
	if got, _ := trimForCache(pod); got.(*v1.Pod).ManagedFields != nil || got.(*v1.Pod).Spec.NodeName != "n1" {
		t.Errorf("pod: %+v", got)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: node}
	if got, err := trimForCache(tomb); err != nil || got.(cache.DeletedFinalStateUnknown).Key != "n1" {
		t.Errorf("tombstone: %v, %v", got, err)
	}
}

// A pod in the cache keeps everything the failover reads: its metadata,
// node, tolerations, phase, DisruptionTarget condition, and its volumes that
// are not on the node (podgc.Volumes gives the same); its containers, their
// statuses, its node-local volumes and its other conditions go.
func TestTrimPod(t *testing.T) {
	now := metav1.Now()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "db"},
			Annotations: map[string]string{"a": "b"}, DeletionTimestamp: &now, Finalizers: []string{"f"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db"}}},
		Spec: v1.PodSpec{
			NodeName:    "n1",
			Containers:  []v1.Container{{Name: "app", Image: "db", Env: []v1.EnvVar{{Name: "X", Value: "y"}}}},
			Tolerations: []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists}},
			Affinity:    &v1.Affinity{},
			Volumes: []v1.Volume{
				{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
				{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}},
				{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
				{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue},
				{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: podgc.DisruptionReasonTaintManager}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true}}},
	}
	orig := pod.DeepCopy()
	got, err := trimForCache(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*v1.Pod)
	if p.Spec.Containers != nil || p.Status.ContainerStatuses != nil || p.Spec.Affinity != nil {
		t.Errorf("containers, their statuses or the affinity kept: %+v", p)
	}
	if p.Name != orig.Name || p.UID != orig.UID || !equality.Semantic.DeepEqual(p.Labels, orig.Labels) || !equality.Semantic.DeepEqual(p.Annotations, orig.Annotations) ||
		p.DeletionTimestamp == nil || len(p.Finalizers) != 1 || len(p.OwnerReferences) != 1 {
		t.Errorf("metadata changed: %+v", p.ObjectMeta)
	}
	if p.Spec.NodeName != "n1" || !equality.Semantic.DeepEqual(p.Spec.Tolerations, orig.Spec.Tolerations) || p.Status.Phase != v1.PodRunning {
		t.Errorf("node, tolerations or phase changed: %+v %+v", p.Spec, p.Status)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != v1.DisruptionTarget || podgc.TerminationReason(p) != podgc.TerminationReason(orig) {
		t.Errorf("conditions %+v: want the DisruptionTarget one alone, the same termination reason", p.Status.Conditions)
	}
	if names := []string{p.Spec.Volumes[0].Name, p.Spec.Volumes[1].Name}; len(p.Spec.Volumes) != 2 || names[0] != "data" || names[1] != "scratch" {
		t.Errorf("volumes %+v: want the claim and the ephemeral volume alone", p.Spec.Volumes)
	}
	claim := func(name string) (*podgc.Volume, error) { return &podgc.Volume{PVName: name}, nil }
	gotVols, err1 := podgc.Volumes(p, claim)
	wantVols, err2 := podgc.Volumes(orig, claim)
	if err1 != nil || err2 != nil || !equality.Semantic.DeepEqual(gotVols, wantVols) {
		t.Errorf("podgc.Volumes of the trimmed pod: %+v, %v; of the pod: %+v, %v", gotVols, err1, wantVols, err2)
	}
}

// S9 is decided on cached pods: a trimmed pod gives UnattachedStorage the
// same answer as the whole one, and storage no attachment fence covers
// (inline network volumes, a non-CSI PersistentVolume, a CSI one without a
// VolumeAttachment on the node) is still seen once trimmed.
func TestTrimmedPodKeepsUnattachedStorage(t *testing.T) {
	pvs := map[string]*v1.PersistentVolume{
		"csi-attached": {ObjectMeta: metav1.ObjectMeta{Name: "pv-attached"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h1"}}}},
		"csi-no-va":    {ObjectMeta: metav1.ObjectMeta{Name: "pv-no-va"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "nfs.csi.k8s.io", VolumeHandle: "h2"}}}},
		"nfs-pv":       {ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}}},
		"local-pv":     {ObjectMeta: metav1.ObjectMeta{Name: "pv-local"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt"}}}},
	}
	pvOf := func(_, claim string) (*v1.PersistentVolume, error) {
		if pv, ok := pvs[claim]; ok {
			return pv, nil
		}
		return nil, fmt.Errorf("claim %s not found", claim)
	}
	covered := func(pv string) bool { return pv == "pv-attached" }
	nodeLocal := []v1.Volume{
		{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
		{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/var"}}},
	}
	claimVol := func(claim string) v1.Volume {
		return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	for _, tc := range []struct {
		name      string
		vols      []v1.Volume
		uncovered bool
	}{
		{"attached CSI claim and node-local volumes", append([]v1.Volume{claimVol("csi-attached"), claimVol("local-pv")}, nodeLocal...), false},
		{"inline NFS", append([]v1.Volume{claimVol("csi-attached"), {Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/x"}}}}, nodeLocal...), true},
		{"inline CSI", append([]v1.Volume{{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "secrets-store"}}}}, nodeLocal...), true},
		{"inline iSCSI", []v1.Volume{{Name: "lun", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{TargetPortal: "p", IQN: "i"}}}}, true},
		{"claim of a non-CSI PersistentVolume", []v1.Volume{claimVol("nfs-pv")}, true},
		{"claim of a CSI volume without a VolumeAttachment", append([]v1.Volume{claimVol("csi-no-va")}, nodeLocal...), true},
		{"claim not found", []v1.Volume{claimVol("gone")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
				Spec:   v1.PodSpec{NodeName: "n1", Volumes: tc.vols, Containers: []v1.Container{{Name: "c"}}},
				Status: v1.PodStatus{Phase: v1.PodRunning}}
			whole := failover.UnattachedStorage([]*v1.Pod{pod}, pvOf, covered)
			got, err := trimForCache(pod.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			trimmed := failover.UnattachedStorage([]*v1.Pod{got.(*v1.Pod)}, pvOf, covered)
			if trimmed != whole {
				t.Errorf("trimmed pod: %q, whole pod: %q", trimmed, whole)
			}
			if (trimmed != "") != tc.uncovered {
				t.Errorf("UnattachedStorage of the trimmed pod %q, want storage no fence covers: %v", trimmed, tc.uncovered)
			}
		})
	}
}
