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

// Fixtures of the API objects the tests start from.

import (
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	upstream "github.com/kubernetes-csi/external-attacher/v4/pkg/attacher"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
)

const drv = "fence.csi.example.com"

var fin = contract.AttacherFinalizer(drv)

// ---- fixtures ----

func pv(name, handle string, mods ...func(*v1.PersistentVolume)) *v1.PersistentVolume {
	p := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: drv, VolumeHandle: handle, FSType: "ext4",
			}},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func withModes(modes ...v1.PersistentVolumeAccessMode) func(*v1.PersistentVolume) {
	return func(p *v1.PersistentVolume) { p.Spec.AccessModes = modes }
}

func va(name, pvName, node string, mods ...func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
	v := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: drv,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName},
		},
	}
	for _, m := range mods {
		m(v)
	}
	return v
}

func withFinalizer(v *storagev1.VolumeAttachment) { v.Finalizers = append(v.Finalizers, fin) }
func attached(v *storagev1.VolumeAttachment)      { v.Status.Attached = true }
func deleted(v *storagev1.VolumeAttachment) {
	now := metav1.Now()
	v.DeletionTimestamp = &now
}
func withNodeIDAnnotation(id string) func(*storagev1.VolumeAttachment) {
	return func(v *storagev1.VolumeAttachment) {
		if v.Annotations == nil {
			v.Annotations = map[string]string{}
		}
		v.Annotations[contract.NodeIDAnnotation] = id
	}
}

// attachedVA is a VA this driver attached: finalizer, node ID, status.
func attachedVA(name, pvName, node string, mods ...func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
	return va(name, pvName, node, append([]func(*storagev1.VolumeAttachment){withFinalizer, withNodeIDAnnotation(node + "-id"), attached}, mods...)...)
}

// detachingVA is an attached VA the attach/detach controller deleted.
func detachingVA(name, pvName, node string, mods ...func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
	return attachedVA(name, pvName, node, append([]func(*storagev1.VolumeAttachment){deleted}, mods...)...)
}

func node(name string, mods ...func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse},
			{Type: v1.NodeReady, Status: v1.ConditionTrue},
		}},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

func readyStatus(s v1.ConditionStatus) func(*v1.Node) {
	return func(n *v1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == v1.NodeReady {
				n.Status.Conditions[i].Status = s
			}
		}
	}
}

func noConditions(n *v1.Node) { n.Status.Conditions = nil }

// inUse lists the test driver's volumes of handles in the node's
// status.volumesInUse, as the kubelet reports what it has mounted.
func inUse(handles ...string) func(*v1.Node) { return inUseOf(drv, handles...) }

func inUseOf(driver string, handles ...string) func(*v1.Node) {
	return func(n *v1.Node) {
		for _, h := range handles {
			n.Status.VolumesInUse = append(n.Status.VolumesInUse, v1.UniqueVolumeName("kubernetes.io/csi/"+driver+"^"+h))
		}
	}
}

func taint(key string, effect v1.TaintEffect) func(*v1.Node) {
	return func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect}) }
}

var (
	quarantineTaint   = taint(contract.QuarantineTaintKey, v1.TaintEffectNoSchedule)
	outOfServiceTaint = taint(contract.OutOfServiceTaintKey, v1.TaintEffectNoExecute)
)

func csiNode(name string, drivers ...string) *storagev1.CSINode {
	if len(drivers) == 0 {
		drivers = []string{drv}
	}
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: name + "-id"})
	}
	return n
}

func fencingRequest(nodeName string, origin fencingv1alpha1.Origin, phase fencingv1alpha1.Phase, vols ...fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: nodeName, Origin: origin, Reason: "test"},
		Status:     fencingv1alpha1.FencingRequestStatus{Phase: phase, Volumes: vols},
	}
}

var t0 = metav1.Unix(1000, 0)

func fencedEntry(handle string) fencingv1alpha1.FencedVolume {
	return fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: handle, FencedTime: &t0}
}

func cleanedEntry(handle string) fencingv1alpha1.FencedVolume {
	return fencingv1alpha1.FencedVolume{Driver: drv, VolumeHandle: handle, FencedTime: &t0, CleanedTime: &t0}
}

// ---- the environment ----

// env is one Attacher on fake API clients, its informer caches filled by
// hand (never started: each call sees exactly the cache the case gives),
// and csi-test's mock controller server on a unix socket behind the real
// gRPC clients, external-attacher's attacher and csiclient: what the driver
// receives is what goes on the wire.
type env struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	factory  informers.SharedInformerFactory
	recorder *record.FakeRecorder
	a        *Attacher
	// fenceDone receives the VolumeAttachment of each fence that is over.
	fenceDone chan string

	// conn is the connection to the driver, whose calls go to *driver.
	conn *grpc.ClientConn
	*driverLog
}

// driverLog is what the driver received. It outlives an env that crashed
// (envConfig.restart), as the storage outlives the sidecar.
type driverLog struct {
	mu          sync.Mutex
	publishes   []*csi.ControllerPublishVolumeRequest
	unpublishes []*csi.ControllerUnpublishVolumeRequest
	// calls are both, in the order received, as sent() spells them.
	calls []string
}

type envConfig struct {
	// objects are in the API and, unless cache is given, in the caches.
	objects []runtime.Object
	// cache, when given, is what the caches hold instead: they lag.
	cache []runtime.Object
	// frs are the FencingRequests in the API and, unless frCache is given,
	// in the cache.
	frs     []*fencingv1alpha1.FencingRequest
	frCache []*fencingv1alpha1.FencingRequest
	// cannotFence: the driver lacks UNPUBLISH_FENCE.
	cannotFence bool
	// fencesOnOutOfService: the driver fences on the out-of-service taint.
	fencesOnOutOfService bool
	// declaration, when not "", is the value of the driver's declaration
	// that its unpublish revokes access on its CSIDriver in the API ("-":
	// a CSIDriver without it), which the Attacher reads (Declaration).
	declaration string
	// noNodes: the sidecar may not read Nodes; noRecord: FencingRequests
	// are not served or not granted.
	noNodes, noRecord bool
	frReactors        []reactor
	// unpublish answers ControllerUnpublishVolume; nil: success.
	unpublish func(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) error
	// publish, when given, runs before ControllerPublishVolume succeeds.
	publish func(ctx context.Context, req *csi.ControllerPublishVolumeRequest)
	// timeout bounds each fence (--timeout); 0: 2s.
	timeout time.Duration
	// fenceWorkers: 0 is 2, so that fences may run at once.
	fenceWorkers int
	// restart is an env whose process crashed: the new one starts over
	// on its API and its driver, with caches filled from what the API
	// holds now (objects, cache, frs, frCache, frReactors, publish and
	// unpublish are ignored).
	restart *env
}

type reactor struct {
	verb, resource string
	fn             clienttesting.ReactionFunc
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, recorder: record.NewFakeRecorder(100), fenceDone: make(chan string, 100)}
	if old := cfg.restart; old != nil {
		e.client, e.dyn, e.conn, e.driverLog = old.client, old.dyn, old.conn, old.driverLog
		cfg.objects, cfg.cache, cfg.frs, cfg.frCache = e.apiObjects(), nil, e.apiFencingRequests(), nil
	} else {
		objects := cfg.objects
		if cfg.declaration != "" {
			d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: drv}}
			if cfg.declaration != "-" {
				d.Annotations = map[string]string{contract.UnpublishRevokesAccessAnnotation: cfg.declaration}
			}
			objects = append(slices.Clone(objects), d)
		}
		e.client = fake.NewSimpleClientset(objects...)
		e.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"}, unstructured(t, cfg.frs)...)
		for _, r := range cfg.frReactors {
			e.dyn.PrependReactor(r.verb, r.resource, r.fn)
		}
		e.driverLog = &driverLog{}
		e.conn = e.startDriver(cfg.publish, cfg.unpublish)
	}
	e.factory = informers.NewSharedInformerFactory(e.client, 0)
	csiNodes := e.factory.Storage().V1().CSINodes().Informer()
	nodeIDs, err := NewNodeIDs(drv, csiNodes)
	if err != nil {
		t.Fatal(err)
	}
	cached := cfg.objects
	if cfg.cache != nil {
		cached = cfg.cache
	}
	e.fillCaches(cached)

	c := Config{
		DriverName:           drv,
		CanFence:             !cfg.cannotFence,
		FencesOnOutOfService: cfg.fencesOnOutOfService,
		CSI:                  upstream.NewAttacher(e.conn),
		FenceCSI:             csiclient.New(e.conn, 0),
		NodeIDs:              nodeIDs,
		PVs:                  e.factory.Core().V1().PersistentVolumes().Lister(),
		VAs:                  e.factory.Storage().V1().VolumeAttachments().Lister(),
		VolumeAttachments:    e.client.StorageV1().VolumeAttachments(),
		Recorder:             e.recorder,

		FenceWorkers: cmp.Or(cfg.fenceWorkers, 2),
		Timeout:      cmp.Or(cfg.timeout, 2*time.Second),
	}
	if !cfg.noNodes {
		c.Nodes, c.Client = e.factory.Core().V1().Nodes().Lister(), e.client
	}
	if cfg.declaration != "" || (cfg.restart != nil && cfg.restart.a.Declaration != nil) {
		c.Declaration = fencemode.NewReader(e.client.StorageV1(), drv, e.recorder)
	}
	if !cfg.noRecord {
		frCache := cfg.frs
		if cfg.frCache != nil {
			frCache = cfg.frCache
		}
		c.FencingRequests, c.FenceRecord = staticFRLister(frCache), fencingv1alpha1.NewClient(e.dyn)
	}
	if e.a, err = NewAttacher(c); err != nil {
		t.Fatal(err)
	}
	e.a.OnFenceDone(func(va string) { e.fenceDone <- va })
	fenceCtx, stopFences := context.WithCancel(ctx)
	fencesStopped := make(chan struct{})
	go func() {
		defer close(fencesStopped)
		e.a.RunFences(fenceCtx)
	}()
	t.Cleanup(func() {
		stopFences()
		<-fencesStopped
	})
	e.client.ClearActions()
	e.dyn.ClearActions()
	return e
}

// waitFenceDone waits until the fence pool says the fence of va ("": any)
// is over.
func (e *env) waitFenceDone(va string) {
	e.t.Helper()
	select {
	case got := <-e.fenceDone:
		if va != "" && got != va {
			e.t.Fatalf("the fence of %s is over, want %s", got, va)
		}
	case <-time.After(10 * time.Second):
		e.t.Fatalf("the fence of %s is not over after 10s", va)
	}
}

func unstructured(t *testing.T, frs []*fencingv1alpha1.FencingRequest) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, fr := range frs {
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

// fillCaches puts objs into the caches of their kinds.
func (e *env) fillCaches(objs []runtime.Object) {
	e.t.Helper()
	for _, o := range objs {
		var inf cache.SharedIndexInformer
		switch o.(type) {
		case *v1.Node:
			inf = e.factory.Core().V1().Nodes().Informer()
		case *v1.PersistentVolume:
			inf = e.factory.Core().V1().PersistentVolumes().Informer()
		case *storagev1.CSINode:
			inf = e.factory.Storage().V1().CSINodes().Informer()
		case *storagev1.VolumeAttachment:
			inf = e.factory.Storage().V1().VolumeAttachments().Informer()
		default:
			continue
		}
		if err := inf.GetIndexer().Add(o); err != nil {
			e.t.Fatal(err)
		}
	}
}

// startDriver serves csi-test's mock controller on a unix socket and
// returns a connection to it, made as main makes it.
func (e *env) startDriver(publish func(context.Context, *csi.ControllerPublishVolumeRequest), unpublish func(context.Context, *csi.ControllerUnpublishVolumeRequest) error) *grpc.ClientConn {
	e.t.Helper()
	srv := driver.NewMockControllerServer(gomock.NewController(e.t))
	srv.EXPECT().ControllerPublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
			if publish != nil {
				publish(ctx, req)
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			e.publishes = append(e.publishes, proto.Clone(req).(*csi.ControllerPublishVolumeRequest))
			e.calls = append(e.calls, publishString(req))
			return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"lun": "1"}}, nil
		}).AnyTimes()
	srv.EXPECT().ControllerUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
			e.mu.Lock()
			e.unpublishes = append(e.unpublishes, proto.Clone(req).(*csi.ControllerUnpublishVolumeRequest))
			e.calls = append(e.calls, unpublishString(req))
			e.mu.Unlock()
			if unpublish != nil {
				if err := unpublish(ctx, req); err != nil {
					return nil, err
				}
			}
			return &csi.ControllerUnpublishVolumeResponse{}, nil
		}).AnyTimes()
	d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{Controller: srv})
	sock := filepath.Join(e.t.TempDir(), "csi.sock")
	if err := d.StartOnAddress("unix", sock); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Stop)
	conn, err := connection.Connect(e.ctx, sock, metrics.NewCSIMetricsManager(drv))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// sent returns what the driver received: "publish vol node" and "unpublish
// vol node" or "unpublish vol node fence", reading the fence field from the
// wire format (DESIGN.md section 4: field 4, varint 1).
func (e *env) sent() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range e.publishes {
		out = append(out, publishString(r))
	}
	for _, r := range e.unpublishes {
		out = append(out, unpublishString(r))
	}
	return out
}

// sentInOrder is what sent returns, in the order the driver received it.
func (e *env) sentInOrder() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

func publishString(r *csi.ControllerPublishVolumeRequest) string {
	return "publish " + r.GetVolumeId() + " " + r.GetNodeId()
}

func unpublishString(r *csi.ControllerUnpublishVolumeRequest) string {
	s := "unpublish " + r.GetVolumeId() + " " + r.GetNodeId()
	switch u := r.ProtoReflect().GetUnknown(); string(u) {
	case "":
	case "\x20\x01":
		s += " fence"
	default:
		s += " unknown fields " + string(u)
	}
	return s
}

// apiObjects returns what the API holds of the kinds the caches hold.
func (e *env) apiObjects() []runtime.Object {
	e.t.Helper()
	var out []runtime.Object
	for res, kind := range map[schema.GroupVersionResource]schema.GroupVersionKind{
		v1.SchemeGroupVersion.WithResource("nodes"):                    v1.SchemeGroupVersion.WithKind("Node"),
		v1.SchemeGroupVersion.WithResource("persistentvolumes"):        v1.SchemeGroupVersion.WithKind("PersistentVolume"),
		storagev1.SchemeGroupVersion.WithResource("csinodes"):          storagev1.SchemeGroupVersion.WithKind("CSINode"),
		storagev1.SchemeGroupVersion.WithResource("volumeattachments"): storagev1.SchemeGroupVersion.WithKind("VolumeAttachment"),
	} {
		list, err := e.client.Tracker().List(res, kind, "")
		if err != nil {
			e.t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, items...)
	}
	return out
}

// apiFencingRequests returns the FencingRequests the API holds.
func (e *env) apiFencingRequests() []*fencingv1alpha1.FencingRequest {
	e.t.Helper()
	list, err := e.dyn.Tracker().List(fencingv1alpha1.Resource, fencingv1alpha1.Resource.GroupVersion().WithKind(contract.FencingKind), "")
	if err != nil {
		e.t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*fencingv1alpha1.FencingRequest
	for _, o := range items {
		fr, err := fencingv1alpha1.FromUnstructured(o)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, fr)
	}
	return out
}

// staticFRLister is the FencingRequest cache: what the case says it holds.
type staticFRLister []*fencingv1alpha1.FencingRequest

func (l staticFRLister) Get(name string) (*fencingv1alpha1.FencingRequest, error) {
	for _, fr := range l {
		if fr.Name == name {
			return fr, nil
		}
	}
	return nil, nil
}

// getFR reads a FencingRequest from the fake API without recording an action.
func (e *env) getFR(name string) *fencingv1alpha1.FencingRequest {
	e.t.Helper()
	obj, err := e.dyn.Tracker().Get(fencingv1alpha1.Resource, "", name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	fr, err := fencingv1alpha1.FromUnstructured(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	return fr
}

// actions returns the API calls of the test, "verb resource name", leaving
// out lists and watches (the informers' business).
func actions(recorded []clienttesting.Action) []string {
	var out []string
	for _, a := range recorded {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		res := a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			res += "/" + sub
		}
		name := ""
		switch x := a.(type) {
		case clienttesting.GetAction: // and PatchAction, the same interface
			name = x.GetName()
		case clienttesting.UpdateAction: // and CreateAction, the same interface
			name = accessorName(x.GetObject())
		}
		out = append(out, a.GetVerb()+" "+res+" "+name)
	}
	return out
}

func accessorName(o runtime.Object) string {
	if m, ok := o.(metav1.Object); ok {
		return m.GetName()
	}
	if u, ok := o.(interface{ GetName() string }); ok {
		return u.GetName()
	}
	return "?"
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// counter reads a fence metric for the test driver and a reason.
func counter(t *testing.T, vec *basemetrics.CounterVec, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(vec.WithLabelValues(drv, reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
