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
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	csitrans "k8s.io/csi-translation-lib"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// handler is external-attacher's CSI handler with the fencing Attacher,
// wrapped by Handler, as pkg/sidecar builds it, on e's clients and caches,
// with its queues.
func (e *env) handler() (*Handler, workqueue.TypedRateLimitingInterface[string]) {
	e.t.Helper()
	timeout := 2 * time.Second
	inner := controller.NewCSIHandler(e.client, drv, e.a, nil,
		e.factory.Core().V1().PersistentVolumes().Lister(), e.factory.Storage().V1().CSINodes().Lister(),
		e.factory.Storage().V1().VolumeAttachments().Lister(), &timeout, false, false, csitrans.New(), "")
	h, err := NewHandler(inner, drv, e.factory.Storage().V1().VolumeAttachments().Informer())
	if err != nil {
		e.t.Fatal(err)
	}
	// An hour of backoff: an item that was AddRateLimited stays out of the
	// queue, and NumRequeues tells it from a Forget.
	rl := func() workqueue.TypedRateLimiter[string] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour)
	}
	vaQueue := workqueue.NewTypedRateLimitingQueue(rl())
	pvQueue := workqueue.NewTypedRateLimitingQueue(rl())
	e.t.Cleanup(func() { vaQueue.ShutDown(); pvQueue.ShutDown() })
	h.Init(vaQueue, pvQueue)
	h.Connect(e.a)
	return h, vaQueue
}

// next waits for the next item of queue.
func next(t *testing.T, queue workqueue.TypedRateLimitingInterface[string], timeout time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		item, _ := queue.Get() // ShutDown at cleanup ends it
		queue.Done(item)
		got <- item
	}()
	select {
	case item := <-got:
		return item
	case <-time.After(timeout):
		t.Fatalf("nothing queued after %v", timeout)
		return ""
	}
}

// Through external-attacher's own handler: the sync of a fenced detach hands
// the fence to the fence pool before external-attacher's sync, keeping the
// finalizer, with no write of the VolumeAttachment and no backoff; the end
// of the fence requeues it at once (the backoff here is an hour). A fence
// that failed goes through external-attacher's sync, which keeps the
// finalizer (the volume does not move), saves the error and backs off; a
// fence that succeeded is recorded before the finalizer goes, and the
// VolumeAttachment is written once in all: that removal (issue 22: a fenced
// detach wrote it three times, a detachError saying the fence is under way
// and, after the finalizer, a status patch of an object already gone).
func TestHandlerKeepsTheFinalizerUntilTheFenceIsRecorded(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		t.Run(map[bool]string{true: "refused", false: "fenced"}[refuse], func(t *testing.T) {
			e := newEnv(t, envConfig{objects: objs(node("node-1", readyStatus(v1.ConditionFalse))),
				unpublish: func(context.Context, *csi.ControllerUnpublishVolumeRequest) error {
					if refuse {
						return status.Error(codes.FailedPrecondition, "cannot prove the node stopped")
					}
					return nil
				}})
			recordedAtFinalizerRemoval, vaWrites := false, 0
			e.client.PrependReactor("*", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
				switch a.GetVerb() {
				case "get", "list", "watch":
					return false, nil, nil
				}
				vaWrites++
				if a.GetVerb() == "patch" && a.GetSubresource() == "" {
					recordedAtFinalizerRemoval = fencerecord.IsFenced(e.getFR("node-1"), drv, "vol-1")
				}
				return false, nil, nil
			})
			h, queue := e.handler()
			va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va)
			va, err = e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(va.Finalizers, fin) || vaWrites != 0 || queue.NumRequeues("va1") != 0 {
				t.Fatalf("a fence handed over must keep the finalizer, without a write nor a backoff: finalizers %v, %d writes, requeues %d",
					va.Finalizers, vaWrites, queue.NumRequeues("va1"))
			}
			if item := next(t, queue, 10*time.Second); item != "va1" {
				t.Fatalf("queued %q once the fence was over, want va1", item)
			}
			h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va)

			va, err = e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			gone := apierrors.IsNotFound(err)
			if got := e.sent(); len(got) != 1 {
				t.Errorf("the driver received %q, want one fence", got)
			}
			if refuse {
				if gone || !slices.Contains(va.Finalizers, fin) || va.Status.DetachError == nil || queue.NumRequeues("va1") != 1 {
					t.Errorf("a refused fence must keep the finalizer, save the error and back off: gone %v, detachError %v, requeues %d",
						gone, va.Status.DetachError, queue.NumRequeues("va1"))
				}
				checkEvents(t, e.events(), []string{"Warning FenceFailed"})
				return
			}
			// (The fake clientset does not delete an object whose last
			// finalizer goes, as the apiserver does.)
			if (!gone && slices.Contains(va.Finalizers, fin)) || queue.NumRequeues("va1") != 0 {
				t.Errorf("a recorded fence must end the detach: finalizers %v, requeues %d", va.Finalizers, queue.NumRequeues("va1"))
			}
			if !recordedAtFinalizerRemoval {
				t.Error("the finalizer was removed before the fence was recorded")
			}
			if vaWrites != 1 {
				t.Errorf("the fenced detach wrote its VolumeAttachment %d times, want once (the finalizer)", vaWrites)
			}
			// The Attacher knew the VolumeAttachment it fenced.
			if v := fencerecord.Find(e.getFR("node-1"), drv, "vol-1"); v == nil || v.PersistentVolumeName != "pv1" {
				t.Errorf("the record does not name the PV: %+v", v)
			}
			checkEvents(t, e.events(), []string{"Normal FencedUnpublish"})
		})
	}
}

// A change of a node's health or of its FencingRequest requeues the node's
// VolumeAttachments of this driver; a heartbeat does not. The deletion of an
// attachment requeues the others of its PV that wait to be attached.
func TestHandlerRequeues(t *testing.T) {
	ready, notReady := node("node-1"), node("node-1", readyStatus(v1.ConditionFalse))
	heartbeat := node("node-1")
	heartbeat.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	fr := func(vols ...fencingv1alpha1.FencedVolume) any {
		u, err := fencingv1alpha1.ToUnstructured(fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, vols...))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	otherDriver := va("vb", "pv2", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other" })
	waiting := va("vc", "pv1", "node-2")
	tests := []struct {
		name  string
		event func(h *Handler)
		want  []string
	}{
		{name: "node NotReady", event: func(h *Handler) { h.nodeUpdated(ready, notReady) }, want: []string{"va1"}},
		{name: "node quarantined", event: func(h *Handler) { h.nodeUpdated(ready, node("node-1", quarantineTaint)) }, want: []string{"va1"}},
		{name: "heartbeat", event: func(h *Handler) { h.nodeUpdated(ready, heartbeat) }},
		{name: "node deleted", event: func(h *Handler) { h.nodeAddedOrDeleted(ready) }, want: []string{"va1"}},
		{name: "the kubelet no longer uses a volume of this driver (a detach may wait for it)",
			event: func(h *Handler) { h.nodeUpdated(node("node-1", inUse("vol-1")), ready) }, want: []string{"va1"}},
		{name: "the kubelet no longer uses another driver's volume",
			event: func(h *Handler) { h.nodeUpdated(node("node-1", inUseOf("other", "vol-1")), ready) }},
		{name: "the kubelet uses one more volume", event: func(h *Handler) { h.nodeUpdated(ready, node("node-1", inUse("vol-1"))) }},
		{name: "volume fenced on the node", event: func(h *Handler) { h.fencingRequestUpdated(fr(), fr(fencedEntry("vol-1"))) }, want: []string{"va1"}},
		{name: "volume cleaned on the node", event: func(h *Handler) { h.fencingRequestUpdated(fr(fencedEntry("vol-1")), fr(cleanedEntry("vol-1"))) }, want: []string{"va1"}},
		{name: "request status unchanged for this driver", event: func(h *Handler) {
			h.fencingRequestUpdated(fr(), fr(fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "x", FencedTime: &t0}))
		}},
		{name: "attachment deleted: the waiting one of its PV", event: func(h *Handler) { h.vaDeleted(attachedVA("va1", "pv1", "node-1")) }, want: []string{"vc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{objects: []runtime.Object{ready, csiNode("node-1"), pv("pv1", "vol-1"),
				attachedVA("va1", "pv1", "node-1"), otherDriver, waiting}})
			h, queue := e.handler()
			tc.event(h)
			var got []string
			for queue.Len() > 0 {
				item, _ := queue.Get()
				got = append(got, item)
				queue.Done(item)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("requeued %q, want %q", got, tc.want)
			}
		})
	}
}

// NodeIDs maps a driver's node ID to the one Node whose CSINode registers
// it for that driver.
func TestNodeIDs(t *testing.T) {
	e := newEnv(t, envConfig{objects: []runtime.Object{
		csiNode("node-1"), csiNode("node-2", "other"),
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "dup-a"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: "dup"}}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "dup-b"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: "dup"}}}},
	}})
	for id, want := range map[string]string{"node-1-id": "node-1", "node-2-id": "", "dup": "", "nope": ""} {
		got, ok := e.a.NodeIDs.NodeName(id)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q, %v; want %q", id, got, ok, want)
		}
	}
}

// A VolumeAttachment whose fence is under way is not synced again before
// the fence is over, however often it is requeued (its backoff, an update
// of the object): each sync would only read the node, write the same
// detachError and back off again, and a burst of fences would multiply
// that. The end of the fence syncs it.
func TestHandlerLeavesAFenceUnderWayAlone(t *testing.T) {
	release := make(chan struct{})
	sent := make(chan struct{}, 1)
	e := newEnv(t, envConfig{objects: objs(node("node-1", readyStatus(v1.ConditionFalse))), timeout: time.Minute,
		unpublish: func(ctx context.Context, _ *csi.ControllerUnpublishVolumeRequest) error {
			sent <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	h, queue := e.handler()
	sync := func() {
		va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.client.ClearActions()
		h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va)
	}
	sync()
	if !h.fencing("va1") {
		t.Fatal("the sync did not hand the fence over")
	}
	// The pool reads the node live before it sends the fence; once the
	// driver has the call, every API call left is the second sync's.
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the fence pool did not send the fence")
	}
	sync()
	if got := actions(e.client.Actions()); len(got) != 0 || queue.NumRequeues("va1") != 0 {
		t.Errorf("a sync during the fence made API calls %q and %d requeues, want none", got, queue.NumRequeues("va1"))
	}
	close(release)
	if item := next(t, queue, 10*time.Second); item != "va1" {
		t.Fatalf("queued %q once the fence was over, want va1", item)
	}
	sync()
	va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(va.Finalizers, fin) || !fencerecord.IsFenced(e.getFR("node-1"), drv, "vol-1") {
		t.Errorf("after the fence: finalizers %v, record %+v; want detached and recorded", va.Finalizers, e.getFR("node-1"))
	}
}

// S1: the node plugin re-registered under another node ID (an ID derived
// from an initiator, a VM re-created under the same name). external-attacher
// passes the ID of the CSINode, but the volume was published to the ID on
// the VolumeAttachment: an unpublish, or a fence, of the new ID leaves the
// publication in place (a fence of an ID the volume was never published to
// succeeds, is recorded, and the volume moves while the old initiator keeps
// access). Both go to the published ID, and the record names it.
func TestDetachUsesThePublishedNodeID(t *testing.T) {
	tests := []struct {
		name       string
		node       *v1.Node
		wantSent   []string
		wantFenced bool
	}{
		{name: "Ready node: plain unpublish of the published ID", node: node("node-1"),
			wantSent: []string{"unpublish vol-1 node-1-old-id"}},
		{name: "NotReady node: the fence names the published ID, and so does the record", node: node("node-1", readyStatus(v1.ConditionFalse)),
			wantSent: []string{"unpublish vol-1 node-1-old-id fence"}, wantFenced: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The CSINode says node-1-id now; the volume was published to
			// node-1-old-id.
			e := newEnv(t, envConfig{objects: []runtime.Object{tc.node, csiNode("node-1"), pv("pv1", "vol-1"),
				detachingVA("va1", "pv1", "node-1", withNodeIDAnnotation("node-1-old-id"))}})
			h, queue := e.handler()
			sync := func() {
				va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				h.SyncNewOrUpdatedVolumeAttachment(e.ctx, va)
			}
			sync()
			if tc.wantFenced {
				if item := next(t, queue, 10*time.Second); item != "va1" {
					t.Fatalf("queued %q once the fence was over, want va1", item)
				}
				sync()
			}
			if got := e.sent(); !slices.Equal(got, tc.wantSent) {
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
			case tc.wantFenced && (entry == nil || entry.FencedTime == nil || entry.NodeID != "node-1-old-id"):
				t.Errorf("the record says %+v, want node-1-old-id fenced", entry)
			}
			if !slices.ContainsFunc(e.events(), func(ev string) bool { return strings.HasPrefix(ev, "Warning "+EventReasonNodeIDChanged) }) {
				t.Errorf("no %s event says the node ID changed", EventReasonNodeIDChanged)
			}
		})
	}
}

// Issue 22: the steps of a fenced detach that need nothing of
// external-attacher's sync are taken before it, each with one
// VolumeAttachment write at most: a fence the record shows confirmed ends
// the detach with the finalizer's removal alone. What needs the sync
// (publish secrets, a re-registered node ID, another finalizer, a graceful
// detach) goes through it as before: its first sync of a fence saves the
// detachError and backs off.
func TestDetachAhead(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	fencedFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))
	secretRef := func(p *v1.PersistentVolume) {
		p.Spec.CSI.ControllerPublishSecretRef = &v1.SecretReference{Namespace: "default", Name: "publish"}
	}
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "publish"}, Data: map[string][]byte{"k": []byte("v")}}
	tests := []struct {
		name    string
		objects []runtime.Object
		frs     []*fencingv1alpha1.FencingRequest
		// ahead: taken before the sync; else through it.
		ahead      bool
		wantWrites int      // of the VolumeAttachment
		wantSent   []string // to the driver by the first sync and its fence
		wantGone   bool     // the finalizer removed by the first sync
	}{
		{name: "fenced by the failover: the finalizer goes, one write, no call",
			objects: objs(node("node-1", notReady)), frs: []*fencingv1alpha1.FencingRequest{fencedFR},
			ahead: true, wantWrites: 1, wantGone: true},
		{name: "a fence to send: handed over, no write",
			objects: objs(node("node-1", notReady)),
			ahead:   true, wantSent: []string{"unpublish vol-1 node-1-id fence"}},
		{name: "publish secrets: through the sync",
			objects:    []runtime.Object{csiNode("node-1"), pv("pv1", "vol-1", secretRef), secret, detachingVA("va1", "pv1", "node-1"), node("node-1", notReady)},
			wantWrites: 1, wantSent: []string{"unpublish vol-1 node-1-id fence"}},
		{name: "another finalizer: through the sync",
			objects: []runtime.Object{csiNode("node-1"), pv("pv1", "vol-1"), node("node-1", notReady),
				detachingVA("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Finalizers = append(v.Finalizers, "example.com/keep") })},
			wantWrites: 1, wantSent: []string{"unpublish vol-1 node-1-id fence"}},
		{name: "published under another node ID than the CSINode's: through the sync",
			objects:    []runtime.Object{csiNode("node-1"), pv("pv1", "vol-1"), node("node-1", notReady), detachingVA("va1", "pv1", "node-1", withNodeIDAnnotation("old-id"))},
			wantWrites: 1, wantSent: []string{"unpublish vol-1 old-id fence"}},
		{name: "graceful (Ready node): through the sync, plain",
			objects:    objs(node("node-1")),
			wantWrites: 2, wantSent: []string{"unpublish vol-1 node-1-id"}, wantGone: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{objects: tc.objects, frs: tc.frs})
			writes := 0
			e.client.PrependReactor("*", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
					writes++
				}
				return false, nil, nil
			})
			h, queue := e.handler()
			before, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			h.SyncNewOrUpdatedVolumeAttachment(e.ctx, before)
			fencing := h.fencing("va1")
			if fencing {
				next(t, queue, 10*time.Second) // the end of the fence requeues it
			}
			after, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if gone := !slices.Contains(after.Finalizers, fin); gone != tc.wantGone || writes != tc.wantWrites {
				t.Errorf("finalizer removed %v, %d VolumeAttachment writes; want %v and %d", gone, writes, tc.wantGone, tc.wantWrites)
			}
			if got := e.sent(); !slices.Equal(got, tc.wantSent) {
				t.Errorf("the driver received %q, want %q", got, tc.wantSent)
			}
			// Through the sync, a fence handed over is a detachError and a
			// backoff; before it, neither.
			throughSync := after.Status.DetachError != nil || queue.NumRequeues("va1") != 0
			if fencing && throughSync == tc.ahead {
				t.Errorf("taken before the sync: %v, want %v (detachError %v, requeues %d)", !throughSync, tc.ahead, after.Status.DetachError, queue.NumRequeues("va1"))
			}
		})
	}
}

// kill -9 between detachAhead's live reads and its one write: the finalizer
// patch of a detach whose fence the record shows confirmed, crashed before
// it reached the API or right after. The next process, with nothing but
// what the API says, finishes the detach without a call to the driver (the
// fence is recorded, S8), and the finalizer goes exactly once.
func TestDetachAheadKilledAtTheFinalizer(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	fencedFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))
	removesFinalizer := patches(`"remove"`, `"/metadata/finalizers"`)
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("patch applied %v", applied), func(t *testing.T) {
			crashed := newEnv(t, envConfig{objects: objs(node("node-1", notReady)), frs: []*fencingv1alpha1.FencingRequest{fencedFR}})
			crashed.crashAt(removesFinalizer, applied)
			h, _ := crashed.handler()
			if !crashed.syncFromCache(h) {
				t.Fatalf("the sync made no finalizer patch to crash at: the driver received %q", crashed.sentInOrder())
			}

			e := newEnv(t, envConfig{restart: crashed})
			removals := 0
			e.client.PrependReactor("patch", "volumeattachments", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if removesFinalizer(a.(clienttesting.PatchAction)) {
					removals++
				}
				return false, nil, nil
			})
			h, _ = e.handler()
			if e.syncFromCache(h) {
				t.Fatal("crashed again")
			}
			va, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(va.Finalizers, fin) {
				t.Errorf("the finalizer is still there after the restart: %v", va.Finalizers)
			}
			if want := map[bool]int{false: 1, true: 0}[applied]; removals != want {
				t.Errorf("the restarted process removed the finalizer %d times, want %d", removals, want)
			}
			if got := e.sentInOrder(); len(got) != 0 {
				t.Errorf("the driver received %q, want nothing: the fence is recorded", got)
			}
		})
	}
}
