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
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
)

// Issue 19 hole 8: `kubectl delete node` on a dead node. The attach/detach
// controller would keep the deleted node's volume counted as mounted for 6
// minutes; once the attachment is fenced (recorded first) and no pod on the
// node uses it, its VolumeAttachment is deleted, which the attach/detach
// controller's next sync of its actual state takes as detached. Not while a
// pod still uses it (it would be created again), and nothing at all while
// the node's kubelet still renews its Lease (S4) or while fencing is paused.
func TestDeletedNodeReleasesFencedAttachments(t *testing.T) {
	tests := []struct {
		name         string
		podOnNode    bool
		leaseRenewed bool
		paused       bool
		wantFence    bool
		wantDeleted  bool
	}{
		{name: "no pod left on the node", wantFence: true, wantDeleted: true},
		{name: "a pod still on the node", podOnNode: true, wantFence: true},
		{name: "its kubelet still renews its Lease", leaseRenewed: true},
		// The admin's pause stops every automatic fence, this one too.
		{name: "fencing paused", paused: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			for _, o := range objects(v1.ConditionUnknown, false) {
				if n, ok := o.(*v1.Node); ok && n.Name == "n1" {
					continue // deleted
				}
				if p, ok := o.(*v1.Pod); ok && !tc.podOnNode && p.Spec.NodeName == "n1" {
					continue // garbage-collected as orphaned
				}
				objs = append(objs, o)
			}
			if tc.leaseRenewed {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: nodehealth.LeaseNamespace},
					Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now())), LeaseDurationSeconds: ptr.To[int32](40)}})
			}
			if tc.paused {
				objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: "kube-system",
					Annotations: map[string]string{PausedAnnotation: "storage maintenance"}}})
			}
			e := newEnv(t, objs, true)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if got := e.csi.fenced("h1") == 1; got != tc.wantFence {
				t.Errorf("fenced = %v, want %v (%v)", got, tc.wantFence, e.steps.log)
			}
			if tc.wantFence {
				fr, err := e.fr.Get(context.Background(), "n1")
				if err != nil || !fencerecord.IsFenced(fr, driver, "h1") {
					t.Errorf("the fence of the deleted node's attachment is not recorded: %+v, %v", fr, err)
				}
			}
			_, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Errorf("VolumeAttachment deleted = %v, want %v", deleted, tc.wantDeleted)
			}
		})
	}
}
