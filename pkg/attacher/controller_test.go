package attacher

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

func TestShouldEnqueueVAChange(t *testing.T) {
	base := va("va1", "pv1", "node-1", withFinalizer)
	base.ResourceVersion = "1"
	mod := func(f func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		v := base.DeepCopy()
		v.ResourceVersion = "2"
		f(v)
		return v
	}
	verr := &storagev1.VolumeError{Message: "boom", Time: metav1.Now()}
	tests := []struct {
		name string
		old  *storagev1.VolumeAttachment
		new  *storagev1.VolumeAttachment
		want bool
	}{
		{"resync (same resourceVersion)", base, base.DeepCopy(), true},
		{"attachError set: our own write, keep the backoff", base, mod(func(v *storagev1.VolumeAttachment) { v.Status.AttachError = verr }), false},
		{"detachError set", base, mod(func(v *storagev1.VolumeAttachment) { v.Status.DetachError = verr }), false},
		{"managedFields only", base, mod(func(v *storagev1.VolumeAttachment) {
			v.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
		}), false},
		{"deletion started", base, mod(deleted), true},
		{"attached changed", base, mod(attached), true},
		{"error and attached changed", base, mod(func(v *storagev1.VolumeAttachment) { v.Status.AttachError = verr; v.Status.Attached = true }), true},
		{"finalizer removed", base, mod(func(v *storagev1.VolumeAttachment) { v.Finalizers = nil }), true},
		{"annotation changed", base, mod(withNodeIDAnnotation("x")), true},
	}
	for _, tc := range tests {
		if got := shouldEnqueueVAChange(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A failing attach is retried with growing backoff: the handler's own
// attachError write comes back as an informer update, and must not requeue
// the VA at once (which would reset the effective backoff to zero).
func TestStatusOnlyUpdateKeepsBackoff(t *testing.T) {
	fail := attachCall("vol-1", "node-1-id").failing(status.Error(codes.Unavailable, "array offline"))
	e := newEnv(t, envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer), va("va1", "pv1", "node-1")), csiCalls: []csiCall{fail, fail}})
	before := e.getVA("va1")
	e.syncVA("va1")
	if n := e.ctrl.vaQueue.NumRequeues("va1"); n != 1 {
		t.Fatalf("NumRequeues = %d after one failure, want 1", n)
	}
	// The informer delivers the handler's writes (finalizer + annotation,
	// then attachError) one by one.
	afterMeta := e.getVA("va1").DeepCopy()
	afterMeta.Status.AttachError = nil
	afterMeta.ResourceVersion = "2"
	afterErr := e.getVA("va1").DeepCopy()
	afterErr.ResourceVersion = "3"
	e.ctrl.vaUpdated(afterMeta, afterErr)
	if n := e.ctrl.vaQueue.Len(); n != 0 {
		t.Fatalf("a status-only update queued the VA (len %d)", n)
	}
	// A real change (here: the metadata write) is queued.
	before.ResourceVersion = "1"
	e.ctrl.vaUpdated(before, afterMeta)
	if n := e.ctrl.vaQueue.Len(); n != 1 {
		t.Fatalf("a real change was not queued (len %d)", n)
	}
	e.refreshCaches()
	e.ctrl.syncVA(e.ctx)
	if n := e.ctrl.vaQueue.NumRequeues("va1"); n != 2 {
		t.Errorf("NumRequeues = %d after the second failure, want 2: the backoff was reset", n)
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute)
	if d1, d2, d3 := limiter.When("x"), limiter.When("x"), limiter.When("x"); d1 != time.Second || d2 != 2*time.Second || d3 != 4*time.Second {
		t.Errorf("the --retry-interval-* limiter gives %v %v %v, want 1s 2s 4s", d1, d2, d3)
	}
}

func TestSyncVADropsWhatIsNotOurs(t *testing.T) {
	other := va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other.csi" })
	e := newEnv(t, envConfig{objects: healthy(pv("pv1", "vol-1"), other)})
	e.syncVA("va1")
	e.syncVA("gone")
	if a := actions(e.client.Actions()); len(a) != 0 {
		t.Errorf("actions %q", a)
	}
	if e.ctrl.vaQueue.NumRequeues("va1")+e.ctrl.vaQueue.NumRequeues("gone") != 0 {
		t.Error("dropped items kept a backoff")
	}
}

func TestPVEvents(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.ctrl.pvChanged(pv("pv1", "v", withPVFinalizer))
	e.ctrl.pvChanged(pv("pv2", "v", pvDeleted))
	if e.ctrl.pvQueue.Len() != 0 {
		t.Fatal("queued a PV that is not being deleted or has no finalizer")
	}
	e.ctrl.pvChanged(pv("pv3", "v", withPVFinalizer, pvDeleted))
	e.ctrl.vaDeleted(cache.DeletedFinalStateUnknown{Key: "va1", Obj: va("va1", "pv4", "node-1")})
	if e.ctrl.pvQueue.Len() != 2 {
		t.Errorf("queue len %d, want 2", e.ctrl.pvQueue.Len())
	}
}

// A change of a node's health, or of its FencingRequest, requeues its
// VolumeAttachments at once; heartbeats do not.
func TestNodeAndFencingRequestEvents(t *testing.T) {
	e := newEnv(t, envConfig{objects: objs(
		attachedVA("va1", "pv1", "node-1"), attachedVA("va2", "pv2", "node-1"), attachedVA("va3", "pv3", "node-2"),
		attachedVA("va4", "pv4", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other.csi" }))})
	drain := func() []string {
		var got []string
		for e.ctrl.vaQueue.Len() > 0 {
			k, _ := e.ctrl.vaQueue.Get()
			got = append(got, k)
			e.ctrl.vaQueue.Done(k)
		}
		slices.Sort(got)
		return got
	}
	ready := node("node-1")
	heartbeat := ready.DeepCopy()
	heartbeat.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	frOf := func(fr *fencingv1alpha1.FencingRequest) any {
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	fr0 := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)
	fr1 := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, fencedEntry("vol-1"))
	fr1other := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing, fencedEntry("vol-1"),
		fencingv1alpha1.FencedVolume{Driver: "other.csi", VolumeHandle: "x", FencedTime: &t0})
	steps := []struct {
		name  string
		event func()
		want  []string
	}{
		{"heartbeat only", func() { e.ctrl.nodeUpdated(ready, heartbeat) }, nil},
		{"NotReady", func() { e.ctrl.nodeUpdated(ready, node("node-1", readyStatus(v1.ConditionFalse))) }, []string{"va1", "va2"}},
		{"quarantined", func() { e.ctrl.nodeUpdated(ready, node("node-1", quarantineTaint)) }, []string{"va1", "va2"}},
		{"out-of-service", func() { e.ctrl.nodeUpdated(ready, node("node-1", outOfServiceTaint)) }, []string{"va1", "va2"}},
		{"unrelated taint", func() { e.ctrl.nodeUpdated(ready, node("node-1", taint("x", v1.TaintEffectNoSchedule))) }, nil},
		{"node deleted", func() { e.ctrl.nodeAddedOrDeleted(cache.DeletedFinalStateUnknown{Obj: node("node-2")}) }, []string{"va3"}},
		{"FencingRequest created", func() { e.ctrl.fencingRequestAddedOrDeleted(frOf(fr0)) }, []string{"va1", "va2"}},
		{"volume quarantined", func() { e.ctrl.fencingRequestUpdated(frOf(fr0), frOf(fr1)) }, []string{"va1", "va2"}},
		{"another driver's volume quarantined", func() { e.ctrl.fencingRequestUpdated(frOf(fr1), frOf(fr1other)) }, nil},
		{"FencingRequest deleted", func() { e.ctrl.fencingRequestAddedOrDeleted(cache.DeletedFinalStateUnknown{Obj: frOf(fr1)}) }, []string{"va1", "va2"}},
		{"garbage FencingRequest", func() { e.ctrl.fencingRequestAddedOrDeleted("garbage") }, nil},
	}
	for _, s := range steps {
		s.event()
		if got := drain(); !slices.Equal(got, s.want) {
			t.Errorf("%s: queued %v, want %v", s.name, got, s.want)
		}
	}
}

// The whole loop on running informers: a VA is attached, then deleted and
// detached (fenced, as its node is NotReady), by the controller's own
// workers; Run stops when the context is cancelled.
func TestControllerRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewSimpleClientset(node("node-1"), csiNode("node-1"), pv("pv1", "vol-1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	csiFake := &fakeCSI{t: t, calls: []csiCall{attachCall("vol-1", "node-1-id"), detachCall("vol-1", "node-1-id", true)}}
	defer csiFake.verify()
	recorder := record.NewFakeRecorder(10)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	h, err := NewCSIHandler(CSIHandlerConfig{
		DriverName: drv, Timeout: timeout, Capabilities: Capabilities{Fence: true},
		Client: client, Attacher: csiFake, Recorder: recorder,
		FencingRequests: trackerFRLister{dyn}, FenceRecord: fencerecord.NewRecorder(fencingv1alpha1.NewClient(dyn)),
		PVLister: factory.Core().V1().PersistentVolumes().Lister(), NodeLister: factory.Core().V1().Nodes().Lister(),
		CSINodeLister: factory.Storage().V1().CSINodes().Lister(), VALister: factory.Storage().V1().VolumeAttachments().Lister(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := NewController(klog.FromContext(ctx), ControllerConfig{
		DriverName: drv, Handler: h,
		VAInformer: factory.Storage().V1().VolumeAttachments(), PVInformer: factory.Core().V1().PersistentVolumes(),
		NodeInformer: factory.Core().V1().Nodes(), CSINodeInformer: factory.Storage().V1().CSINodes(),
		VARateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 100*time.Millisecond),
		PVRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, 100*time.Millisecond),
		ReconcileSync: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	stopped := make(chan struct{})
	go func() { ctrl.Run(ctx, 2); close(stopped) }()

	waitFor := func(what string, cond func(*storagev1.VolumeAttachment) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			v, err := client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
			return err == nil && cond(v), nil
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	if _, err := client.StorageV1().VolumeAttachments().Create(ctx, va("va1", "pv1", "node-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("attached", func(v *storagev1.VolumeAttachment) bool { return v.Status.Attached })

	// The node dies; the attach/detach controller deletes the VA.
	if _, err := client.CoreV1().Nodes().Update(ctx, node("node-1", readyStatus(v1.ConditionUnknown), unreachableTaint), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node seen NotReady", func(*storagev1.VolumeAttachment) bool {
		n, err := factory.Core().V1().Nodes().Lister().Get("node-1")
		return err == nil && !isReady(n)
	})
	v := e2eGet(t, ctx, client, "va1")
	v.DeletionTimestamp = ptr(metav1.Now())
	if _, err := client.StorageV1().VolumeAttachments().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("detached", func(v *storagev1.VolumeAttachment) bool {
		return !slices.Contains(v.Finalizers, fin) && !v.Status.Attached
	})
	if ev := <-recorder.Events; ev[:len("Normal FencedUnpublish")] != "Normal FencedUnpublish" {
		t.Errorf("event %q", ev)
	}

	cancel()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the context was cancelled")
	}
}

func e2eGet(t *testing.T, ctx context.Context, client *fake.Clientset, name string) *storagev1.VolumeAttachment {
	t.Helper()
	v, err := client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNewControllerRejectsIncompleteConfig(t *testing.T) {
	if _, err := NewController(klog.Background(), ControllerConfig{DriverName: drv}); err == nil {
		t.Error("no error")
	}
}

// Driver names with characters a finalizer cannot carry get
// external-attacher's sanitized finalizer, on both the VA and the PV.
func TestOddDriverNames(t *testing.T) {
	for _, tc := range []struct{ driver, finalizer string }{
		{"Odd.Driver_name", "external-attacher/Odd-Driver-name"},
		{"trailing.dot.", "external-attacher/trailing-dot-X"},
		{"csi/with:colon@x", "external-attacher/csi-with-colon-x"},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			if got := contract.AttacherFinalizer(tc.driver); got != tc.finalizer {
				t.Fatalf("finalizer %q, want %q", got, tc.finalizer)
			}
			p := pv("pv1", "vol-1", func(p *v1.PersistentVolume) { p.Spec.CSI.Driver = tc.driver })
			a := va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = tc.driver })
			cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: tc.driver, NodeID: "node-1-id"}}}}
			client := fake.NewSimpleClientset(p, a, node("node-1"), cn)
			factory := informers.NewSharedInformerFactory(client, 0)
			for _, o := range []struct {
				inf cache.SharedIndexInformer
				obj any
			}{
				{factory.Core().V1().PersistentVolumes().Informer(), p}, {factory.Storage().V1().VolumeAttachments().Informer(), a},
				{factory.Core().V1().Nodes().Informer(), node("node-1")}, {factory.Storage().V1().CSINodes().Informer(), cn},
			} {
				if err := o.inf.GetIndexer().Add(o.obj); err != nil {
					t.Fatal(err)
				}
			}
			csiFake := &fakeCSI{t: t, calls: []csiCall{attachCall("vol-1", "node-1-id")}}
			defer csiFake.verify()
			h, err := NewCSIHandler(CSIHandlerConfig{
				DriverName: tc.driver, Timeout: timeout, Client: client, Attacher: csiFake, Recorder: record.NewFakeRecorder(10),
				PVLister: factory.Core().V1().PersistentVolumes().Lister(), NodeLister: factory.Core().V1().Nodes().Lister(),
				CSINodeLister: factory.Storage().V1().CSINodes().Lister(), VALister: factory.Storage().V1().VolumeAttachments().Lister(),
			})
			if err != nil {
				t.Fatal(err)
			}
			q := workqueue.NewTypedRateLimitingQueue[string](workqueue.DefaultTypedControllerRateLimiter[string]())
			defer q.ShutDown()
			h.Init(q, q)
			h.SyncNewOrUpdatedVolumeAttachment(ctx, a.DeepCopy())
			gotVA := e2eGet(t, ctx, client, "va1")
			gotPV, _ := client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
			if !gotVA.Status.Attached || !slices.Equal(gotVA.Finalizers, []string{tc.finalizer}) || !slices.Equal(gotPV.Finalizers, []string{tc.finalizer}) {
				t.Errorf("VA %v %+v, PV %v", gotVA.Finalizers, gotVA.Status, gotPV.Finalizers)
			}
		})
	}
}

func TestTrivialHandler(t *testing.T) {
	runTests(t, []testCase{
		{
			name:      "marked attached without any CSI call or finalizer",
			envConfig: envConfig{trivial: true, objects: objs(va("va1", "pv1", "node-1"))},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments/status va1"},
			check: expectVA("va1", func(t *testing.T, v *storagev1.VolumeAttachment) {
				if !v.Status.Attached || len(v.Finalizers) != 0 {
					t.Errorf("VA %v %+v", v.Finalizers, v.Status)
				}
			}),
		},
		{
			name:      "already attached: nothing",
			envConfig: envConfig{trivial: true, objects: objs(va("va1", "pv1", "node-1", attached))},
			syncVA:    "va1",
		},
		{
			name:      "being deleted: nothing to detach",
			envConfig: envConfig{trivial: true, objects: objs(va("va1", "pv1", "node-1", deleted, func(v *storagev1.VolumeAttachment) { v.Finalizers = []string{"other"} }))},
			syncVA:    "va1",
		},
		{
			name:      "status patch fails: backoff",
			envConfig: envConfig{trivial: true, objects: objs(va("va1", "pv1", "node-1")), reactors: []reactor{failOnce("patch", "volumeattachments", "status", errors.New("boom"))}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments/status va1"},
			requeued:  true,
		},
		{
			name:      "PVs need nothing",
			envConfig: envConfig{trivial: true, objects: objs(pv("pv1", "vol-1", withPVFinalizer, pvDeleted))},
			syncPV:    "pv1",
		},
	})
	if err := NewTrivialHandler(nil).ReconcileVA(context.Background()); err != nil {
		t.Error(err)
	}
}
