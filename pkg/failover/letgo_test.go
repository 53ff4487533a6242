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

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// The fenced attachment of a force-deleted pod is gone as soon as the
// failover deleted it, not once the attacher removed its finalizer:
// the attach/detach controller's detach, which may start at its next
// reconcile after the pod went, then finds nothing to wait for. What the
// attacher must still do itself stays: a finalizer of someone else, a
// previous node ID to unpublish.
func TestFencedAttachmentGoneWithItsPod(t *testing.T) {
	attacher := contract.AttacherFinalizer(driver)
	for _, tc := range []struct {
		name       string
		finalizers []string
		previous   string // the VA's previous node ID annotation
		wantGone   bool
	}{
		{name: "the attacher's finalizer only", finalizers: []string{attacher}, wantGone: true},
		{name: "published under the same node ID before", finalizers: []string{attacher}, previous: "n1-id", wantGone: true},
		{name: "another finalizer too", finalizers: []string{attacher, "example.com/protect"}},
		{name: "a previous node ID to unpublish", finalizers: []string{attacher}, previous: "n1-old-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			for _, o := range objs {
				if va, ok := o.(*storagev1.VolumeAttachment); ok {
					va.UID, va.Finalizers = "va1-uid", tc.finalizers
					if tc.previous != "" {
						va.Annotations[contract.PreviousNodeIDAnnotation] = tc.previous
					}
				}
			}
			e := newEnv(t, objs, true)
			// The apiserver's delete of an object with finalizers: it
			// stays, with its deletion timestamp, until they are gone.
			tracker := e.client.Tracker()
			gvr := storagev1.SchemeGroupVersion.WithResource("volumeattachments")
			e.client.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				o, err := tracker.Get(gvr, "", a.(k8stesting.DeleteAction).GetName())
				if err != nil {
					return true, nil, err
				}
				va := o.(*storagev1.VolumeAttachment).DeepCopy()
				if len(va.Finalizers) == 0 {
					return false, nil, nil
				}
				va.DeletionTimestamp = ptr.To(metav1.Now())
				return true, nil, tracker.Update(gvr, va, "")
			})
			_ = e.sync(t)
			va, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				va, err = nil, nil
			case err == nil && va.DeletionTimestamp == nil:
				t.Fatalf("the fenced attachment was not deleted: %+v", va.ObjectMeta)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Deleted and without a finalizer: what the apiserver
			// removes at once.
			if gone := va == nil || len(va.Finalizers) == 0; gone != tc.wantGone {
				t.Errorf("attachment gone: %v, want %v (%+v)", gone, tc.wantGone, va)
			}
		})
	}
}
