package sidecar

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

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
// node, tolerations, status, and for each volume its claim, or its inline
// source, or that it lives on the node (podgc.NodeLocal); its containers
// and their statuses go.
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
				{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
				{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d.csi"}}},
				{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
				{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
			},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue}},
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
	if p.Spec.NodeName != "n1" || !equality.Semantic.DeepEqual(p.Spec.Tolerations, orig.Spec.Tolerations) ||
		p.Status.Phase != v1.PodRunning || !equality.Semantic.DeepEqual(p.Status.Conditions, orig.Status.Conditions) {
		t.Errorf("node, tolerations or status changed: %+v %+v", p.Spec, p.Status)
	}
	if len(p.Spec.Volumes) != len(orig.Spec.Volumes) {
		t.Fatalf("%d volumes, want %d", len(p.Spec.Volumes), len(orig.Spec.Volumes))
	}
	for i, v := range p.Spec.Volumes {
		o := orig.Spec.Volumes[i]
		gotClaim, gotOK := podgc.ClaimName(p, v)
		wantClaim, wantOK := podgc.ClaimName(orig, o)
		if v.Name != o.Name || podgc.NodeLocal(v) != podgc.NodeLocal(o) || gotClaim != wantClaim || gotOK != wantOK {
			t.Errorf("volume %s: trimmed to %+v, which the failover reads differently", o.Name, v.VolumeSource)
		}
		if !podgc.NodeLocal(o) && !equality.Semantic.DeepEqual(v, o) {
			t.Errorf("volume %s, not on the node: %+v, want it whole", o.Name, v)
		}
	}
	if p.Spec.Volumes[3].Projected == nil || len(p.Spec.Volumes[3].Projected.Sources) != 0 {
		t.Errorf("projected volume: %+v, want its kind without its sources", p.Spec.Volumes[3].Projected)
	}
}
