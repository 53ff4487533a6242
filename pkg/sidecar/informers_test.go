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
