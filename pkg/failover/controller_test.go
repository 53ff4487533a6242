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
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// steps records the side effects of a sync in order.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(x string) { s.mu.Lock(); s.log = append(s.log, x); s.mu.Unlock() }
func (s *steps) index(x string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, y := range s.log {
		if y == x {
			return i
		}
	}
	return -1
}

type fakeCSI struct {
	steps *steps
	err   error
	// hook runs inside a successful fence, after the driver applied it.
	hook func()
	// before runs at the start of every call, whatever it answers.
	before func()
	// revokes: the driver does not advertise UNPUBLISH_FENCE and its
	// owner declared that its plain unpublish revokes access (issue 37):
	// a plain unpublish is its fence, and the fence field must never
	// reach it (fieldSent counts the calls that carried it).
	revokes bool
	// hang: every call waits for its context to end (an unpublish that
	// outlasts --timeout) and returns its error.
	hang bool

	mu        sync.Mutex
	calls     int
	fieldSent int
	fences    map[string]int
	nodeIDs   map[string]string // volume -> CSI node ID of its last fence
	// fencedIDs are the "volume nodeID" of the fences that succeeded, in
	// order.
	fencedIDs []string
}

// fenced returns how many fences of volumeID succeeded.
func (f *fakeCSI) fenced(volumeID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences[volumeID]
}

func (f *fakeCSI) Attach(context.Context, csiclient.AttachRequest) (map[string]string, error) {
	return nil, errors.New("not used")
}

func (f *fakeCSI) Detach(ctx context.Context, volumeID, nodeID string, _ map[string]string, fence bool) error {
	if f.before != nil {
		f.before()
	}
	f.mu.Lock()
	f.calls++
	if f.revokes && fence {
		f.fieldSent++
		f.mu.Unlock()
		return errors.New("the fence field was sent to a driver that does not advertise UNPUBLISH_FENCE")
	}
	if f.hang {
		f.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	// The fence of a driver whose unpublish revokes access is a plain one.
	fence = fence || f.revokes
	err := f.err
	if err == nil && fence {
		if f.fences == nil {
			f.fences = map[string]int{}
		}
		f.fences[volumeID]++
		if f.nodeIDs == nil {
			f.nodeIDs = map[string]string{}
		}
		f.nodeIDs[volumeID] = nodeID
		f.fencedIDs = append(f.fencedIDs, volumeID+" "+nodeID)
	}
	f.mu.Unlock()
	if !fence {
		return errors.New("the failover must only fence")
	}
	if err != nil {
		return err
	}
	f.steps.add("fence " + volumeID)
	if f.hook != nil {
		f.hook()
	}
	return nil
}

func objects(nodeReady v1.ConditionStatus, podTerminating bool) []runtime.Object {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{
		Conditions:   []v1.NodeCondition{{Type: v1.NodeReady, Status: nodeReady}},
		VolumesInUse: []v1.UniqueVolumeName{"kubernetes.io/csi/" + driver + "^h1"},
	}}
	healthy := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	others := []runtime.Object{}
	for _, n := range []string{"n3", "n4"} {
		others = append(others, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}})
	}
	csiDriver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver, Annotations: map[string]string{contract.SafeDetachAnnotation: "true"}}}
	db := volumeUser{node: "n1", driver: driver, pod: "db-0", uid: "u1", claim: "data", pv: "pv1", handle: "h1", va: "va1", nodeID: "n1-id", terminating: podTerminating}
	return append(append([]runtime.Object{node, healthy, csiDriver}, db.objects()...), others...)
}

// volumeUser is a pod on a node using one ReadWriteOnce CSI volume of a
// driver, through its claim, bound PV and VolumeAttachment on that node.
type volumeUser struct {
	node, driver, pod, uid, claim, pv, handle, va string
	nodeID                                        string // the VA's CSI node ID annotation, if any
	terminating                                   bool
}

func (u volumeUser) objects() []runtime.Object {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: u.pod, Namespace: "ns", UID: types.UID(u.uid)},
		Spec: v1.PodSpec{NodeName: u.node, Volumes: []v1.Volume{pvcVol(u.claim)}}}
	if u.terminating {
		pod.DeletionTimestamp = ptr.To(metav1.Now())
	}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: u.claim, Namespace: "ns"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: u.pv}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: u.pv}, Spec: v1.PersistentVolumeSpec{
		AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: u.driver, VolumeHandle: u.handle}},
	}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: u.va},
		Spec:   storagev1.VolumeAttachmentSpec{Attacher: u.driver, NodeName: u.node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(u.pv)}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}}
	if u.nodeID != "" {
		va.Annotations = map[string]string{contract.NodeIDAnnotation: u.nodeID}
	}
	return []runtime.Object{pod, pvc, pv, va}
}

type env struct {
	c      *Controller
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	fr     *fencingv1alpha1.Client
	csi    *fakeCSI
	steps  *steps
	// tweaks apply to every controller started on the env (restarts too).
	tweaks []func(*Options)
}

func newEnv(t *testing.T, objs []runtime.Object, safeDetach bool) *env {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s := &steps{}
	client := fake.NewClientset(objs...)
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// Taints have no merge key: a patch of them carries the whole list.
		if p := a.(k8stesting.PatchAction); p.GetSubresource() == "" && strings.Contains(string(p.GetPatch()), contract.QuarantineTaintKey) {
			s.add("quarantine")
		}
		return false, nil, nil
	})
	client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s.add("delete " + a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	e := &env{client: client, dyn: dyn, fr: fencingv1alpha1.NewClient(dyn), csi: &fakeCSI{steps: s}, steps: s}
	e.c = e.start(ctx, t, safeDetach)
	return e
}

// start builds a controller on the env's API state and syncs its caches, as
// a (re)started process would.
func (e *env) start(ctx context.Context, t *testing.T, safeDetach bool, tweak ...func(*Options)) *Controller {
	return e.startOn(ctx, t, e.client, safeDetach, tweak...)
}

// startOn is start with another client on the same API state.
func (e *env) startOn(ctx context.Context, t *testing.T, client kubernetes.Interface, safeDetach bool, tweak ...func(*Options)) *Controller {
	opts := Options{DriverName: driver, CanFence: true, NonGracefulFailover: safeDetach, Timeout: time.Second, StormGuardNamespace: "kube-system",
		MaxFencedNodePercent: 50, RetryIntervalStart: time.Millisecond, RetryIntervalMax: time.Second, Resync: time.Hour}
	for _, f := range append(append([]func(*Options){}, e.tweaks...), tweak...) {
		f(&opts)
	}
	c, err := New(opts,
		client, informers.NewSharedInformerFactory(client, 0), dynamicinformer.NewDynamicSharedInformerFactory(e.dyn, 0), e.fr, e.csi, record.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	if !c.startInformers(ctx) {
		t.Fatal("caches did not sync")
	}
	return c
}

func (e *env) sync(t *testing.T) error {
	_, ctx := ktesting.NewTestContext(t)
	return e.c.sync(ctx, "n1")
}

// Quarantine first, then the fence, then the force-delete: the order that
// makes the failover safe (S1) and keeps new pods off the node.
func TestSafeDetachOrder(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	q, f, d := e.steps.index("quarantine"), e.steps.index("fence h1"), e.steps.index("delete db-0")
	if q < 0 || f < 0 || d < 0 || !(q < f && f < d) {
		t.Fatalf("want quarantine < fence < delete, got %v", e.steps.log)
	}
	fr, err := e.fr.Get(context.Background(), "n1")
	if err != nil || !fencerecord.IsFenced(fr, driver, "h1") || fr.Status.Phase != fencingv1alpha1.PhaseFenced {
		t.Fatalf("record = %+v, %v", fr, err)
	}
	node, _ := e.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if len(node.Status.VolumesInUse) != 0 {
		t.Errorf("fenced volume still in volumesInUse: %v", node.Status.VolumesInUse)
	}
	if !nodestate.ConditionTrue(node, contract.ConditionFencingComplete) {
		t.Errorf("FencingComplete not set: %+v", node.Status.Conditions)
	}
}

// A force-deleted pod's fenced attachment goes as the pod goes: after the
// volume left the node's volumesInUse, and once the pod GC's live read found
// the node down, before the pod is marked Failed. That status write lets the
// attach/detach controller detach the volume at its next reconcile; its
// detach then finds the attachment gone and does not poll for it. While a
// pod on the node that this pass does not delete uses the volume, the
// attachment stays.
func TestFencedAttachmentReleasedAsItsLastPodGoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// secondPod: another Terminating pod on the node using the
		// same claim, deleted in the same pass or kept (secondStays).
		secondPod, secondStays bool
		wantReleased           bool
	}{
		{name: "its pod force-deleted", wantReleased: true},
		{name: "both pods of the claim force-deleted", secondPod: true, wantReleased: true},
		{name: "another pod of the claim stays on the node", secondPod: true, secondStays: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			if tc.secondPod {
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-1", Namespace: "ns", UID: "u9", DeletionTimestamp: ptr.To(metav1.Now())},
					Spec: v1.PodSpec{NodeName: "n1", Volumes: []v1.Volume{pvcVol("data")}}}
				if tc.secondStays {
					// Its other volume, of a driver nothing fences,
					// keeps it on the node.
					other := volumeUser{node: "n1", driver: "other.example.com", pod: "db-1", uid: "u9", claim: "data3", pv: "pv3", handle: "h3", va: "va3"}.objects()
					p.Spec.Volumes = append(p.Spec.Volumes, pvcVol("data3"))
					objs = append(objs, other[1:]...)
				}
				objs = append(objs, p)
			}
			e := newEnv(t, objs, true)
			e.client.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				e.steps.add("release " + a.(k8stesting.DeleteAction).GetName())
				return false, nil, nil
			})
			e.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "status" {
					e.steps.add("failed " + a.(k8stesting.PatchAction).GetName())
				}
				return false, nil, nil
			})
			e.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "status" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), "volumesInUse") {
					e.steps.add("volumesInUse")
				}
				return false, nil, nil
			})
			_ = e.sync(t)
			if e.csi.fenced("h1") == 0 || e.steps.index("delete db-0") < 0 {
				t.Fatalf("db-0's volume not fenced or db-0 not deleted: %v", e.steps.log)
			}
			_, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
			if released := apierrors.IsNotFound(err); released != tc.wantReleased {
				t.Fatalf("fenced attachment released: %v, want %v (steps %v)", released, tc.wantReleased, e.steps.log)
			}
			if !tc.wantReleased {
				return
			}
			// The last of the claim's pods to go frees the volume.
			last := "db-0"
			if tc.secondPod && e.steps.index("failed db-1") > e.steps.index("failed db-0") {
				last = "db-1"
			}
			u, r, f, d := e.steps.index("volumesInUse"), e.steps.index("release va1"), e.steps.index("failed "+last), e.steps.index("delete "+last)
			if !(u >= 0 && u < r && r < f && f < d) {
				t.Errorf("want volumesInUse released, then the attachment, then %s marked Failed and deleted: %v", last, e.steps.log)
			}
		})
	}
}

// A node's pods go in parallel, and each pod's fenced attachment goes as
// that pod goes: a pod whose delete hangs holds up neither the other pods
// nor their volumes.
func TestEachPodsAttachmentReleasedAsItGoes(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	objs[0].(*v1.Node).Status.VolumesInUse = append(objs[0].(*v1.Node).Status.VolumesInUse, "kubernetes.io/csi/"+driver+"^h2")
	objs = append(objs, volumeUser{node: "n1", driver: driver, pod: "db-1", uid: "u2", claim: "data2", pv: "pv2", handle: "h2", va: "va2", nodeID: "n1-id", terminating: true}.objects()...)
	e := newEnv(t, objs, true)
	e.client.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.steps.add("release " + a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	// db-0's delete hangs in the client, outside the fake's lock, which
	// a reactor would hold for every other request too.
	hang := make(chan struct{})
	_, ctx := ktesting.NewTestContext(t)
	c := e.startOn(ctx, t, hangingPodDeletes{Interface: e.client, hang: func(name string) {
		if name == "db-0" {
			<-hang
		}
	}}, true)
	done := make(chan error, 1)
	go func() { done <- c.sync(ctx, "n1") }()
	testpoll.Until(t, "db-1 and both attachments gone while db-0's delete hangs", func() bool {
		return e.steps.index("delete db-1") >= 0 && e.steps.index("release va1") >= 0 && e.steps.index("release va2") >= 0
	})
	if e.steps.index("delete db-0") >= 0 {
		t.Errorf("db-0 deleted while its delete hangs: %v", e.steps.log)
	}
	close(hang)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, va := range []string{"va1", "va2"} {
		if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), va, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("fenced attachment %s not released: %v (steps %v)", va, err, e.steps.log)
		}
	}
}

// hangingPodDeletes calls hang with the name of each pod before deleting it.
type hangingPodDeletes struct {
	kubernetes.Interface
	hang func(name string)
}

// IsWatchListSemanticsUnSupported tells the informers, as the fake
// clientset it wraps does, to list and then watch.
func (h hangingPodDeletes) IsWatchListSemanticsUnSupported() bool { return true }

func (h hangingPodDeletes) CoreV1() corev1client.CoreV1Interface {
	return hangingCore{CoreV1Interface: h.Interface.CoreV1(), hang: h.hang}
}

type hangingCore struct {
	corev1client.CoreV1Interface
	hang func(name string)
}

func (h hangingCore) Pods(namespace string) corev1client.PodInterface {
	return hangingPods{PodInterface: h.CoreV1Interface.Pods(namespace), hang: h.hang}
}

type hangingPods struct {
	corev1client.PodInterface
	hang func(name string)
}

func (h hangingPods) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	h.hang(name)
	return h.PodInterface.Delete(ctx, name, opts)
}

// A refused fence moves nothing: no pod is deleted, the error is recorded,
// and the sync fails so that it is retried with backoff.
func TestRefusedFenceDeletesNothing(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	e.csi.err = errors.New("FAILED_PRECONDITION: node still writing")
	if err := e.sync(t); err == nil {
		t.Fatal("sync succeeded although the fence was refused")
	}
	if e.steps.index("delete db-0") >= 0 {
		t.Fatalf("pod deleted although its volume is not fenced: %v", e.steps.log)
	}
	fr, err := e.fr.Get(context.Background(), "n1")
	if err != nil || fencerecord.Find(fr, driver, "h1") == nil || fencerecord.Find(fr, driver, "h1").FenceError == "" || fr.Status.ErrorMessage == "" {
		t.Fatalf("refusal not recorded: %+v, %v", fr, err)
	}
	// The driver agrees later: a retry completes the failover.
	e.csi.err = nil
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.steps.index("delete db-0") < 0 {
		t.Fatalf("pod not deleted after the fence succeeded: %v", e.steps.log)
	}
}

// S3/S4: nothing happens on a Ready node, to a pod that is not Terminating,
// or with the feature gate off.
func TestNothingHappensWithoutCause(t *testing.T) {
	tests := []struct {
		name       string
		ready      v1.ConditionStatus
		terminated bool
		gate       bool
	}{
		{"Ready node", v1.ConditionTrue, true, true},
		{"pod not Terminating", v1.ConditionUnknown, false, true},
		{"feature gate off", v1.ConditionUnknown, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, objects(tc.ready, tc.terminated), tc.gate)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if len(e.steps.log) != 0 || e.csi.calls != 0 {
				t.Fatalf("side effects without cause: %v, %d CSI calls", e.steps.log, e.csi.calls)
			}
		})
	}
}

// A restart between any two steps loses nothing: a fresh controller on the
// state the API holds finishes the failover, and fences nothing twice.
func TestRestartAfterFence(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	// First incarnation: the pod is not deleted yet because the delete fails.
	e.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unavailable")
	})
	_ = e.sync(t)
	calls := e.csi.calls
	if calls != 1 {
		t.Fatalf("want one fence, got %d", calls)
	}
	// Second incarnation on the same API state (a new controller, caches
	// rebuilt): the record says fenced, so no second fence; the pod goes.
	e.client.ReactionChain = e.client.ReactionChain[1:]
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c2 := e.start(ctx, t, true)
	if err := c2.sync(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if e.csi.calls != calls {
		t.Errorf("fenced again after a restart: %d calls", e.csi.calls)
	}
	if e.steps.index("delete db-0") < 0 {
		t.Errorf("the restarted controller did not finish the failover: %v", e.steps.log)
	}
}

// The Node Fencing KEP's timeline with its optional taints: triaged when
// NotReady is seen, required once NotReady long enough, and everything gone
// when the node is Ready again with nothing fenced.
func TestFencingConditionsAndTaints(t *testing.T) {
	objs := objects(v1.ConditionUnknown, false) // no pod qualifies: signalling only
	node := objs[0].(*v1.Node)
	node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute))
	e := newEnv(t, objs, true)
	_, ctx := ktesting.NewTestContext(t)
	e.c = e.start(ctx, t, true, func(o *Options) { o.FencingTaints = true; o.FencingRequiredAfter = 30 * time.Second })
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	n, _ := e.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if !nodestate.ConditionTrue(n, contract.ConditionFencingTriaged) || !nodestate.ConditionTrue(n, contract.ConditionFencingRequired) {
		t.Errorf("conditions = %+v", n.Status.Conditions)
	}
	if nodestate.Taint(n, contract.FencingTriagedTaintKey) == nil || nodestate.Taint(n, contract.FencingRequiredTaintKey) == nil {
		t.Errorf("taints = %+v", n.Spec.Taints)
	}
	if nodestate.Taint(n, contract.QuarantineTaintKey) != nil || e.csi.calls != 0 {
		t.Errorf("a node with no qualifying pod was fenced: taints %+v, %d CSI calls", n.Spec.Taints, e.csi.calls)
	}
	// The node comes back: every taint and condition added goes (S6).
	n.Status.Conditions[0] = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status = v1.ConditionTrue
		}
	}
	if _, err := e.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool { got, _ := e.c.nodes.Get("n1"); return got != nil && nodestate.Ready(got) }); err != nil {
		t.Fatal(err)
	}
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	n, _ = e.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if hasFencingCondition(n) || nodestate.Taint(n, contract.FencingTriagedTaintKey) != nil || nodestate.Taint(n, contract.FencingRequiredTaintKey) != nil {
		t.Errorf("left behind: conditions %+v, taints %+v", n.Status.Conditions, n.Spec.Taints)
	}
}

// waitUntil polls cond until it holds or 5 s pass.
func waitUntil(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("condition not met in 5s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// S4: only an explicit FencingRequest fences a Ready node; a pod that is not
// Terminating is left running (its owner decides), but its volumes are
// fenced and the node quarantined.
func TestManualFencingRequestFencesReadyNode(t *testing.T) {
	for _, origin := range []fencingv1alpha1.Origin{fencingv1alpha1.OriginManual, fencingv1alpha1.OriginAutomatic} {
		t.Run(string(origin), func(t *testing.T) {
			e := newEnv(t, objects(v1.ConditionTrue, false), true)
			_, ctx := ktesting.NewTestContext(t)
			if _, err := e.fr.Create(ctx, &fencingv1alpha1.FencingRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: origin, Reason: "maintenance"},
			}); err != nil {
				t.Fatal(err)
			}
			if err := waitUntil(ctx, func() bool { fr, err := e.c.frs.Get("n1"); return err == nil && fr != nil }); err != nil {
				t.Fatal(err)
			}
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			manual := origin == fencingv1alpha1.OriginManual
			if got := e.steps.index("fence h1") >= 0; got != manual {
				t.Errorf("fenced=%v, want %v (steps %v)", got, manual, e.steps.log)
			}
			if got := e.steps.index("quarantine") >= 0; got != manual {
				t.Errorf("quarantined=%v, want %v", got, manual)
			}
			if e.steps.index("delete db-0") >= 0 {
				t.Errorf("a running pod was deleted: %v", e.steps.log)
			}
		})
	}
}

// An admin's request on a Ready node reaches Fenced even when the node
// agent, alive there, cleans the fenced volume up before the controller reads
// the record back after the fence (CI saw it take 19 ms): the volume was
// fenced under this request, and nothing is published to the quarantined
// node since, so the cleanup does not make it reachable again. Until then a
// request so raced stayed Fencing for good.
func TestManualRequestFencedWhenCleanedBeforeTheReadBack(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionTrue, false), true)
	_, ctx := ktesting.NewTestContext(t)
	cleaned := false
	e.dyn.PrependReactor("get", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cleaned || e.csi.fenced("h1") == 0 {
			return false, nil, nil
		}
		// The node agent's cleanup lands right after the fence's outcome.
		obj, err := e.dyn.Tracker().Get(fencingv1alpha1.Resource, "", "n1")
		if err != nil {
			return false, nil, nil
		}
		fr, err := fencingv1alpha1.FromUnstructured(obj)
		if err != nil {
			return true, nil, err
		}
		v := fencerecord.Find(fr, driver, "h1")
		if v == nil || v.FencedTime == nil {
			return false, nil, nil // the outcome is not written yet
		}
		v.CleanedTime = ptr.To(metav1.Now())
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			return true, nil, err
		}
		cleaned = true
		return false, nil, e.dyn.Tracker().Update(fencingv1alpha1.Resource, u, "")
	})
	if _, err := e.fr.Create(ctx, &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginManual, Reason: "maintenance"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool { fr, err := e.c.frs.Get("n1"); return err == nil && fr != nil }); err != nil {
		t.Fatal(err)
	}
	// The pass that fences, and the next ones, as the informers bring the
	// cleanup: the request must end Fenced, the volume fenced once.
	for i := 0; i < 3; i++ {
		if err := e.sync(t); err != nil {
			t.Fatal(err)
		}
		if err := waitUntil(ctx, func() bool {
			fr, err := e.c.frs.Get("n1")
			if err != nil || fr == nil {
				return false
			}
			v := fencerecord.Find(fr, driver, "h1")
			return v != nil && v.CleanedTime != nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !cleaned {
		t.Fatal("the cleanup was never raced in: the test proves nothing")
	}
	fr, err := e.fr.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if fr.Status.Phase != fencingv1alpha1.PhaseFenced {
		t.Errorf("phase %q, want %q (conditions %+v)", fr.Status.Phase, fencingv1alpha1.PhaseFenced, fr.Status.Conditions)
	}
	if n := e.csi.fenced("h1"); n != 1 {
		t.Errorf("fenced %d times, want once", n)
	}
}

// Only an unreachable node (Ready Unknown: its kubelet stopped reporting) is
// triaged; a kubelet that reports its node not Ready itself, as a node
// registering does, is alive.
func TestTriageOnlyUnreachableNodes(t *testing.T) {
	for _, tc := range []struct {
		status  v1.ConditionStatus
		triaged bool
	}{
		{status: v1.ConditionUnknown, triaged: true},
		{status: v1.ConditionFalse},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			e := newEnv(t, objects(tc.status, false), true)
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if got := nodestate.ConditionTrue(e.node(t, "n1"), contract.ConditionFencingTriaged); got != tc.triaged {
				t.Errorf("FencingTriaged=%v, want %v", got, tc.triaged)
			}
		})
	}
}

// A pod that asked for its termination reason has it recorded in the node's
// FencingRequest before it is force-deleted: its hooks run when the node is
// back, when the pod is gone from the API, and the node agent serves the
// reason from the record. Other pods cost no write.
func TestTerminationReasonRecordedBeforeTheDelete(t *testing.T) {
	for _, tc := range []struct {
		name         string
		labels, anns map[string]string
		want         bool
	}{
		{name: "opted in by label", labels: map[string]string{termreason.OptInKey: termreason.OptInEnabled}, want: true},
		{name: "opted in by annotation", anns: map[string]string{termreason.OptInKey: termreason.OptInEnabled}, want: true},
		{name: "not opted in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(v1.ConditionUnknown, true)
			for _, o := range objs {
				if p, ok := o.(*v1.Pod); ok {
					p.Labels, p.Annotations = tc.labels, tc.anns
				}
			}
			e := newEnv(t, objs, true)
			recordedAtDelete := false
			e.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				fr, err := e.fr.Get(context.Background(), "n1")
				_, recordedAtDelete = fencerecord.ForceDeletedPodReason(fr, "u1")
				return false, nil, err
			})
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if e.steps.index("delete db-0") < 0 {
				t.Fatalf("pod not force-deleted: %v", e.steps.log)
			}
			fr, err := e.fr.Get(context.Background(), "n1")
			if err != nil {
				t.Fatal(err)
			}
			p, recorded := fencerecord.ForceDeletedPodReason(fr, "u1")
			if recorded != tc.want || recordedAtDelete != tc.want {
				t.Fatalf("reason recorded %v (before the delete: %v), want %v: %+v", recorded, recordedAtDelete, tc.want, fr.Status.ForceDeletedPods)
			}
			if recorded && (p.Namespace != "ns" || p.Name != "db-0" || p.TerminationReason != contract.TerminationEviction) {
				t.Errorf("recorded %+v", p)
			}
		})
	}
}

// The reason recorded for a pod is the one its status write put on it. A
// pass that marked the pod (its DisruptionTarget condition replaces the
// taint manager's) and did not delete it is retried, and a pass running
// beside it may still see the pod after its delete: neither takes the
// reason back to Eviction, which the pod's hooks would get instead of the
// IntolerableTaint the pod was deleted for.
func TestTerminationReasonKeptAcrossARetriedDelete(t *testing.T) {
	objs := objects(v1.ConditionUnknown, true)
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok {
			p.Labels = map[string]string{termreason.OptInKey: termreason.OptInEnabled}
			p.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: termreason.DisruptionTaintManager}}
		}
	}
	e := newEnv(t, objs, true)
	var refuse atomic.Bool
	refuse.Store(true)
	e.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewServiceUnavailable("refused by the test")
		}
		return false, nil, nil
	})
	if err := e.sync(t); err == nil {
		t.Fatalf("the pass succeeded with the pod's delete refused: %v", e.steps.log)
	}
	reason := func() string {
		t.Helper()
		p, ok := fencerecord.ForceDeletedPodReason(e.record(t), "u1")
		if !ok {
			t.Fatalf("no reason recorded for db-0: %+v", e.record(t).Status.ForceDeletedPods)
		}
		return p.TerminationReason
	}
	if got := reason(); got != contract.TerminationIntolerableTaint {
		t.Fatalf("first pass recorded %q, want %q", got, contract.TerminationIntolerableTaint)
	}
	// The retry decides from the cache, which now has the pod as marked.
	testpoll.Until(t, "db-0 seen marked Failed by the controller's cache", func() bool {
		pods, err := e.c.podsOn("n1")
		return err == nil && len(pods) == 1 && pods[0].Status.Phase == v1.PodFailed
	})
	refuse.Store(false)
	testpoll.Until(t, "db-0 deleted by a later pass", func() bool {
		_ = e.sync(t)
		_, err := e.client.CoreV1().Pods("ns").Get(context.Background(), "db-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if got := reason(); got != contract.TerminationIntolerableTaint {
		t.Fatalf("after the retried delete the record says %q, want %q", got, contract.TerminationIntolerableTaint)
	}
}

// The fenced attachment goes before the pod's status write and its delete:
// when either is refused after it went, the pass fails with the pod still on
// the node, and nothing it did can let the volume be used there: the node
// stays quarantined and the volume recorded fenced, the two the attacher
// refuses a publish on (attacher.TestQuarantineRefusal), so an attachment
// the attach/detach controller creates again for the pod (it still wants
// the volume on the node: the pod is not marked Failed) is not published
// there. The next pass deletes the pod.
func TestPodWriteRefusedAfterItsAttachmentWent(t *testing.T) {
	for _, refused := range []string{"patch", "delete"} {
		t.Run(refused, func(t *testing.T) {
			e := newEnv(t, objects(v1.ConditionUnknown, true), true)
			var refuse atomic.Bool
			refuse.Store(true)
			e.client.PrependReactor(refused, "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if refused == "patch" && a.GetSubresource() != "status" {
					return false, nil, nil
				}
				if refuse.Load() {
					return true, nil, apierrors.NewServiceUnavailable("refused by the test")
				}
				return false, nil, nil
			})
			if err := e.sync(t); err == nil {
				t.Fatalf("the pass succeeded with the pod's %s refused: %v", refused, e.steps.log)
			}
			if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the fenced attachment did not go before the pod's writes: %v (steps %v)", err, e.steps.log)
			}
			if _, err := e.client.CoreV1().Pods("ns").Get(context.Background(), "db-0", metav1.GetOptions{}); err != nil {
				t.Fatalf("db-0 gone although its %s was refused: %v", refused, err)
			}
			check := func(when string) {
				t.Helper()
				if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
					t.Errorf("%s: n1 not quarantined", when)
				}
				if fr := e.record(t); !fencerecord.IsFenced(fr, driver, "h1") || !fencerecord.Pending(fr) {
					t.Errorf("%s: h1 not recorded fenced and pending cleanup: %+v", when, fr.Status)
				}
			}
			check("after the refused pass")

			// The attach/detach controller attaches the volume to n1 again
			// for the pod it still sees there.
			again := volumeUser{node: "n1", driver: driver, pod: "db-0", uid: "u1", claim: "data", pv: "pv1", handle: "h1", va: "va1-again"}.objects()[3].(*storagev1.VolumeAttachment)
			again.Status.Attached = false
			if _, err := e.client.StorageV1().VolumeAttachments().Create(context.Background(), again, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			refuse.Store(false)
			testpoll.Until(t, "db-0 deleted by a later pass", func() bool {
				_ = e.sync(t)
				_, err := e.client.CoreV1().Pods("ns").Get(context.Background(), "db-0", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
			check("after db-0 went")
		})
	}
}

// The node comes back between the pod GC's live read, which found it down,
// and the release of the pod's fenced attachment: the pass goes on (the
// pod's delete was decided on that read) and the attachment goes, since
// what makes it safe to attach elsewhere is the fence, not the node's
// state. The node stays quarantined with its volume recorded fenced and
// not cleaned: the next pass, on a Ready node, does not release it before
// its agent cleaned up (S6).
func TestNodeBackBetweenTheLiveReadAndTheRelease(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	var back atomic.Bool
	e.client.PrependReactor("delete", "volumeattachments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if back.Swap(true) {
			return false, nil, nil
		}
		// Through the tracker: the clientset's lock is held here.
		obj, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", "n1")
		if err != nil {
			return true, nil, err
		}
		n := obj.(*v1.Node).DeepCopy()
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == v1.NodeReady {
				n.Status.Conditions[i].Status = v1.ConditionTrue
			}
		}
		e.steps.add("node back")
		return false, nil, e.client.Tracker().Update(v1.SchemeGroupVersion.WithResource("nodes"), n, "")
	})
	_ = e.sync(t)
	if !back.Load() {
		t.Fatalf("the fenced attachment was never released: %v", e.steps.log)
	}
	if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the fenced attachment not released: %v (steps %v)", err, e.steps.log)
	}
	if _, err := e.client.CoreV1().Pods("ns").Get(context.Background(), "db-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("db-0 not deleted after the live read found n1 down: %v (steps %v)", err, e.steps.log)
	}
	for pass := 0; pass < 2; pass++ {
		if pass > 0 {
			// A later pass sees the node Ready.
			_ = e.sync(t)
		}
		if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
			t.Fatalf("pass %d: n1 unquarantined before its agent cleaned up (steps %v)", pass, e.steps.log)
		}
		if fr := e.record(t); !fencerecord.IsFenced(fr, driver, "h1") || !fencerecord.Pending(fr) {
			t.Fatalf("pass %d: h1 not recorded fenced and pending cleanup: %+v", pass, fr.Status)
		}
	}
	if e.csi.fenced("h1") != 1 {
		t.Errorf("h1 fenced %d times, want 1", e.csi.fenced("h1"))
	}
}
