package sidecar

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
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
