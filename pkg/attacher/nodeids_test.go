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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// crash is what a reactor panics with to kill the process in the middle of
// a sync: nothing after the API call that crashes runs, nothing of the
// process's memory survives (the test starts a new env over the same API
// and driver).
type crash struct{}

// crashAt makes the process of e die at the first patch of a
// VolumeAttachment that at matches, after the patch reached the API when
// applied, before it did otherwise.
func (e *env) crashAt(at func(clienttesting.PatchAction) bool, applied bool) {
	armed := true
	e.client.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p, ok := a.(clienttesting.PatchAction)
		if !ok || !armed || !at(p) {
			return false, nil, nil
		}
		armed = false
		if applied {
			if _, _, err := clienttesting.ObjectReaction(e.client.Tracker())(a); err != nil {
				e.t.Errorf("applying the patch before the crash: %v", err)
			}
		}
		panic(crash{})
	})
}

// syncFromCache syncs va1 through h as external-attacher's controller does:
// the VolumeAttachment as e's cache holds it. It reports whether the
// process crashed on the way.
func (e *env) syncFromCache(h *Handler) (crashed bool) {
	e.t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crash); !ok {
				panic(r)
			}
			crashed = true
		}
	}()
	va, err := e.factory.Storage().V1().VolumeAttachments().Lister().Get("va1")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	h.SyncNewOrUpdatedVolumeAttachment(ctx, va)
	return false
}

// patches reports whether the patch's body names all of parts.
func patches(parts ...string) func(clienttesting.PatchAction) bool {
	return func(p clienttesting.PatchAction) bool {
		for _, s := range parts {
			if !strings.Contains(string(p.GetPatch()), s) {
				return false
			}
		}
		return true
	}
}

// The patches of va1's node IDs, as they go on the wire: the record of the
// previous ID, external-attacher's write of the new one, the removal of the
// record once the previous ID is unpublished.
var (
	recordsPreviousID = patches(`"` + contract.PreviousNodeIDAnnotation + `":"node-1-old-id"`)
	writesNewID       = patches(`"` + contract.NodeIDAnnotation + `":"node-1-id"`)
	removesPreviousID = patches(`"remove"`, strings.ReplaceAll(contract.PreviousNodeIDAnnotation, "/", "~1"))
)

// S1, write-ahead: the node plugin registered again under another node ID
// (node-1-id) while the volume may still be published under the one on the
// VolumeAttachment (node-1-old-id: a publish that timed out, one the driver
// reported gone). external-attacher writes the new ID over the old one
// right before it publishes: the sidecar killed (-9) anywhere from there to
// the publish must not lose the old ID. The next process, with nothing but
// what the API says, unpublishes the volume from the old ID before it
// publishes it under the new one, and the record of the old ID goes only
// once it is unpublished.
func TestAttachUnpublishesThePreviousNodeIDAfterACrash(t *testing.T) {
	tests := []struct {
		name     string
		crashAt  func(clienttesting.PatchAction) bool
		applied  bool
		wantSent []string
	}{
		{name: "once the previous ID is recorded", crashAt: recordsPreviousID, applied: true,
			wantSent: []string{"unpublish vol-1 node-1-old-id", "publish vol-1 node-1-id"}},
		{name: "once external-attacher wrote the new ID over the previous one", crashAt: writesNewID, applied: true,
			wantSent: []string{"unpublish vol-1 node-1-old-id", "publish vol-1 node-1-id"}},
		{name: "once the previous ID is unpublished, before its record is removed", crashAt: removesPreviousID,
			wantSent: []string{"unpublish vol-1 node-1-old-id", "unpublish vol-1 node-1-old-id", "publish vol-1 node-1-id"}},
		{name: "once the record is removed, before the publish", crashAt: removesPreviousID, applied: true,
			wantSent: []string{"unpublish vol-1 node-1-old-id", "publish vol-1 node-1-id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			crashed := newEnv(t, envConfig{objects: []runtime.Object{node("node-1"), csiNode("node-1"), pv("pv1", "vol-1"),
				va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-old-id"))}})
			crashed.crashAt(tc.crashAt, tc.applied)
			h, _ := crashed.handler()
			if !crashed.syncFromCache(h) {
				t.Fatalf("the sync made no such patch to crash at: the driver received %q", crashed.sentInOrder())
			}

			e := newEnv(t, envConfig{restart: crashed})
			h, queue := e.handler()
			if e.syncFromCache(h) {
				t.Fatal("crashed again")
			}
			if got := e.sentInOrder(); !slices.Equal(got, tc.wantSent) {
				t.Errorf("the driver received %q, want %q", got, tc.wantSent)
			}
			va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !va.Status.Attached || queue.NumRequeues("va1") != 0 {
				t.Errorf("not attached: %+v, requeues %d", va.Status, queue.NumRequeues("va1"))
			}
			if got, ok := va.Annotations[contract.PreviousNodeIDAnnotation]; ok {
				t.Errorf("the previous node ID %q is still recorded once unpublished", got)
			}
			if got := va.Annotations[contract.NodeIDAnnotation]; got != "node-1-id" {
				t.Errorf("node ID annotation %q, want node-1-id", got)
			}
		})
	}
}

// The previous node ID is recorded before external-attacher's sync: when
// that write fails, the sync does not run (external-attacher would write the
// new ID over the only record of the old one), and the VolumeAttachment is
// retried with external-attacher's backoff.
func TestHandlerDoesNotAttachWithoutThePreviousNodeIDRecorded(t *testing.T) {
	e := newEnv(t, envConfig{objects: []runtime.Object{node("node-1"), csiNode("node-1"), pv("pv1", "vol-1"),
		va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-old-id"))}})
	e.client.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if recordsPreviousID(a.(clienttesting.PatchAction)) {
			return true, nil, errors.New("etcd is down")
		}
		return false, nil, nil
	})
	h, queue := e.handler()
	e.syncFromCache(h)
	if got := e.sentInOrder(); len(got) != 0 {
		t.Errorf("the driver received %q, want nothing", got)
	}
	va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := va.Annotations[contract.NodeIDAnnotation]; got != "node-1-old-id" {
		t.Errorf("node ID annotation %q: external-attacher replaced the unrecorded previous ID", got)
	}
	if queue.NumRequeues("va1") != 1 {
		t.Errorf("requeues %d, want 1 (backoff)", queue.NumRequeues("va1"))
	}
}

// S1: a VolumeAttachment deleted while it still records a previous node ID
// (its unpublish failed, or the process crashed before it) may be published
// under both IDs: the detach takes the volume away from both, plainly from
// a healthy node, by fences from a failed one (a plain unpublish is not a
// fence: the node may still be writing through the old ID). The record
// names the ID on the VolumeAttachment, which the node plugin registers
// now, for the node agent's cleanup.
func TestDetachTakesTheVolumeFromThePreviousNodeIDToo(t *testing.T) {
	tests := []struct {
		name       string
		node       *v1.Node
		wantSent   []string
		wantFenced bool
	}{
		{name: "Ready node: plain unpublishes of both IDs", node: node("node-1"),
			wantSent: []string{"unpublish vol-1 node-1-old-id", "unpublish vol-1 node-1-id"}},
		{name: "NotReady node: both IDs fenced, then recorded", node: node("node-1", readyStatus(v1.ConditionFalse)),
			wantSent: []string{"unpublish vol-1 node-1-old-id fence", "unpublish vol-1 node-1-id fence"}, wantFenced: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{objects: []runtime.Object{tc.node, csiNode("node-1"), pv("pv1", "vol-1"),
				detachingVA("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) {
					v.Annotations[contract.PreviousNodeIDAnnotation] = "node-1-old-id"
				})}})
			h, queue := e.handler()
			e.syncFromCache(h)
			if tc.wantFenced {
				if item := next(t, queue, 10*time.Second); item != "va1" {
					t.Fatalf("queued %q once the fence was over, want va1", item)
				}
				e.syncFromCache(h)
			}
			if got := e.sentInOrder(); !slices.Equal(got, tc.wantSent) {
				t.Errorf("the driver received %q, want %q", got, tc.wantSent)
			}
			va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(va.Finalizers, fin) {
				t.Errorf("the detach did not end: finalizers %v, detachError %v", va.Finalizers, va.Status.DetachError)
			}
			entry := fencerecord.Find(e.getFR("node-1"), drv, "vol-1")
			switch {
			case !tc.wantFenced && entry != nil:
				t.Errorf("a plain detach wrote the record: %+v", entry)
			case tc.wantFenced && (entry == nil || entry.FencedTime == nil || entry.NodeID != "node-1-id"):
				t.Errorf("the record says %+v, want node-1-id fenced", entry)
			}
			if !slices.ContainsFunc(e.events(), func(ev string) bool { return strings.HasPrefix(ev, "Warning "+EventReasonNodeIDChanged) }) {
				t.Errorf("no %s event says the volume is taken from the previous node ID", EventReasonNodeIDChanged)
			}
		})
	}
}

// The previous node ID is recorded only on the VolumeAttachment it was read
// from: a cache behind the API must not overwrite the record of another ID.
// Here the cache still shows the VolumeAttachment before its first change
// of node ID (node-1-old-id), while the API shows it after a second one:
// node-1-mid-id, published once node-1-old-id was unpublished, is recorded
// as the previous ID of node-1-id, which external-attacher wrote and the
// process crashed. Recording node-1-old-id over it would lose node-1-mid-id
// (S1). The write is refused as the apiserver refuses a patch whose
// resourceVersion is not the object's, and the sync waits for the cache.
func TestHandlerRecordsThePreviousNodeIDOnlyOnWhatItRead(t *testing.T) {
	stale := va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-old-id"), func(v *storagev1.VolumeAttachment) { v.ResourceVersion = "1" })
	live := va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-id"), func(v *storagev1.VolumeAttachment) {
		v.ResourceVersion = "5"
		v.Annotations[contract.PreviousNodeIDAnnotation] = "node-1-mid-id"
	})
	common := []runtime.Object{node("node-1"), csiNode("node-1"), pv("pv1", "vol-1")}
	e := newEnv(t, envConfig{objects: append(slices.Clone(common), live), cache: append(slices.Clone(common), stale)})
	e.client.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if p.GetPatchType() != types.MergePatchType || json.Unmarshal(p.GetPatch(), &body) != nil || body.Metadata.ResourceVersion == "" {
			return false, nil, nil
		}
		obj, err := e.client.Tracker().Get(p.GetResource(), "", p.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := obj.(*storagev1.VolumeAttachment).ResourceVersion; rv != body.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(p.GetResource().GroupResource(), p.GetName(),
				fmt.Errorf("the object has been modified: resourceVersion %s, patch %s", rv, body.Metadata.ResourceVersion))
		}
		return false, nil, nil
	})
	h, queue := e.handler()
	e.syncFromCache(h)
	got, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := got.Annotations[contract.PreviousNodeIDAnnotation]; id != "node-1-mid-id" {
		t.Errorf("previous node ID %q recorded, want node-1-mid-id kept", id)
	}
	if sent := e.sentInOrder(); len(sent) != 0 {
		t.Errorf("the driver received %q, want nothing", sent)
	}
	if queue.NumRequeues("va1") != 1 {
		t.Errorf("requeues %d, want 1 (backoff)", queue.NumRequeues("va1"))
	}
}
