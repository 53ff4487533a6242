package attacher

// A small framework for table tests in the style of external-attacher's:
// each case gives the initial API objects, the CSI calls the handler must
// make (scripted answers included) and the API writes it must do, then
// checks the resulting objects, Events and metrics. Informer caches are
// filled from the fake clientset before every step, never started, so each
// step is deterministic.

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
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
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

const (
	drv     = "fence.csi.example.com"
	timeout = 200 * time.Millisecond
)

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

func withPVFinalizer(p *v1.PersistentVolume) { p.Finalizers = append(p.Finalizers, fin) }
func pvDeleted(p *v1.PersistentVolume) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
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

func taint(key string, effect v1.TaintEffect) func(*v1.Node) {
	return func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect}) }
}

var (
	quarantineTaint   = taint(contract.QuarantineTaintKey, v1.TaintEffectNoSchedule)
	outOfServiceTaint = taint(contract.OutOfServiceTaintKey, v1.TaintEffectNoExecute)
	unreachableTaint  = taint(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute)
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

func secret(ns, name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
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

func mountCap(fsType string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

var rwoCap = mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)

// ---- scripted CSI driver ----

// csiCall is one expected CSI call and the driver's scripted answer.
type csiCall struct {
	op     string // "attach" or "detach"
	volume string
	nodeID string
	fence  bool
	// Checked on attach.
	readOnly      bool
	capability    *csi.VolumeCapability // nil: not checked
	volumeContext map[string]string     // nil: not checked
	secrets       map[string]string     // nil: must be empty
	// The answer.
	metadata map[string]string
	err      error
	hang     bool // block until the caller's --timeout expires
}

func attachCall(volume, nodeID string) csiCall {
	return csiCall{op: "attach", volume: volume, nodeID: nodeID, capability: rwoCap}
}
func detachCall(volume, nodeID string, fence bool) csiCall {
	return csiCall{op: "detach", volume: volume, nodeID: nodeID, fence: fence}
}

func (c csiCall) failing(err error) csiCall { c.err = err; return c }

type fakeCSI struct {
	t     *testing.T
	mu    sync.Mutex
	calls []csiCall
	next  int
}

var _ csiclient.Attacher = &fakeCSI{}

func (f *fakeCSI) take(got string) (csiCall, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next >= len(f.calls) {
		f.t.Errorf("unexpected CSI call %s", got)
		return csiCall{}, false
	}
	c := f.calls[f.next]
	f.next++
	return c, true
}

func (f *fakeCSI) answer(ctx context.Context, c csiCall) error {
	if c.hang {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return c.err
}

func (f *fakeCSI) Attach(ctx context.Context, r csiclient.AttachRequest) (map[string]string, error) {
	got := fmt.Sprintf("attach(%s, %s, ro=%v)", r.VolumeID, r.NodeID, r.ReadOnly)
	c, ok := f.take(got)
	if !ok {
		return nil, fmt.Errorf("unexpected call")
	}
	want := fmt.Sprintf("%s(%s, %s, ro=%v)", c.op, c.volume, c.nodeID, c.readOnly)
	if got != want {
		f.t.Errorf("CSI call %s, want %s", got, want)
	}
	if c.capability != nil && !proto.Equal(c.capability, r.Capability) {
		f.t.Errorf("attach capability %v, want %v", r.Capability, c.capability)
	}
	if c.volumeContext != nil && !reflect.DeepEqual(c.volumeContext, r.VolumeContext) {
		f.t.Errorf("attach volume context %v, want %v", r.VolumeContext, c.volumeContext)
	}
	if !sameSecrets(c.secrets, r.Secrets) {
		f.t.Errorf("attach secrets %v, want %v", r.Secrets, c.secrets)
	}
	if err := f.answer(ctx, c); err != nil {
		return nil, err
	}
	return c.metadata, nil
}

func (f *fakeCSI) Detach(ctx context.Context, volumeID, nodeID string, secrets map[string]string, fence bool) error {
	got := fmt.Sprintf("detach(%s, %s, fence=%v)", volumeID, nodeID, fence)
	c, ok := f.take(got)
	if !ok {
		return fmt.Errorf("unexpected call")
	}
	if want := fmt.Sprintf("%s(%s, %s, fence=%v)", c.op, c.volume, c.nodeID, c.fence); got != want {
		f.t.Errorf("CSI call %s, want %s", got, want)
	}
	if !sameSecrets(c.secrets, secrets) {
		f.t.Errorf("detach secrets %v, want %v", secrets, c.secrets)
	}
	return f.answer(ctx, c)
}

func (f *fakeCSI) verify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls[f.next:] {
		f.t.Errorf("expected CSI call not made: %s(%s, %s, fence=%v)", c.op, c.volume, c.nodeID, c.fence)
	}
}

func sameSecrets(a, b map[string]string) bool {
	return (len(a) == 0 && len(b) == 0) || reflect.DeepEqual(a, b)
}

type fakeLister struct {
	published map[string][]string
	err       error
	calls     int
}

func (l *fakeLister) ListVolumes(context.Context) (map[string][]string, error) {
	l.calls++
	return l.published, l.err
}

// trackerFRLister reads FencingRequests straight from the fake dynamic
// client's tracker (no recorded action), standing in for the informer.
type trackerFRLister struct {
	dyn *dynamicfake.FakeDynamicClient
}

func (l trackerFRLister) Get(name string) (*fencingv1alpha1.FencingRequest, error) {
	obj, err := l.dyn.Tracker().Get(fencingv1alpha1.Resource, "", name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return fencingv1alpha1.FromUnstructured(obj)
}

// ---- the environment ----

type reactor struct {
	verb, resource string
	fn             clienttesting.ReactionFunc
}

type env struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	factory  informers.SharedInformerFactory
	csi      *fakeCSI
	lister   *fakeLister
	recorder *record.FakeRecorder
	handler  Handler
	ctrl     *Controller
}

type envConfig struct {
	objects       []runtime.Object
	frs           []*fencingv1alpha1.FencingRequest
	caps          Capabilities
	noFencingAPI  bool // the FencingRequest CRD is not installed
	trivial       bool
	listVolumes   bool
	defaultFSType string
	reactors      []reactor
	frReactors    []reactor
	csiCalls      []csiCall
	// attacher replaces the scripted fake (e.g. by a real gRPC client).
	attacher csiclient.Attacher
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, recorder: record.NewFakeRecorder(100)}
	e.client = fake.NewSimpleClientset(cfg.objects...)
	for _, r := range cfg.reactors {
		e.client.PrependReactor(r.verb, r.resource, r.fn)
	}
	var frObjs []runtime.Object
	for _, fr := range cfg.frs {
		u, err := fencingv1alpha1.ToUnstructured(fr)
		if err != nil {
			t.Fatal(err)
		}
		frObjs = append(frObjs, u)
	}
	e.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"}, frObjs...)
	for _, r := range cfg.frReactors {
		e.dyn.PrependReactor(r.verb, r.resource, r.fn)
	}
	e.factory = informers.NewSharedInformerFactory(e.client, 0)
	e.csi = &fakeCSI{t: t, calls: cfg.csiCalls}
	t.Cleanup(e.csi.verify)

	vaInf := e.factory.Storage().V1().VolumeAttachments()
	pvInf := e.factory.Core().V1().PersistentVolumes()
	nodeInf := e.factory.Core().V1().Nodes()
	csiNodeInf := e.factory.Storage().V1().CSINodes()
	if cfg.trivial {
		e.handler = NewTrivialHandler(e.client)
	} else {
		hc := CSIHandlerConfig{
			DriverName:    drv,
			Timeout:       timeout,
			DefaultFSType: cfg.defaultFSType,
			Capabilities:  cfg.caps,
			Client:        e.client,
			Attacher:      e.csi,
			PVLister:      pvInf.Lister(),
			NodeLister:    nodeInf.Lister(),
			CSINodeLister: csiNodeInf.Lister(),
			VALister:      vaInf.Lister(),
			Recorder:      e.recorder,
		}
		if cfg.attacher != nil {
			hc.Attacher = cfg.attacher
		}
		if cfg.listVolumes {
			e.lister = &fakeLister{}
			hc.Lister = e.lister
		}
		if !cfg.noFencingAPI {
			hc.FencingRequests = trackerFRLister{e.dyn}
			hc.FenceRecord = fencerecord.NewRecorder(fencingv1alpha1.NewClient(e.dyn))
		}
		h, err := NewCSIHandler(hc)
		if err != nil {
			t.Fatal(err)
		}
		e.handler = h
	}
	// A backoff of an hour: an item that was AddRateLimited stays out of the
	// queue for the whole test, and NumRequeues tells it from a Forget.
	ctrl, err := NewController(klog.FromContext(ctx), ControllerConfig{
		DriverName:    drv,
		Handler:       e.handler,
		VAInformer:    vaInf,
		PVInformer:    pvInf,
		NodeInformer:  nodeInf,
		VARateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
		PVRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = ctrl
	t.Cleanup(func() { ctrl.vaQueue.ShutDown(); ctrl.pvQueue.ShutDown() })
	e.refreshCaches()
	e.client.ClearActions()
	e.dyn.ClearActions()
	return e
}

// refreshCaches fills the informer caches with what the fake API holds now,
// as the informers would by the time of the next sync.
func (e *env) refreshCaches() {
	e.t.Helper()
	ctx, opts := e.ctx, metav1.ListOptions{}
	var lists []struct {
		inf  cache.SharedIndexInformer
		list runtime.Object
		err  error
	}
	add := func(inf cache.SharedIndexInformer, list runtime.Object, err error) {
		lists = append(lists, struct {
			inf  cache.SharedIndexInformer
			list runtime.Object
			err  error
		}{inf, list, err})
	}
	vas, err := e.client.StorageV1().VolumeAttachments().List(ctx, opts)
	add(e.factory.Storage().V1().VolumeAttachments().Informer(), vas, err)
	pvs, err := e.client.CoreV1().PersistentVolumes().List(ctx, opts)
	add(e.factory.Core().V1().PersistentVolumes().Informer(), pvs, err)
	nodes, err := e.client.CoreV1().Nodes().List(ctx, opts)
	add(e.factory.Core().V1().Nodes().Informer(), nodes, err)
	csiNodes, err := e.client.StorageV1().CSINodes().List(ctx, opts)
	add(e.factory.Storage().V1().CSINodes().Informer(), csiNodes, err)
	for _, l := range lists {
		if l.err != nil {
			e.t.Fatalf("listing: %v", l.err)
		}
		items, err := meta.ExtractList(l.list)
		if err != nil {
			e.t.Fatal(err)
		}
		objs := make([]any, len(items))
		for i := range items {
			objs[i] = items[i]
		}
		if err := l.inf.GetIndexer().Replace(objs, ""); err != nil {
			e.t.Fatal(err)
		}
	}
}

// syncVA runs one sync of the named VA, as a worker would.
func (e *env) syncVA(name string) {
	e.refreshCaches()
	e.ctrl.vaQueue.Add(name)
	e.ctrl.syncVA(e.ctx)
}

func (e *env) syncPV(name string) {
	e.refreshCaches()
	e.ctrl.pvQueue.Add(name)
	e.ctrl.syncPV(e.ctx)
}

// drainVAs syncs every VA waiting in the queue (not the rate-limited ones).
func (e *env) drainVAs() {
	for e.ctrl.vaQueue.Len() > 0 {
		e.refreshCaches()
		e.ctrl.syncVA(e.ctx)
	}
}

func (e *env) getVA(name string) *storagev1.VolumeAttachment {
	e.t.Helper()
	v, err := e.client.StorageV1().VolumeAttachments().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("VolumeAttachment %s: %v", name, err)
	}
	return v
}

func (e *env) getPV(name string) *v1.PersistentVolume {
	e.t.Helper()
	p, err := e.client.CoreV1().PersistentVolumes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("PersistentVolume %s: %v", name, err)
	}
	return p
}

func (e *env) getFR(name string) *fencingv1alpha1.FencingRequest {
	e.t.Helper()
	fr, err := trackerFRLister{e.dyn}.Get(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return fr
}

// actions returns the API writes and direct reads of the test, one line
// each: "verb resource[/subresource] [namespace/]name". Lists and watches
// are the informers' business and are left out.
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
		case clienttesting.PatchAction:
			name = x.GetName()
		case clienttesting.CreateAction:
			if m, err := meta.Accessor(x.GetObject()); err == nil {
				name = m.GetName()
			}
		case clienttesting.GetAction:
			name = x.GetName()
		case clienttesting.DeleteAction:
			name = x.GetName()
		}
		if ns := a.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		out = append(out, a.GetVerb()+" "+res+" "+name)
	}
	return out
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
func counter(t *testing.T, vec *metrics.CounterVec, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(vec.WithLabelValues(drv, reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ---- the table runner ----

type step struct {
	syncVA    string
	syncPV    string
	reconcile map[string][]string // run ReconcileVA with this ListVolumes answer, then the queued VAs
}

type testCase struct {
	name string
	envConfig
	// What happens: a single sync of syncVA (or syncPV), or steps.
	syncVA string
	syncPV string
	steps  []step
	// What must have happened.
	actions   []string // kube API actions, in order
	frActions []string // FencingRequest API actions, in order; nil: none
	requeued  bool     // the synced item was AddRateLimited (else Forgotten)
	events    []string // prefixes ("Normal FencedUnpublish"), in order
	// errContains: the VA's attachError or detachError contains each.
	errContains []string
	// metricDeltas: "metric/reason" -> how much the counter must grow.
	metricDeltas map[string]float64
	check        func(t *testing.T, e *env)
}

var fenceMetrics = map[string]*metrics.CounterVec{
	"fenced_unpublishes_total":      fencedUnpublishes,
	"fenced_unpublish_errors_total": fencedUnpublishErrors,
	"forced_detaches_total":         forcedDetaches,
	"unfenced_detaches_total":       unfencedDetaches,
}

func metricValues(t *testing.T, keys map[string]float64) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k := range keys {
		name, reason, _ := strings.Cut(k, "/")
		vec, ok := fenceMetrics[name]
		if !ok {
			t.Fatalf("unknown metric %q", name)
		}
		out[k] = counter(t, vec, reason)
	}
	return out
}

func runTests(t *testing.T, tests []testCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.envConfig.csiCalls = append([]csiCall(nil), tc.envConfig.csiCalls...)
			e := newEnv(t, tc.envConfig)
			before := metricValues(t, tc.metricDeltas)
			steps := tc.steps
			if tc.syncVA != "" || tc.syncPV != "" {
				steps = append(steps, step{syncVA: tc.syncVA, syncPV: tc.syncPV})
			}
			for _, s := range steps {
				switch {
				case s.reconcile != nil:
					e.refreshCaches()
					e.lister.published = s.reconcile
					if err := e.handler.ReconcileVA(e.ctx); err != nil {
						t.Fatalf("ReconcileVA: %v", err)
					}
					e.drainVAs()
				case s.syncVA != "":
					e.syncVA(s.syncVA)
				case s.syncPV != "":
					e.syncPV(s.syncPV)
				}
			}
			if got := actions(e.client.Actions()); !reflect.DeepEqual(got, tc.actions) {
				t.Errorf("API actions:\n  got  %q\n  want %q", got, tc.actions)
			}
			if got := actions(e.dyn.Actions()); !reflect.DeepEqual(got, tc.frActions) {
				t.Errorf("FencingRequest actions:\n  got  %q\n  want %q", got, tc.frActions)
			}
			item, queue := tc.syncVA, e.ctrl.vaQueue
			if tc.syncPV != "" {
				item, queue = tc.syncPV, e.ctrl.pvQueue
			}
			if item != "" {
				if got := queue.NumRequeues(item) > 0; got != tc.requeued {
					t.Errorf("requeued with backoff = %v, want %v", got, tc.requeued)
				}
			}
			evs := e.events()
			if len(evs) != len(tc.events) {
				t.Errorf("events %q, want %q", evs, tc.events)
			} else {
				for i := range evs {
					if !strings.HasPrefix(evs[i], tc.events[i]) {
						t.Errorf("event %q, want %q...", evs[i], tc.events[i])
					}
				}
			}
			if len(tc.errContains) > 0 {
				v := e.getVA(tc.syncVA)
				msg := ""
				if v.Status.AttachError != nil {
					msg += v.Status.AttachError.Message
				}
				if v.Status.DetachError != nil {
					msg += v.Status.DetachError.Message
				}
				for _, s := range tc.errContains {
					if !strings.Contains(msg, s) {
						t.Errorf("VA error %q does not contain %q", msg, s)
					}
				}
			}
			after := metricValues(t, tc.metricDeltas)
			for k, want := range tc.metricDeltas {
				if got := after[k] - before[k]; got != want {
					t.Errorf("metric %s grew by %v, want %v", k, got, want)
				}
			}
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}
