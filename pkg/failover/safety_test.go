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

// Tests that try to break the failover's safety invariants (DESIGN.md
// section 6): a crash between the fence and its record, a timed-out fence,
// two drivers on one node, a deleted record or Node, a node that comes back
// during a slow fence, two nodes failing at once under more than one worker.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// notCleaned reports whether the record holds an entry for h1 of our driver
// that the node agent has not cleaned: the volume may be quarantined there.
func notCleaned(fr *fencingv1alpha1.FencingRequest, handle string) bool {
	e := fencerecord.Find(fr, driver, handle)
	return e != nil && e.CleanedTime == nil
}

func (e *env) record(t *testing.T) *fencingv1alpha1.FencingRequest {
	t.Helper()
	fr, err := e.fr.Get(context.Background(), "n1")
	if err != nil {
		t.Fatalf("FencingRequest n1: %v", err)
	}
	return fr
}

func (e *env) node(t *testing.T, name string) *v1.Node {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// attachmentReleased checks that the failover deleted the fenced attachment
// name once its pod was force-deleted (releaseFencedAttachments), as the
// attach/detach controller would have later: the fake clientset has no
// attacher, the delete removes it at once.
func (e *env) attachmentReleased(t *testing.T, name string) {
	t.Helper()
	if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the fenced attachment %s of the force-deleted pod was not deleted: %v (steps %v)", name, err, e.steps.log)
	}
}

// setReady writes the node's Ready condition through the API.
func (e *env) setReady(t *testing.T, name string, s v1.ConditionStatus) {
	t.Helper()
	n := e.node(t, name)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status = s
		}
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// restart builds a new controller on the API state, as a restarted process
// would, and waits until its caches hold the node's current version.
func (e *env) restart(t *testing.T) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e.c = e.start(ctx, t, true)
}

// S8, hole 1: the process dies after the driver applied the fence and before
// anything after the RPC reached the API. The record must already say that
// the volume may be quarantined on the node, so that the node coming back is
// neither released nor published to until its agent cleaned the volume.
func TestCrashBetweenFenceAndRecordLosesNothing(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	e.csi.hook = func() {
		// The fence is applied in the driver; from now on this process
		// writes nothing (kill -9).
		e.dyn.PrependReactor("*", "fencingrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
				return false, nil, nil
			}
			return true, nil, errors.New("process killed")
		})
		e.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
				return false, nil, nil
			}
			return true, nil, errors.New("process killed")
		})
	}
	_ = e.sync(t)
	if e.csi.fenced("h1") != 1 {
		t.Fatalf("want one fence, got %v", e.steps.log)
	}
	if fr := e.record(t); !notCleaned(fr, "h1") {
		t.Fatalf("the fence applied before the crash is not in the record: %+v", fr.Status)
	}

	// The process restarts; the node comes back before anything else.
	e.dyn.ReactionChain = e.dyn.ReactionChain[1:]
	e.client.ReactionChain = e.client.ReactionChain[1:]
	e.setReady(t, "n1", v1.ConditionTrue)
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Logf("sync: %v", err)
	}
	if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
		t.Errorf("quarantine lifted although the volume fenced before the crash is not cleaned")
	}
}

// S8: a fence that timed out may have been applied by the driver: it is never
// forgotten, and the volume counts as quarantined on the node until cleaned.
func TestTimedOutFenceStaysRecorded(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	e.csi.err = status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	if err := e.sync(t); err == nil {
		t.Fatal("sync succeeded although the fence timed out")
	}
	fr := e.record(t)
	if !notCleaned(fr, "h1") || !fencerecord.MayBeQuarantined(fr, driver, "h1") {
		t.Fatalf("timed-out fence not kept as a possible quarantine: %+v", fr.Status.Volumes)
	}
	if e.steps.index("delete db-0") >= 0 {
		t.Fatalf("pod deleted on an unconfirmed fence: %v", e.steps.log)
	}
}

// twoDrivers adds a second driver's volume on n1, used by a second
// Terminating pod; that driver's sidecar never fences it.
// otherDriver is the second driver on node n1 in the two-driver tests.
const otherDriver = "other.csi-fence.io"

func twoDrivers(objs []runtime.Object) []runtime.Object {
	const other = otherDriver
	csiDriver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: other, Annotations: map[string]string{contract.SafeDetachAnnotation: "true"}}}
	web := volumeUser{node: "n1", driver: other, pod: "web-0", uid: "u2", claim: "data2", pv: "pv2", handle: "h2", va: "va2", nodeID: "n1-other", terminating: true}
	return append(append(objs, csiDriver), web.objects()...)
}

// S9, hole 2: one driver's fence is not the node's. FencingComplete must not
// be set while another driver's attachment on the node is not fenced, and no
// pod of that driver may be force-deleted, by this controller or a later one.
func TestFencingCompleteMeansWholeNode(t *testing.T) {
	e := newEnv(t, twoDrivers(objects(v1.ConditionUnknown, true)), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("delete db-0") < 0 {
		t.Fatalf("the pod of the fenced volume did not fail over: %v", e.steps.log)
	}
	if nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete=True although VolumeAttachment va2 of another driver is not fenced")
	}
	if fr := e.record(t); fr.Status.Phase == fencingv1alpha1.PhaseFenced {
		t.Errorf("FencingRequest phase Fenced although va2 is not fenced")
	}
	e.restart(t)
	_ = e.sync(t)
	if e.steps.index("delete web-0") >= 0 {
		t.Errorf("pod web-0 force-deleted although its volume was never fenced: %v", e.steps.log)
	}
	// The other driver's sidecar fences its own attachment: now, and only
	// now, the whole node is fenced, and its pod goes too.
	_, ctx := ktesting.NewTestContext(t)
	other := e.start(ctx, t, true, func(o *Options) { o.DriverName = "other.csi-fence.io" })
	if err := other.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if e.csi.fenced("h2") != 1 || e.steps.index("delete web-0") < 0 {
		t.Errorf("the other driver did not fail its pod over: %v", e.steps.log)
	}
	if !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete not set with every attachment of every driver fenced")
	}
	if fr := e.record(t); fr.Status.Phase != fencingv1alpha1.PhaseFenced || fr.Status.ErrorMessage != "" {
		t.Errorf("record phase %s, error %q; want Fenced, none", fr.Status.Phase, fr.Status.ErrorMessage)
	}
}

// notOwner is a controller that does not own node-level state.
type notOwner struct{}

func (notOwner) IsOwner() bool { return false }

// clientOn returns a client of its own (its own recorded actions) on the
// API state of c.
func clientOn(c *fake.Clientset) *fake.Clientset {
	b := &fake.Clientset{}
	b.AddReactor("*", "*", k8stesting.ObjectReaction(c.Tracker()))
	b.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		return err == nil, w, err
	})
	return b
}

// writes lists the write requests a client sent.
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return out
}

// S9, hole 2: node-level state has one owner in the cluster whatever the
// number of drivers. Another driver's controller writes no taint, condition,
// admission or pod deletion; it fences its own attachments only once the
// owner has quarantined the node, and records them per driver; the owner
// fails over the pod of that driver once its volume is recorded fenced.
func TestOneOwnerOfNodeLevelState(t *testing.T) {
	e := newEnv(t, twoDrivers(objects(v1.ConditionUnknown, true)), true)
	_, ctx := ktesting.NewTestContext(t)
	b := clientOn(e.client)
	other := e.startOn(ctx, t, b, true, func(o *Options) { o.DriverName = otherDriver })
	other.owner = notOwner{}
	if err := other.registry.register(ctx, registration{driver: otherDriver, identity: "other-0", canFence: true}); err != nil {
		t.Fatal(err)
	}
	// Its next renewal: the owner counts a registration it saw renewed.
	writeRegistration(ctx, t, b, registration{driver: otherDriver, identity: "other-0", canFence: true}, time.Now().Add(registrationRenewal))
	b.ClearActions()
	if err := waitUntil(ctx, func() bool { return e.c.registry.canFence(otherDriver) }); err != nil {
		t.Fatalf("the owner never saw the other driver's registration: %v", err)
	}

	// Before the owner quarantined the node, the other driver does nothing.
	if err := other.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if w := writes(b); len(w) > 0 || e.csi.fenced("h2") > 0 {
		t.Fatalf("a controller that does not own the node wrote %v and fenced h2 %d times before any quarantine", w, e.csi.fenced("h2"))
	}
	// The owner quarantines, fences its own volume and fails its pod over;
	// the other driver's pod waits for its fence.
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("quarantine") < 0 || e.steps.index("delete db-0") < 0 || e.steps.index("delete web-0") >= 0 {
		t.Fatalf("owner's steps: %v", e.steps.log)
	}
	if nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Fatal("FencingComplete=True before the other driver fenced")
	}
	if err := waitUntil(ctx, func() bool {
		n, err := other.nodes.Get("n1")
		return err == nil && nodestate.Taint(n, contract.QuarantineTaintKey) != nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if w := writes(b); len(w) > 0 {
		t.Errorf("a controller that does not own the node wrote %v", w)
	}
	if e.csi.fenced("h2") != 1 || !fencerecord.IsFenced(e.record(t), otherDriver, "h2") {
		t.Fatalf("the other driver did not fence and record its attachment once the node was quarantined: fenced %d, record %+v", e.csi.fenced("h2"), e.record(t).Status.Volumes)
	}
	if e.steps.index("delete web-0") >= 0 {
		t.Fatalf("a controller that does not own the node deleted a pod: %v", e.steps.log)
	}
	// The owner: the whole node is fenced now.
	if err := waitUntil(ctx, func() bool {
		fr, err := e.c.frs.Get("n1")
		return err == nil && fencerecord.IsFenced(fr, otherDriver, "h2")
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("delete web-0") < 0 || !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Errorf("the owner did not fail the other driver's pod over with every attachment fenced: %v", e.steps.log)
	}
}

// The owner fails over a pod of another driver's volume only if that driver
// registered that it can fence: a driver without this sidecar, or one that
// cannot fence, never gets its node quarantined or its pods deleted for it.
// Whether the registration is renewed is judged on the owner's own clock:
// a registration written on a machine whose clock is an hour off is as good
// as any while the owner sees it renewed; one the owner has not seen
// renewed, or has seen unchanged for registrationTTL, is not trusted
// whatever time it carries.
func TestOwnerTrustsOnlyRegisteredFencing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		register bool
		canFence bool
		renewed  bool          // renewed once while the owner watched
		stale    bool          // then left unchanged for longer than registrationTTL
		skew     time.Duration // the registering machine's clock minus the owner's
		// quarantine: the owner counts the driver as able to fence.
		quarantine bool
	}{
		{name: "not registered"},
		{name: "registered without UNPUBLISH_FENCE", register: true, renewed: true},
		{name: "registered with UNPUBLISH_FENCE", register: true, canFence: true, renewed: true, quarantine: true},
		{name: "registered with UNPUBLISH_FENCE, not seen renewed yet", register: true, canFence: true},
		{name: "registered with UNPUBLISH_FENCE, not renewed since", register: true, canFence: true, renewed: true, stale: true},
		{name: "registered by a machine an hour behind", register: true, canFence: true, renewed: true, skew: -time.Hour, quarantine: true},
		{name: "registered by a machine an hour ahead, not renewed since", register: true, canFence: true, renewed: true, skew: time.Hour, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the other driver's pod web-0 is Terminating.
			e := newEnv(t, twoDrivers(objects(v1.ConditionUnknown, false)), true)
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			clk := testingclock.NewFakeClock(time.Now())
			e.c = e.start(ctx, t, true, func(o *Options) { o.Clock = clk })
			if tc.register {
				// Written on the registering machine's clock, renewed
				// registrationRenewal later by that clock.
				g := registration{driver: otherDriver, identity: "other-0", canFence: tc.canFence}
				written := time.Now().Add(tc.skew)
				writeRegistration(ctx, t, e.client, g, written)
				waitObserved(ctx, t, e.c.registry, otherDriver, written)
				if tc.renewed {
					written = written.Add(registrationRenewal)
					writeRegistration(ctx, t, e.client, g, written)
					waitObserved(ctx, t, e.c.registry, otherDriver, written)
				}
				if tc.stale {
					clk.Step(registrationTTL + time.Minute)
				}
			}
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if got := e.steps.index("quarantine") >= 0; got != tc.quarantine {
				t.Errorf("quarantined: %v, want %v (steps %v)", got, tc.quarantine, e.steps.log)
			}
			if e.steps.index("delete web-0") >= 0 || e.csi.fenced("h1") > 0 {
				t.Errorf("the owner deleted the pod or fenced a volume of a pod that stays: %v", e.steps.log)
			}
		})
	}
}

// S9: one driver's success does not overwrite another driver's error on the
// shared record.
func TestOtherDriversErrorIsKept(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	e := newEnv(t, objs, true)
	ctx := context.Background()
	if err := fencerecord.RecordFenceError(ctx, e.fr, "n1", "NodeUnreachable", fencingv1alpha1.FencedVolume{Driver: "other.csi-fence.io", VolumeHandle: "h9"}, "refused"); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	fr := e.record(t)
	if fr.Status.ErrorMessage == "" || fr.Status.Phase == fencingv1alpha1.PhaseFenced {
		t.Errorf("other driver's error overwritten: phase %s, error %q", fr.Status.Phase, fr.Status.ErrorMessage)
	}
}

// S6, hole 3: deleting the Node of a fenced node, or its record, never
// skips the cleanup: the record outlives both until every entry is cleaned.
func TestRecordOutlivesNodeAndDeletion(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	fr := e.record(t)
	if len(fr.Finalizers) == 0 {
		t.Fatalf("a record with uncleaned entries has no finalizer: %+v", fr.ObjectMeta)
	}
	if err := e.client.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if fr, err := e.fr.Get(context.Background(), "n1"); err != nil || !notCleaned(fr, "h1") {
		t.Fatalf("record of a deleted node dropped before cleanup: %v", err)
	}
}

// S6: a quarantine taint with no record never means "nothing to clean".
func TestQuarantineWithoutRecordIsKept(t *testing.T) {
	objs := objects(v1.ConditionTrue, false)
	objs[0].(*v1.Node).Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
	e := newEnv(t, objs, true)
	_ = e.sync(t)
	if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
		t.Fatal("quarantine lifted with no record of what was fenced")
	}
}

// S3/S4, hole 4: storage is fenced but no pod is force-deleted when the node
// is Ready by a live read at the moment of deletion: a node that comes back
// while its fence is in flight (the force-delete reads it live, not from the
// sync's snapshot), or a Ready node fenced on an admin's manual request
// (even its Terminating pods are left to their kubelet).
func TestFencedButNoPodDeletedOnReadyNode(t *testing.T) {
	tests := []struct {
		name  string
		ready v1.ConditionStatus
		setup func(t *testing.T, e *env)
		// noSignals: no Node Fencing condition may be set (a node fenced
		// by an admin's request may be marked FencingComplete).
		noSignals bool
	}{
		{"node back during the fence", v1.ConditionUnknown, func(t *testing.T, e *env) {
			e.c.liveReadValidity = 0 // every fence is "slow"
			e.csi.hook = func() { e.setReady(t, "n1", v1.ConditionTrue) }
		}, true},
		{"manual request on a Ready node", v1.ConditionTrue, func(t *testing.T, e *env) {
			if _, err := e.fr.Create(context.Background(), &fencingv1alpha1.FencingRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginManual},
			}); err != nil {
				t.Fatal(err)
			}
			e.restart(t)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, objects(tc.ready, true), true)
			tc.setup(t, e)
			_ = e.sync(t)
			if e.csi.fenced("h1") != 1 {
				t.Fatalf("not fenced: %v", e.steps.log)
			}
			if e.steps.index("delete db-0") >= 0 {
				t.Fatalf("pod force-deleted on a Ready node: %v", e.steps.log)
			}
			n := e.node(t, "n1")
			if tc.noSignals && (nodestate.ConditionTrue(n, contract.ConditionFencingRequired) || nodestate.ConditionTrue(n, contract.ConditionFencingComplete)) {
				t.Errorf("fencing signalled on a node that came back during the fence: %+v", n.Status.Conditions)
			}
		})
	}
}

// Hole 10: every step is derived from the API state. After a restart that
// follows the force-delete, the pod is gone, but the fenced volume must still
// be released from the dead node's volumesInUse.
func TestReleaseVolumesInUseAfterRestart(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	// First incarnation dies right after the force-delete.
	e.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), "volumesInUse") {
			return true, nil, errors.New("process killed")
		}
		return false, nil, nil
	})
	_ = e.sync(t)
	if e.steps.index("delete db-0") < 0 {
		t.Fatalf("no force-delete: %v", e.steps.log)
	}
	e.client.ReactionChain = e.client.ReactionChain[1:]
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if n := e.node(t, "n1"); len(n.Status.VolumesInUse) != 0 {
		t.Fatalf("fenced volume still in use on the dead node after a restart: %v", n.Status.VolumesInUse)
	}
}

// rejectStalePatches makes the fake apiserver enforce what the real one does
// with a resourceVersion in a patch: a patch of a node written since fails
// with a conflict.
func rejectStalePatches(c *fake.Clientset) {
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil || p.Metadata.ResourceVersion == "" {
			return false, nil, err
		}
		cur, err := c.Tracker().Get(a.GetResource(), "", a.(k8stesting.PatchAction).GetName())
		if err != nil {
			return true, nil, err
		}
		if cur.(*v1.Node).ResourceVersion != p.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), a.(k8stesting.PatchAction).GetName(), errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
}

// A node's lists that have no merge key (taints, volumesInUse) are written
// by patches that carry the resourceVersion they were computed from: a
// decision taken on a cached copy (release a dead node's volumesInUse) must
// not be applied to a node that changed since (its kubelet is back and owns
// the list again).
func TestNodePatchesAreConditional(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	// The controller's cache holds n1 dead with the fenced h1 in use; the
	// node has been written since: its kubelet is back, Ready, and reports
	// h1 in use again.
	n := e.node(t, "n1")
	n.Status.VolumesInUse = []v1.UniqueVolumeName{"kubernetes.io/csi/" + driver + "^h1"}
	n.ResourceVersion = "100"
	stale := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)
	if err := stale.Add(n.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	e.c.nodes = corelisters.NewNodeLister(stale)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status = v1.ConditionTrue
		}
	}
	n.ResourceVersion = "101"
	if err := e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	rejectStalePatches(e.client)
	_, ctx := ktesting.NewTestContext(t)
	if err := e.c.releaseVolumesInUse(ctx, "n1", e.record(t)); err != nil {
		t.Fatal(err)
	}
	if got := e.node(t, "n1").Status.VolumesInUse; len(got) != 1 {
		t.Errorf("volumesInUse of a node whose kubelet is back rewritten from a stale copy: %v", got)
	}
}

// failing makes the named nodes of objs NotReady, each with a Terminating
// pod using a volume of ours attached there.
func failing(objs []runtime.Object, names ...string) []runtime.Object {
	for _, name := range names {
		for _, o := range objs {
			if n, ok := o.(*v1.Node); ok && n.Name == name {
				n.Status.Conditions[0].Status = v1.ConditionUnknown
			}
		}
		db := volumeUser{node: name, driver: driver, pod: "db-" + name, uid: "u-" + name, claim: "data-" + name, pv: "pv-" + name, handle: "h-" + name, va: "va-" + name, terminating: true}
		objs = append(objs, db.objects()...)
	}
	return objs
}

// Hole 5 (S5): two nodes failing in the same second under
// --max-fenced-nodes=1, synced by two replicas (or drivers) whose caches do
// not show each other's quarantine: only one is fenced.
func TestStormGuardAdmitsThroughTheAPI(t *testing.T) {
	e := newEnv(t, failing(objects(v1.ConditionUnknown, true), "n2"), true)
	// From now on no watch delivers anything: every cache stays as it is.
	e.client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	_, ctx := ktesting.NewTestContext(t)
	limit := func(o *Options) { o.MaxFencedNodes, o.MaxFencedNodePercent = 1, 0 }
	c1 := e.start(ctx, t, true, limit)
	c2 := e.start(ctx, t, true, limit)
	_ = c1.sync(ctx, "n1")
	_ = c2.sync(ctx, "n2")
	quarantined := 0
	for _, n := range []string{"n1", "n2"} {
		if nodestate.Taint(e.node(t, n), contract.QuarantineTaintKey) != nil {
			quarantined++
		}
	}
	if quarantined != 1 {
		t.Fatalf("%d nodes quarantined under --max-fenced-nodes=1", quarantined)
	}
}

// Hole 7: two nodes failing at once, synced by two workers (go test -race
// finds a shared map written without a lock).
func TestTwoNodesFailingConcurrently(t *testing.T) {
	objs := failing(objects(v1.ConditionUnknown, true), "n2", "n3", "n4")
	e := newEnv(t, objs, true)
	e.c.opts.MaxFencedNodePercent = 0
	_, ctx := ktesting.NewTestContext(t)
	var wg sync.WaitGroup
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func(node string) {
			defer wg.Done()
			_ = e.c.sync(ctx, node)
		}(fmt.Sprintf("n%d", i))
	}
	wg.Wait()
}

// Hole 9: a node in backoff is not re-queued by the periodic pass.
func TestResyncKeepsBackoff(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	_, ctx := ktesting.NewTestContext(t)
	// The controller's caches, on a queue of its own that no event feeds.
	c := &Controller{nodes: e.c.nodes, frCache: e.c.frCache, queue: workqueue.NewTypedRateLimitingQueue(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour))}
	defer c.queue.ShutDown()
	c.queue.AddRateLimited("n1") // a failed sync: back in an hour
	c.resync(ctx)
	if c.queue.Len() == 0 {
		t.Fatal("the periodic pass queued nothing")
	}
	for c.queue.Len() > 0 {
		n, _ := c.queue.Get()
		c.queue.Done(n)
		if n == "n1" {
			t.Fatal("the periodic pass re-queued a node waiting out its backoff")
		}
	}
}

// Hole 9: the controller does not react to its own record writes (a fence
// error whose text varies), only to progress.
func TestRecordChangeMatters(t *testing.T) {
	now := metav1.Now()
	base := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:   fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{Volumes: []fencingv1alpha1.FencedVolume{{Driver: driver, VolumeHandle: "h1", StartedTime: &now, FenceError: "refused (request 1)"}}}}
	tests := []struct {
		name   string
		change func(*fencingv1alpha1.FencingRequest)
		want   bool
	}{
		{"nothing", func(*fencingv1alpha1.FencingRequest) {}, false},
		{"another fence error text", func(fr *fencingv1alpha1.FencingRequest) {
			fr.Status.Volumes[0].FenceError = "refused (request 2)"
			fr.Status.ErrorMessage = "refused (request 2)"
		}, false},
		{"phase and conditions", func(fr *fencingv1alpha1.FencingRequest) { fr.Status.Phase = fencingv1alpha1.PhaseFencing }, false},
		{"fence confirmed", func(fr *fencingv1alpha1.FencingRequest) { fr.Status.Volumes[0].FencedTime = &now }, true},
		{"cleaned by the node agent", func(fr *fencingv1alpha1.FencingRequest) { fr.Status.Volumes[0].CleanedTime = &now }, true},
		{"another driver's entry", func(fr *fencingv1alpha1.FencingRequest) {
			fr.Status.Volumes = append(fr.Status.Volumes, fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "h2"})
		}, true},
		{"withdrawn by an admin", func(fr *fencingv1alpha1.FencingRequest) { fr.DeletionTimestamp = &now }, true},
		{"released by an admin through its spec", func(fr *fencingv1alpha1.FencingRequest) { fr.Spec.Released = true }, true},
		{"spec changed", func(fr *fencingv1alpha1.FencingRequest) { fr.Spec.Origin = fencingv1alpha1.OriginManual }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			o, _ := fencingv1alpha1.ToUnstructured(base)
			n, _ := fencingv1alpha1.ToUnstructured(cur)
			if got := recordChangeMatters(o, n); got != tc.want {
				t.Errorf("recordChangeMatters = %v, want %v", got, tc.want)
			}
		})
	}
}

// Hole 11: the fence goes to the CSI node ID the volume was published to
// (the VolumeAttachment's annotation, else the driver's CSINode entry),
// never to a guess such as the node's name; and first to the previous node
// ID the attacher still records on the VolumeAttachment (its unpublish
// failed, or the attacher crashed before it): the volume may still be
// published under it (S1).
func TestFenceUsesPublishedNodeID(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		previous   string
		csiNodeID  string
		want       string   // "": no fence
		wantFenced []string // every fence, in order; nil: one of want
	}{
		{name: "the attacher's annotation", annotation: "n1-id", csiNodeID: "csinode-id", want: "n1-id"},
		{name: "the CSINode entry", csiNodeID: "csinode-id", want: "csinode-id"},
		{name: "neither: no fence"},
		{name: "a previous node ID recorded: fenced first", annotation: "n1-id", previous: "n1-old-id", csiNodeID: "n1-id", want: "n1-id",
			wantFenced: []string{"h1 n1-old-id", "h1 n1-id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			for _, o := range objs {
				if va, ok := o.(*storagev1.VolumeAttachment); ok {
					va.Annotations = map[string]string{}
					if tc.annotation != "" {
						va.Annotations[contract.NodeIDAnnotation] = tc.annotation
					}
					if tc.previous != "" {
						va.Annotations[contract.PreviousNodeIDAnnotation] = tc.previous
					}
				}
			}
			if tc.csiNodeID != "" {
				objs = append(objs, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
					Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: tc.csiNodeID}}}})
			}
			e := newEnv(t, objs, true)
			err := e.sync(t)
			e.csi.mu.Lock()
			got, fenced := e.csi.nodeIDs["h1"], slices.Clone(e.csi.fencedIDs)
			e.csi.mu.Unlock()
			if got != tc.want {
				t.Errorf("fenced node ID %q, want %q", got, tc.want)
			}
			if want := tc.wantFenced; want != nil && !slices.Equal(fenced, want) {
				t.Errorf("fenced %q, want %q", fenced, want)
			}
			if tc.want == "" && (err == nil || e.steps.index("delete db-0") >= 0) {
				t.Errorf("no node ID: want an error and no pod deleted; err %v, steps %v", err, e.steps.log)
			}
		})
	}
}

// Policy: the pause switch, a workload's opt-out and a node under
// maintenance each stop automatic fencing before anything is written; the
// same node without them fails over.
func TestPolicyStopsAutomaticFencing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tweak  func(objs []runtime.Object) []runtime.Object
		fenced bool
	}{
		{name: "no policy", tweak: func(o []runtime.Object) []runtime.Object { return o }, fenced: true},
		{name: "paused", tweak: func(o []runtime.Object) []runtime.Object {
			return append(o, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: "kube-system",
				Annotations: map[string]string{PausedAnnotation: "storage maintenance"}}})
		}},
		{name: "pod opted out", tweak: func(o []runtime.Object) []runtime.Object {
			for _, x := range o {
				if p, ok := x.(*v1.Pod); ok {
					p.Labels = map[string]string{contract.FailoverLabel: contract.FailoverDisabled}
				}
			}
			return o
		}},
		{name: "namespace opted out", tweak: func(o []runtime.Object) []runtime.Object {
			return append(o, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{contract.FailoverLabel: contract.FailoverDisabled}}})
		}},
		{name: "cordoned", tweak: func(o []runtime.Object) []runtime.Object {
			o[0].(*v1.Node).Spec.Unschedulable = true
			return o
		}},
		{name: "drain in progress", tweak: func(o []runtime.Object) []runtime.Object {
			n := o[0].(*v1.Node)
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "DrainInProgress", Status: v1.ConditionTrue})
			return o
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.tweak(objects(v1.ConditionUnknown, true)), true)
			_ = e.sync(t)
			quarantined := e.steps.index("quarantine") >= 0
			if quarantined != tc.fenced || (e.csi.fenced("h1") > 0) != tc.fenced || (e.steps.index("delete db-0") >= 0) != tc.fenced {
				t.Errorf("quarantined %v, fenced %d, steps %v; want failed over: %v", quarantined, e.csi.fenced("h1"), e.steps.log, tc.fenced)
			}
		})
	}
}

// FencingComplete is derived from the record, not from the pass that
// force-deleted the pod: if that pass ends before the signals (here, the
// condition patch fails) and the attachment is detached since, a later pass
// still marks the node whole-fenced.
func TestFencingCompleteAfterThePodIsGone(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	e.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), contract.ConditionFencingComplete) {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	_ = e.sync(t)
	if e.steps.index("delete db-0") < 0 {
		t.Fatalf("no failover: %v", e.steps.log)
	}
	e.client.ReactionChain = e.client.ReactionChain[1:]
	e.attachmentReleased(t, "va1")
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete never set once the pod and its attachment were gone: %+v", e.node(t, "n1").Status.Conditions)
	}
}

// S4, issue 19 hole 2: a kubelet that talks is alive. Only a node whose
// kubelet stopped talking (Ready Unknown, its Lease silent for a lease
// duration as this controller saw it) is fenced automatically: not one
// whose kubelet reports it not Ready itself, not one re-registered a moment
// ago (no Ready condition yet), not one whose Lease was just renewed.
func TestAliveNodesAreNotFenced(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: nodehealth.LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour))), LeaseDurationSeconds: ptr.To[int32](40)}}
	tests := []struct {
		name  string
		ready v1.ConditionStatus // "": no Ready condition
		lease bool
	}{
		{name: "the kubelet reports the node not Ready", ready: v1.ConditionFalse},
		{name: "re-registered, no Ready condition yet"},
		{name: "unreachable, but its Lease changed a moment ago", ready: v1.ConditionUnknown, lease: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(tc.ready, true)
			if tc.ready == "" {
				objs[0].(*v1.Node).Status.Conditions = nil
			}
			if tc.lease {
				objs = append(objs, lease.DeepCopy())
			}
			e := newEnv(t, objs, true)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if len(e.steps.log) != 0 || e.csi.calls != 0 {
				t.Fatalf("an alive node was fenced: %v, %d CSI calls", e.steps.log, e.csi.calls)
			}
		})
	}
}

// withUnattachedStorage adds a Terminating pod web-0 on n1 whose storage
// reaches the node without a VolumeAttachment: an inline NFS volume
// ("inline"), or a claim bound to a PV of a CSI driver without attachments
// ("no-attach", attachRequired false, like NFS-CSI).
func withUnattachedStorage(objs []runtime.Object, kind string) []runtime.Object {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns", UID: "u-web", DeletionTimestamp: ptr.To(metav1.Now())},
		Spec: v1.PodSpec{NodeName: "n1"}}
	switch kind {
	case "inline":
		pod.Spec.Volumes = []v1.Volume{{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "nfs.example", Path: "/export"}}}}
		return append(objs, pod)
	default:
		const nfs = "nfs.csi.example"
		pod.Spec.Volumes = []v1.Volume{pvcVol("share")}
		pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "share", Namespace: "ns"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-share"}}
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-share"}, Spec: v1.PersistentVolumeSpec{
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: nfs, VolumeHandle: "export-1"}},
		}}
		d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: nfs, Annotations: map[string]string{contract.SafeDetachAnnotation: "true"}},
			Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}
		return append(objs, pod, pvc, pv, d)
	}
}

// S9, S3, S1, issue 19 hole 1: "the whole node is fenced" covers the pods'
// storage, not only the attachments. A pod whose volume reaches the node
// without an attachment keeps FencingComplete unset (the condition says
// why), so that neither this pod GC's FencingComplete rule nor anyone
// trusting the condition deletes it while the old node may still write;
// the pod whose own volume is fenced fails over.
func TestFencingCompleteCoversStorageWithoutAttachment(t *testing.T) {
	for _, kind := range []string{"inline", "no-attach"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, withUnattachedStorage(objects(v1.ConditionUnknown, true), kind), true)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if e.steps.index("delete db-0") < 0 {
				t.Fatalf("the pod of the fenced volume did not fail over: %v", e.steps.log)
			}
			n := e.node(t, "n1")
			if nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
				t.Fatalf("FencingComplete=True although pod web-0's storage has no attachment to fence")
			}
			if fr := e.record(t); fr.Status.Phase == fencingv1alpha1.PhaseFenced {
				t.Errorf("FencingRequest phase Fenced although web-0's storage is not fenced")
			}
			found := false
			for _, c := range n.Status.Conditions {
				if string(c.Type) == contract.ConditionFencingRequired && c.Reason == "StorageWithoutAttachment" && strings.Contains(c.Message, "web-0") {
					found = true
				}
			}
			if !found {
				t.Errorf("FencingRequired does not say why the node is not fenced as a whole: %+v", n.Status.Conditions)
			}
			said := 0
			for ev := range drain(e.c.recorder.(*record.FakeRecorder).Events) {
				if strings.Contains(ev, "FailoverBlocked") && strings.Contains(ev, "web-0") {
					said++
				}
			}
			if said != 1 {
				t.Errorf("pod web-0 stays Terminating without one FailoverBlocked Event saying why (%d)", said)
			}
			e.restart(t)
			_ = e.sync(t)
			if e.steps.index("delete web-0") >= 0 {
				t.Errorf("pod web-0 force-deleted although its storage was never fenced: %v", e.steps.log)
			}
		})
	}
}

// S5, S6, issue 19 hole 6: an admission whose release never came (a crash
// between the admission and the quarantine, a Node deleted with nothing
// pending) does not hold a slot forever: before it refuses, the guard drops
// the admissions that live reads show hold it for nothing. One that still
// fences keeps its slot.
func TestStormGuardDropsLeakedAdmissions(t *testing.T) {
	tests := []struct {
		name   string
		listed string // the admissions on the Lease before n1 fails
		admit  bool
	}{
		{name: "a deleted Node with nothing pending", listed: "gone", admit: true},
		{name: "a Ready node never quarantined (crash after the admission)", listed: "n3", admit: true},
		{name: "a node still fencing", listed: "n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := failing(objects(v1.ConditionUnknown, true), "n2")
			for _, o := range objs {
				if n, ok := o.(*v1.Node); ok && n.Name == "n2" {
					n.Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
				}
			}
			objs = append(objs, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: "kube-system",
				Annotations: map[string]string{stormGuardAnnotation: tc.listed}}})
			e := newEnv(t, objs, true)
			e.tweaks = append(e.tweaks, func(o *Options) { o.MaxFencedNodes, o.MaxFencedNodePercent = 1, 0 })
			e.restart(t)
			_ = e.sync(t)
			quarantined := nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil
			if quarantined != tc.admit {
				t.Fatalf("n1 quarantined = %v, want %v (steps %v)", quarantined, tc.admit, e.steps.log)
			}
			l, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), contract.StormGuardLeaseName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := "n1"
			if !tc.admit {
				want = tc.listed
			}
			if got := l.Annotations[stormGuardAnnotation]; got != want {
				t.Errorf("admissions %q, want %q", got, want)
			}
		})
	}
}

func TestAdmissionStale(t *testing.T) {
	ready := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	quarantined := ready.DeepCopy()
	quarantined.Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey}}
	down := &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}}
	pending := &fencingv1alpha1.FencingRequest{Spec: fencingv1alpha1.FencingRequestSpec{Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{Volumes: []fencingv1alpha1.FencedVolume{{Driver: driver, VolumeHandle: "h"}}}}
	manual := &fencingv1alpha1.FencingRequest{}
	powering := &fencingv1alpha1.FencingRequest{Spec: fencingv1alpha1.FencingRequestSpec{Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower}}}
	for _, tc := range []struct {
		name  string
		node  *v1.Node
		fr    *fencingv1alpha1.FencingRequest
		stale bool
	}{
		{"Node gone, no record", nil, nil, true},
		{"Node gone, volumes pending", nil, pending, false},
		{"Ready, not quarantined, no record", ready, nil, true},
		{"Ready, quarantined", quarantined, nil, false},
		{"Ready, an admin's request", ready, manual, false},
		{"down, not quarantined yet", down, nil, false},
		{"down, power fence under way", down, powering, false},
	} {
		if got := AdmissionStale(tc.node, tc.fr); got != tc.stale {
			t.Errorf("%s: AdmissionStale = %v, want %v", tc.name, got, tc.stale)
		}
	}
}

// drain returns what the channel holds now, closed.
func drain(c chan string) chan string {
	out := make(chan string, len(c))
	for {
		select {
		case s := <-c:
			out <- s
		default:
			close(out)
			return out
		}
	}
}

// S6/S8: release decides on the cached record, then completes the request on
// a live read. A fence recorded in between (another driver's, an admin's)
// keeps the request open: it is never marked Complete with an entry that is
// not cleaned.
func TestReleaseDoesNotCompleteOverANewFence(t *testing.T) {
	objs := objects(v1.ConditionTrue, false)
	objs[0].(*v1.Node).Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
	for i, o := range objs {
		if va, ok := o.(*storagev1.VolumeAttachment); ok && va.Name == "va1" {
			objs = append(objs[:i], objs[i+1:]...)
			break
		}
	}
	e := newEnv(t, objs, true)
	now := metav1.Now()
	fr := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFenced,
			Volumes: []fencingv1alpha1.FencedVolume{{Driver: driver, VolumeHandle: "h0", StartedTime: &now, FencedTime: &now, CleanedTime: &now}}}}
	if _, err := e.fr.Create(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fr.UpdateStatus(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	// Another driver records a fence on the node just after this pass read
	// its cache: the live read of the completion sees it.
	var once sync.Once
	e.dyn.PrependReactor("get", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() {
			cur := fr.DeepCopy()
			cur.Status.Volumes = append(cur.Status.Volumes, fencingv1alpha1.FencedVolume{Driver: otherDriver, VolumeHandle: "h9", StartedTime: &now})
			u, err := fencingv1alpha1.ToUnstructured(cur)
			if err == nil {
				err = e.dyn.Tracker().Update(fencingv1alpha1.Resource, u, "")
			}
			if err != nil {
				t.Error(err)
			}
		})
		return false, nil, nil
	})
	_ = e.sync(t)
	if got := e.record(t); got.Status.Phase == fencingv1alpha1.PhaseComplete && fencerecord.Pending(got) {
		t.Fatalf("request marked Complete with a volume not cleaned: %+v", got.Status)
	}
	// The next pass quarantines the node again, admitted by the storm
	// guard first: the guard counts every quarantined node (S5).
	e.restart(t)
	_ = e.sync(t)
	if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
		t.Errorf("a node with a fence recorded and not cleaned is not quarantined")
	}
	l, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), contract.StormGuardLeaseName, metav1.GetOptions{})
	if err != nil || !slices.Contains(strings.Split(l.Annotations[stormGuardAnnotation], ","), "n1") {
		t.Errorf("quarantined again without the storm guard's admission: %v %v", err, l)
	}
}

// A live read that fails says nothing about the node: the pass is retried
// with backoff (an error), neither fenced nor given up as "alive".
func TestFailedLiveReadIsRetried(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	e.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	if err := e.sync(t); err == nil {
		t.Fatal("sync succeeded although the node could not be read: the node waits for an event instead of a retry")
	}
	if e.csi.calls != 0 || e.steps.index("delete db-0") >= 0 {
		t.Fatalf("acted without a live read: %v", e.steps.log)
	}
}

// S5 with two drivers configured apart: the owner of node-level state,
// whichever driver's it is, holds the cluster to the strictest storm guard
// limit of every driver whose registration is renewed (trial seed 8027: the
// second driver's sidecar owned node-level state with the default limits
// and quarantined two nodes while the first one's said one at most).
func TestStormGuardHoldsTheStrictestDriversLimit(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string // the other driver's registration
		stale       bool              // not renewed for registrationTTL
		admit       bool
	}{
		{name: "the other driver allows one node at most", annotations: map[string]string{maxFencedNodesAnnotation: "1", maxFencedPercentAnnotation: "0"}},
		{name: "the other driver allows a third of the nodes", annotations: map[string]string{maxFencedNodesAnnotation: "0", maxFencedPercentAnnotation: "34"}},
		{name: "the other driver sets no limit", annotations: map[string]string{maxFencedNodesAnnotation: "0", maxFencedPercentAnnotation: "0"}, admit: true},
		{name: "the other driver's registration is not renewed", annotations: map[string]string{maxFencedNodesAnnotation: "1"}, stale: true, admit: true},
		{name: "a limit that does not parse is left out", annotations: map[string]string{maxFencedNodesAnnotation: "one"}, admit: true},
		{name: "registered by a version that did not say", admit: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := failing(objects(v1.ConditionUnknown, true), "n2")
			for _, o := range objs {
				if n, ok := o.(*v1.Node); ok && n.Name == "n2" {
					n.Spec.Taints = []v1.Taint{{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule}}
				}
			}
			ann := map[string]string{registrationLabel: otherDriver, canFenceAnnotation: "true"}
			maps.Copy(ann, tc.annotations)
			objs = append(objs,
				&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: "kube-system",
					Annotations: map[string]string{stormGuardAnnotation: "n2"}}},
				&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.RegistrationLeaseName(otherDriver), Namespace: "kube-system",
					Labels: map[string]string{registrationLabel: otherDriver}, Annotations: ann},
					Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}})
			e := newEnv(t, objs, true)
			clk := testingclock.NewFakeClock(time.Now())
			e.tweaks = append(e.tweaks, func(o *Options) { o.MaxFencedNodes, o.MaxFencedNodePercent, o.Clock = 0, 0, clk })
			e.restart(t)
			if tc.stale {
				l, err := e.c.registry.leases.Get(contract.RegistrationLeaseName(otherDriver))
				if err != nil {
					t.Fatal(err)
				}
				e.c.registry.observe(l)
				clk.Step(registrationTTL + time.Minute)
			}
			_ = e.sync(t)
			quarantined := nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil
			if quarantined != tc.admit {
				t.Errorf("n1 quarantined = %v, want %v (steps %v)", quarantined, tc.admit, e.steps.log)
			}
		})
	}
}

// S6: a node quarantined while down that comes back before anything on it
// was fenced (trial seed 8032: a kubelet back on skewed renewals right
// after the owner quarantined the node) is released, not left quarantined
// for an admin: the quarantine is recorded before its taint, and the
// release reads the record. (The attacher then fenced the volume a
// finished pod left, because the node was still quarantined: S4.)
func TestNodeBackBeforeAnyFenceIsReleased(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	_, ctx := ktesting.NewTestContext(t)
	// The owner quarantines the node; the node is back before it fences.
	if err := e.c.quarantine(ctx, e.node(t, "n1")); err != nil {
		t.Fatal(err)
	}
	if e.csi.fenced("h1") != 0 {
		t.Fatal("fenced before the test meant to")
	}
	e.setReady(t, "n1", v1.ConditionTrue)
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	n := e.node(t, "n1")
	if nodestate.Taint(n, contract.QuarantineTaintKey) != nil {
		t.Errorf("node back before any fence stays quarantined (taints %v)", n.Spec.Taints)
	}
	if e.csi.fenced("h1") != 0 {
		t.Errorf("the volume was fenced on a node that is back: %v", e.steps.log)
	}
}

// Seen in the trial power-off+node-deleted-and-reregistered (seed 30212):
// the node re-registered right after the fence, before its quarantine taint
// was back on the new Node object, and the StatefulSet's new pod was
// scheduled there; the attach/detach controller created its attachment,
// under the fenced one's name. The attachment waited for the release (no
// publish to a quarantined node) and the release for the attachment: the
// pod never ran. A new attachment, not attached, for a pod that runs on the
// node is not the fenced one; the fenced one (attached), or one no pod
// there wants, still holds the release.
func TestNewAttachmentOnAReturnedNodeDoesNotHoldItsRelease(t *testing.T) {
	for _, tc := range []struct {
		name         string
		attached     bool
		podOnNode    bool
		wantReleased bool
	}{
		{"a new attachment for the pod now on the node", false, true, true},
		{"the fenced attachment, still attached", true, true, false},
		{"an attachment no pod on the node wants", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The fenced attachment went, the node is back and Ready,
			// its agent cleaned the volume.
			e := readyToRelease(t)
			// The claim's PV is bound; the StatefulSet's new pod and
			// its attachment to the node, under the same name.
			e.podAndAttachment(t, tc.podOnNode, tc.attached)
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			n := e.node(t, "n1")
			if released := nodestate.Taint(n, contract.QuarantineTaintKey) == nil; released != tc.wantReleased {
				t.Errorf("released = %v, want %v (taints %v, conditions %v)", released, tc.wantReleased, n.Spec.Taints, n.Status.Conditions)
			}
		})
	}
}

// releaseByAdmin sets spec.released on n1's record, as kubectl fence
// release does: the release may then let attachments stay (Release).
func (e *env) releaseByAdmin(t *testing.T) {
	t.Helper()
	fr := e.record(t)
	fr.Spec.Released = true
	if _, err := e.fr.Update(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
}

// podAndAttachment binds claim data's PV, runs the StatefulSet's new pod
// db-0 on n1 (onNode) or n2, and makes an attachment va1 of pv1 to n1,
// attached or not: what a node back from a failover finds.
func (e *env) podAndAttachment(t *testing.T, onNode, attached bool) {
	t.Helper()
	ctx := context.Background()
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: "ns", Name: "data"}
	if _, err := e.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := "n1"
	if !onNode {
		node = "n2"
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", UID: "u2"},
		Spec: v1.PodSpec{NodeName: node, Volumes: []v1.Volume{pvcVol("data")}}}
	if _, err := e.client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The UID, as the apiserver sets it: the release's patch tests it.
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va1", UID: "va1-uid"},
		Spec:   storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv1")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
	if _, err := e.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// CI flake of TestSafeDetachOrder (2026-11-29): the pod GC deletes a fenced
// attachment right after its pod, and the caches, one watch each, may show
// the attachment gone while the pod is still there. A volume the record
// shows fenced on the node covers its pod's storage whether or not its
// attachment is still in the cache: the node is fenced as a whole.
func TestRecordedFenceCoversAPodWhoseAttachmentIsGone(t *testing.T) {
	objs := slices.DeleteFunc(objects(v1.ConditionUnknown, true), func(o runtime.Object) bool {
		_, va := o.(*storagev1.VolumeAttachment)
		return va
	})
	e := newEnv(t, objs, true)
	_, ctx := ktesting.NewTestContext(t)
	if err := fencerecord.RecordFenced(ctx, e.fr, "n1", "NodeUnreachable", fencingv1alpha1.FencedVolume{
		Driver: driver, VolumeHandle: "h1", PersistentVolumeName: "pv1", NodeID: "n1-id"}); err != nil {
		t.Fatal(err)
	}
	fr := e.record(t)
	if err := e.c.signalFencing(ctx, e.node(t, "n1"), fr); err != nil {
		t.Fatal(err)
	}
	if n := e.node(t, "n1"); !nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete not set although db-0's only volume is recorded fenced: %+v", n.Status.Conditions)
	}
}

// S4 with the fences of one pass running at once (fencerecord.FenceConcurrency):
// each fence reads the node live before it is sent once the pass's read is
// stale, under one lock, so that the node coming back during the first
// fences stops every fence that starts after it: of twelve volumes, the ten
// under way may land, the two queued behind them are never sent, never
// recorded fenced, and no pod is force-deleted.
func TestNodeBackStopsTheConcurrentFencesNotYetSent(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	const n = fencerecord.FenceConcurrency + 2
	for i := 1; i < n; i++ {
		u := volumeUser{node: "n1", driver: driver, pod: fmt.Sprintf("db-%d", i), uid: fmt.Sprintf("u-%d", i+1), claim: fmt.Sprintf("data-%d", i),
			pv: fmt.Sprintf("pv-%d", i+1), handle: fmt.Sprintf("h%d", i+1), va: fmt.Sprintf("va%d", i+1), nodeID: "n1-id", terminating: true}
		objs = append(objs, u.objects()...)
	}
	e := newEnv(t, objs, true)
	e.c.liveReadValidity = 0 // every fence reads the node again
	var back sync.Once
	e.csi.hook = func() {
		back.Do(func() { e.setReady(t, "n1", v1.ConditionTrue) })
	}
	_ = e.sync(t)
	sent := 0
	for i := 1; i <= n; i++ {
		sent += e.csi.fenced(fmt.Sprintf("h%d", i))
	}
	if sent == 0 || sent > fencerecord.FenceConcurrency {
		t.Errorf("%d of %d fences sent; want between 1 and the %d under way when the node came back", sent, n, fencerecord.FenceConcurrency)
	}
	fr := e.record(t)
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("h%d", i)
		if fencerecord.IsFenced(fr, driver, h) != (e.csi.fenced(h) > 0) {
			t.Errorf("%s: recorded fenced %v, sent %d times", h, fencerecord.IsFenced(fr, driver, h), e.csi.fenced(h))
		}
	}
	for _, s := range e.steps.log {
		if strings.HasPrefix(s, "delete ") {
			t.Errorf("a pod was force-deleted on a node that came back: %v", e.steps.log)
			break
		}
	}
}

// A node whose failover is done, whose agent cleaned every fenced volume in a
// moment of reach, and that is unreachable again: its passes go through
// signalIdle, which no longer derives FencingComplete from the record. What
// keeps the node out of reach of its storage is the quarantine: it stays
// (nothing is published or scheduled there), FencingComplete stays true
// beside it, nothing is fenced again, and the record is kept for the node's
// release once it is Ready.
func TestCleanedNodeUnreachableAgainStaysQuarantined(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("delete db-0") < 0 || !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
		t.Fatalf("the failover did not finish: steps %v, conditions %+v", e.steps.log, e.node(t, "n1").Status.Conditions)
	}
	// The node agent cleans up, as it does on a node back for a moment.
	fr := e.record(t)
	now := metav1.Now()
	for i := range fr.Status.Volumes {
		fr.Status.Volumes[i].CleanedTime = &now
	}
	if _, err := e.fr.UpdateStatus(context.Background(), fr); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if fencerecord.Pending(e.record(t)) {
		t.Fatal("the record still has a volume to clean: the test proves nothing")
	}
	calls := e.csi.calls
	for i := 0; i < 2; i++ {
		if err := e.sync(t); err != nil {
			t.Fatal(err)
		}
	}
	n := e.node(t, "n1")
	if nodestate.Taint(n, contract.QuarantineTaintKey) == nil {
		t.Errorf("quarantine lifted from an unreachable node: taints %+v", n.Spec.Taints)
	}
	if !nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete dropped while the node is still fenced out: %+v", n.Status.Conditions)
	}
	if e.csi.calls != calls {
		t.Errorf("fenced again: %d driver calls after the cleanup", e.csi.calls-calls)
	}
	if got := e.record(t); got.DeletionTimestamp != nil || got.Status.Phase == fencingv1alpha1.PhaseComplete {
		t.Errorf("record released while the node is unreachable: phase %q", got.Status.Phase)
	}
}

// S9, S3, issue 38 hole 3: FencingComplete is taken back as soon as it is
// no longer true. A node that failed over, came back still quarantined and
// got a new pod whose storage no fence covers (an NFS volume: pods that
// tolerate the quarantine or set spec.nodeName), then is cut off again,
// must not have that pod force-deleted through the FencingComplete of its
// first failure; one set by someone else is honoured as it is.
func TestFencingCompleteTakenBackWhenNoLongerTrue(t *testing.T) {
	tests := []struct {
		name string
		// reason is the FencingComplete's reason when the node is cut off
		// again: "" keeps the one this system set in the first failover.
		reason      string
		wantDeleted bool
	}{
		{name: "ours, from the last failure", wantDeleted: false},
		{name: "set by someone else", reason: "FencedByOperator", wantDeleted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, objects(v1.ConditionUnknown, true), true)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if e.steps.index("delete db-0") < 0 || !nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingComplete) {
				t.Fatalf("the first failover did not finish: steps %v, conditions %+v", e.steps.log, e.node(t, "n1").Status.Conditions)
			}
			// Back, not yet cleaned (still quarantined); a pod with an
			// inline NFS volume starts there.
			e.setReady(t, "n1", v1.ConditionTrue)
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
				t.Fatal("the node was released before its cleanup: the test proves nothing")
			}
			if tc.reason != "" {
				n := e.node(t, "n1")
				for i := range n.Status.Conditions {
					if string(n.Status.Conditions[i].Type) == contract.ConditionFencingComplete {
						n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = v1.ConditionTrue, tc.reason
					}
				}
				if _, err := e.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, o := range withUnattachedStorage(nil, "inline") {
				if _, err := e.client.CoreV1().Pods("ns").Create(context.Background(), o.(*v1.Pod), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// Cut off again.
			e.setReady(t, "n1", v1.ConditionUnknown)
			e.restart(t)
			_ = e.sync(t)
			if deleted := e.steps.index("delete web-0") >= 0; deleted != tc.wantDeleted {
				t.Fatalf("web-0 force-deleted: %v, want %v (steps %v)", deleted, tc.wantDeleted, e.steps.log)
			}
			n := e.node(t, "n1")
			if tc.reason == "" && nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
				t.Errorf("FencingComplete still True although web-0's storage is not fenced: %+v", n.Status.Conditions)
			}
			if tc.reason != "" && !nodestate.ConditionTrue(n, contract.ConditionFencingComplete) {
				t.Errorf("someone else's FencingComplete was taken back: %+v", n.Status.Conditions)
			}
		})
	}
}

// patchHookedNodes calls hook with each node patch before it is sent.
type patchHookedNodes struct {
	kubernetes.Interface
	hook func(name string, patch []byte)
}

func (h patchHookedNodes) IsWatchListSemanticsUnSupported() bool { return true }

func (h patchHookedNodes) CoreV1() corev1client.CoreV1Interface {
	return patchHookedCore{CoreV1Interface: h.Interface.CoreV1(), hook: h.hook}
}

type patchHookedCore struct {
	corev1client.CoreV1Interface
	hook func(name string, patch []byte)
}

func (h patchHookedCore) Nodes() corev1client.NodeInterface {
	return patchHookedNodeClient{NodeInterface: h.CoreV1Interface.Nodes(), hook: h.hook}
}

type patchHookedNodeClient struct {
	corev1client.NodeInterface
	hook func(name string, patch []byte)
}

func (h patchHookedNodeClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*v1.Node, error) {
	h.hook(name, data)
	return h.NodeInterface.Patch(ctx, name, pt, data, opts, sub...)
}

// S5, issue 38 item 8: between its admission and its quarantine taint a
// node may be Ready for a moment; another worker's prune then drops its
// admission as stale and admits another node in its place. The first node
// must not then be fenced uncounted beside the second: its admission is
// confirmed once its taint is on, and refused again here (limit 1), its
// taint taken back.
func TestPrunedAdmissionIsNotFencedUncounted(t *testing.T) {
	e := newEnv(t, failing(objects(v1.ConditionUnknown, true), "n2"), true)
	e.tweaks = append(e.tweaks, func(o *Options) { o.MaxFencedNodes, o.MaxFencedNodePercent = 1, 0 })
	_, ctx := ktesting.NewTestContext(t)
	other := &stormGuard{client: e.client, namespace: "kube-system"}
	once := sync.Once{}
	hooked := patchHookedNodes{Interface: e.client, hook: func(name string, patch []byte) {
		if name != "n1" || !strings.Contains(string(patch), contract.QuarantineTaintKey) {
			return
		}
		once.Do(func() {
			// n1 flaps Ready; another worker admits n2 and prunes n1.
			e.setReady(t, "n1", v1.ConditionTrue)
			one := func(admitted int) (bool, string) { return admitted < 1, "limit 1" }
			if _, err := other.admit(ctx, "n2", false, one, e.c.admissionStale); err != nil {
				t.Errorf("the other worker's admission of n2: %v", err)
			}
			e.setReady(t, "n1", v1.ConditionUnknown)
		})
	}}
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e.c = e.startOn(cctx, t, hooked, true)
	_ = e.sync(t)
	l, err := e.client.CoordinationV1().Leases("kube-system").Get(ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[stormGuardAnnotation]; got != "n2" {
		t.Fatalf("admissions %q, want n2 alone: the interleaving did not happen", got)
	}
	if e.steps.index("fence h1") >= 0 {
		t.Errorf("n1 fenced although its admission was dropped and n2 holds the only slot (steps %v)", e.steps.log)
	}
	if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil {
		t.Errorf("n1 keeps a quarantine taint the storm guard refused")
	}
}

// Issue 38 item 10: a pod whose eviction by the taint manager was lost (an
// apiserver down at that moment; the taint manager does not retry) stays
// Running on a dead node and never fails over. Once its toleration ran out,
// with a margin on this process's clock, it is evicted as the taint manager
// would have (graceful, DeletionByTaintManager), and only then; a pod that
// tolerates the taint forever, or whose node is alive, is left alone.
func TestLostEvictionTakenOver(t *testing.T) {
	tests := []struct {
		name        string
		toleration  *int64 // of the unreachable taint; nil: forever
		nodeReady   v1.ConditionStatus
		wantEvicted bool
	}{
		{name: "toleration ran out", toleration: ptr.To[int64](300), nodeReady: v1.ConditionUnknown, wantEvicted: true},
		{name: "tolerated forever", nodeReady: v1.ConditionUnknown},
		{name: "the kubelet reports itself not Ready", toleration: ptr.To[int64](300), nodeReady: v1.ConditionFalse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(tc.nodeReady, false)
			for _, o := range objs {
				switch o := o.(type) {
				case *v1.Node:
					if o.Name == "n1" {
						o.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.Now())}}
					}
				case *v1.Pod:
					o.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists,
						Effect: v1.TaintEffectNoExecute, TolerationSeconds: tc.toleration}}
				}
			}
			e := newEnv(t, objs, true)
			var mu sync.Mutex
			var deletes []metav1.DeleteOptions
			e.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				deletes = append(deletes, a.(k8stesting.DeleteActionImpl).DeleteOptions)
				return false, nil, nil
			})
			clk := testingclock.NewFakeClock(time.Now())
			e.tweaks = append(e.tweaks, func(o *Options) { o.Clock = clk })
			e.restart(t)
			_ = e.sync(t)
			clk.Step(300*time.Second + podgc.LostEvictionMargin - time.Second)
			_ = e.sync(t)
			if len(deletes) != 0 {
				t.Fatalf("pod evicted before its toleration and the margin ran out: %v", e.steps.log)
			}
			clk.Step(2 * time.Second)
			_ = e.sync(t)
			evicted := len(deletes) > 0
			if evicted != tc.wantEvicted {
				t.Fatalf("evicted = %v, want %v (steps %v)", evicted, tc.wantEvicted, e.steps.log)
			}
			if !evicted {
				return
			}
			if deletes[0].GracePeriodSeconds != nil {
				t.Errorf("evicted with a grace period of %d s, want the pod's own (a graceful delete)", *deletes[0].GracePeriodSeconds)
			}
			pod, err := e.client.CoreV1().Pods("ns").Get(context.Background(), "db-0", metav1.GetOptions{})
			if err == nil && podgc.TerminationReason(pod) == "" {
				t.Error("no termination reason")
			}
			if err == nil {
				found := false
				for _, c := range pod.Status.Conditions {
					found = found || c.Type == v1.DisruptionTarget && c.Reason == podgc.DisruptionReasonTaintManager
				}
				if !found {
					t.Errorf("no DisruptionTarget condition of the taint manager's: %+v", pod.Status.Conditions)
				}
			}
		})
	}
}

// An admin's release lets a fenced attachment stay (Release): the node's
// pod ran on, or its replacement came back to the node. That attachment says
// attached while the driver no longer publishes the volume, and the
// kubelet's staging of it fails until external-attacher's reconciler
// notices (a minute: on real nodes the replacement ran 65 s after the
// release). The release marks it not attached, after the quarantine taint
// went, so that the driver's attacher publishes it again at once, whether or
// not a pod on the node wants it yet (the replacement is often bound only
// once the taint went).
func TestReleaseRepublishesFencedAttachmentsLeftAttached(t *testing.T) {
	for _, tc := range []struct {
		name          string
		attached      bool
		podOnNode     bool
		wantRepublish bool
	}{
		{"attached in name, wanted by a pod on the node", true, true, true},
		{"attached in name, no pod on the node wants it yet", true, false, true},
		{"not attached: the attacher publishes it anyway", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := readyToRelease(t)
			ctx := context.Background()
			e.releaseByAdmin(t)
			e.podAndAttachment(t, tc.podOnNode, tc.attached)
			e.client.PrependReactor("patch", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "status" {
					e.steps.add("republish " + a.(k8stesting.PatchAction).GetName())
				}
				return false, nil, nil
			})
			e.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if p := string(a.(k8stesting.PatchAction).GetPatch()); a.GetSubresource() == "" && strings.Contains(p, "taints") && !strings.Contains(p, contract.QuarantineTaintKey) {
					e.steps.add("quarantine lifted")
				}
				return false, nil, nil
			})
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil {
				t.Fatalf("n1 not released (steps %v)", e.steps.log)
			}
			got, err := e.client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			republished := e.steps.index("republish va1") >= 0
			if republished != tc.wantRepublish {
				t.Fatalf("marked for publishing again: %v, want %v (steps %v)", republished, tc.wantRepublish, e.steps.log)
			}
			if tc.wantRepublish {
				if got.Status.Attached {
					t.Errorf("va1 still says attached: %+v", got.Status)
				}
				if q := e.steps.index("quarantine lifted"); q < 0 || q > e.steps.index("republish va1") {
					t.Errorf("want the quarantine lifted before the attachment is published again: %v", e.steps.log)
				}
			} else if got.Status.Attached != tc.attached {
				t.Errorf("va1's status changed: %+v", got.Status)
			}
		})
	}
}

// Once the request is Complete its entries stay as the record, and an
// attachment of one of those volumes made since is attached for real: a
// later pass through the release (here for a FencingTriaged taint left on
// the node) does not mark it for publishing again.
func TestCompleteRequestRepublishesNothing(t *testing.T) {
	e := readyToRelease(t)
	ctx := context.Background()
	// An admin's release, which lets attachments stay.
	e.releaseByAdmin(t)
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if fr := e.record(t); fr.Status.Phase != fencingv1alpha1.PhaseComplete {
		t.Fatalf("the release did not complete the request: %s", fr.Status.Phase)
	}
	e.podAndAttachment(t, true, true)
	n := e.node(t, "n1")
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.FencingTriagedTaintKey, Effect: v1.TaintEffectNoSchedule})
	if _, err := e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if nodestate.Taint(e.node(t, "n1"), contract.FencingTriagedTaintKey) != nil {
		t.Fatalf("the pass did not go through the release (the taint is still there)")
	}
	va, err := e.client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !va.Status.Attached {
		t.Errorf("an attachment made after the request completed was marked not attached: %+v", va.Status)
	}
}
