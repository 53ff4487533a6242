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

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

const (
	testDriver = "fence.csi-fence.io"
	testNode   = "node-1"
	// waitTimeout bounds every wait for a condition.
	waitTimeout = 30 * time.Second
)

func TestMain(m *testing.M) {
	RegisterMetrics()
	os.Exit(m.Run())
}

// env is one node: a kubelet directory, the FencingRequest API (fake), an
// event recorder and, optionally, a real mock node plugin on a unix socket.
type env struct {
	t        testing.TB
	ctx      context.Context
	layout   kubeletlayout.Layout
	dyn      *dynamicfake.FakeDynamicClient
	records  *fencingv1alpha1.Client
	recorder *record.FakeRecorder
	mounts   *fakeMounts

	// The mock driver, when started.
	arr    *array.Array
	faults *faults.Store
	conn   *grpc.ClientConn
	sock   string
	// nodeID is the CSI node ID the mock node plugin reports, under which
	// volumes are published and fenced; testNode unless a test says.
	nodeID string
	// csiNodes holds the CSINodes the agent reads (Options.CSINodes).
	csiNodes *kubefake.Clientset

	events []string
	// writes counts the FencingRequest writes the fake API answered.
	writes *writeCounts
	// interceptor, when set before the mock driver is served, runs before
	// each of its calls.
	interceptor grpc.UnaryServerInterceptor
	// unmounts records what the agent unmounted itself (Options.Unmounter).
	unmounts *fakeUnmounter
}

// writeCounts counts the writes of FencingRequests (the object or its
// status) the fake API was asked for, and those it refused with a conflict.
type writeCounts struct {
	writes, conflicts, gets atomic.Int64
}

func newEnv(t testing.TB) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	root := t.TempDir()
	for _, d := range []string{"pods", "plugins"} { // as the kubelet creates them at start
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	writes := &writeCounts{}
	compareAndSwap(dyn, writes)
	mounts := &fakeMounts{paths: map[string]bool{}}
	return &env{
		t: t, ctx: ctx, layout: kubeletlayout.New(root), dyn: dyn, records: fencingv1alpha1.NewClient(dyn),
		recorder: record.NewFakeRecorder(1000), mounts: mounts,
		nodeID: testNode, csiNodes: kubefake.NewClientset(), writes: writes,
		unmounts: &fakeUnmounter{mounts: mounts},
	}
}

// socketDir returns a short directory for unix sockets (108-byte limit).
func socketDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startMockDriver serves the project's mock node plugin in-process, on a
// simulated array, with run-time fault injection.
func (e *env) startMockDriver(cfg driver.Config) {
	e.t.Helper()
	state := e.t.TempDir()
	var err error
	if e.arr, err = array.Open(state); err != nil {
		e.t.Fatal(err)
	}
	e.faults = faults.NewStore(state)
	e.serveMockDriver(cfg)
}

// serveMockDriver serves a node plugin instance reporting e.nodeID on the
// array already open, and points e.conn at it: a plugin that restarted,
// possibly under another node ID, beside the one before.
func (e *env) serveMockDriver(cfg driver.Config) {
	e.t.Helper()
	cfg.Name, cfg.NodeID = testDriver, e.nodeID
	d := driver.New(cfg, e.arr)
	interceptors := []grpc.UnaryServerInterceptor{e.faults.Interceptor()}
	if e.interceptor != nil {
		interceptors = append([]grpc.UnaryServerInterceptor{e.interceptor}, interceptors...)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	e.sock = filepath.Join(socketDir(e.t), "csi.sock")
	lis, err := net.Listen("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	e.t.Cleanup(srv.Stop)
	e.dial()
}

func (e *env) dial() {
	e.t.Helper()
	conn, err := grpc.NewClient("unix://"+e.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	e.conn = conn
}

func (e *env) node() csi.NodeClient { return csi.NewNodeClient(e.conn) }

// attach creates a volume on the array and publishes it to the node, as the
// attacher's ControllerPublishVolume would.
func (e *env) attach(handle string) {
	e.t.Helper()
	if err := e.arr.AddVolume(handle, 1<<30); err != nil {
		e.t.Fatal(err)
	}
	if err := e.arr.Publish(handle, e.nodeID, true, false, array.Options{}); err != nil {
		e.t.Fatal(err)
	}
}

// fence fences the volume on the node, as ControllerUnpublishVolume(fence)
// would, and records it, as the attacher does.
func (e *env) fence(handle, pv string) {
	e.t.Helper()
	if err := e.arr.Unpublish(handle, e.nodeID, true, array.Options{}); err != nil {
		e.t.Fatal(err)
	}
	e.record(handle, pv)
}

// fenceAll fences the volumes on the node at once, as the failover does,
// with one write of their intents and one of their outcomes. pvs[i] is the
// PV of handles[i].
func (e *env) fenceAll(handles, pvs []string) {
	e.t.Helper()
	vols := make([]fencingv1alpha1.FencedVolume, len(handles))
	for i, h := range handles {
		vols[i] = fencingv1alpha1.FencedVolume{Driver: testDriver, VolumeHandle: h, PersistentVolumeName: pvs[i], NodeID: e.nodeID}
	}
	errs, err := fencerecord.Fence(e.ctx, e.records, testNode, "NodeUnreachable", vols, func(_ context.Context, v fencingv1alpha1.FencedVolume) error {
		return e.arr.Unpublish(v.VolumeHandle, e.nodeID, true, array.Options{})
	})
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) record(handle, pv string) {
	e.t.Helper()
	if err := fencerecord.RecordFenced(e.ctx, e.records, testNode, "NodeUnreachable", fencingv1alpha1.FencedVolume{
		Driver: testDriver, VolumeHandle: handle, PersistentVolumeName: pv, NodeID: e.nodeID,
	}); err != nil {
		e.t.Fatal(err)
	}
}

var mountCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

var blockCap = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

// mount stages (when stage is true) and publishes a filesystem volume to
// pods through the mock plugin, laying out the kubelet directory as the
// kubelet does.
func (e *env) mount(handle, pv string, stage bool, pods ...string) {
	e.t.Helper()
	staging := ""
	if stage {
		var err error
		if staging, err = e.layout.PrepareStage(testDriver, handle); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.node().NodeStageVolume(e.ctx, &csi.NodeStageVolumeRequest{VolumeId: handle, StagingTargetPath: staging, VolumeCapability: mountCap}); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, uid := range pods {
		target, err := e.layout.PreparePublish(uid, pv, kubeletlayout.VolumeData{VolumeHandle: handle, DriverName: testDriver, NodeName: testNode})
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.node().NodePublishVolume(e.ctx, &csi.NodePublishVolumeRequest{VolumeId: handle, StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// mapBlock stages and publishes a block volume to pods and maps it, as the
// kubelet does.
func (e *env) mapBlock(handle, pv string, pods ...string) {
	e.t.Helper()
	if err := e.layout.PrepareBlock(pv, kubeletlayout.VolumeData{VolumeHandle: handle, DriverName: testDriver, NodeName: testNode}); err != nil {
		e.t.Fatal(err)
	}
	staging, err := e.layout.PrepareBlockStage(pv)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.node().NodeStageVolume(e.ctx, &csi.NodeStageVolumeRequest{VolumeId: handle, StagingTargetPath: staging, VolumeCapability: blockCap}); err != nil {
		e.t.Fatal(err)
	}
	for _, uid := range pods {
		target, err := e.layout.PrepareBlockPublish(pv, uid)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.node().NodePublishVolume(e.ctx, &csi.NodePublishVolumeRequest{VolumeId: handle, StagingTargetPath: staging, TargetPath: target, VolumeCapability: blockCap}); err != nil {
			e.t.Fatal(err)
		}
		if err := e.layout.MapBlockDevice(pv, uid); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) options() Options {
	return Options{
		DriverName: testDriver, NodeName: testNode, KubeletDir: e.layout.Root,
		Conn: e.conn, Dynamic: e.dyn, CSINodes: e.csiNodes.StorageV1().CSINodes(), CSIDrivers: e.csiNodes.StorageV1().CSIDrivers(),
		Recorder: e.recorder, Mounts: e.mounts, Unmounter: e.unmounts,
		Timeout: 5 * time.Second, RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 200 * time.Millisecond,
	}
}

// run starts an agent and stops it at the end of the test.
func (e *env) run(opts Options) *Agent {
	e.t.Helper()
	a, stop := e.start(opts)
	e.t.Cleanup(stop)
	return a
}

// start starts an agent; stop stops it and waits until it has stopped.
func (e *env) start(opts Options) (a *Agent, stop func()) {
	e.t.Helper()
	a, err := New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.Run(ctx) }()
	return a, func() { cancel(); wg.Wait() }
}

// entry returns the record of handle.
func (e *env) entry(handle string) *fencingv1alpha1.FencedVolume {
	fr, err := e.records.Get(e.ctx, testNode)
	if err != nil {
		return nil
	}
	return fencerecord.Find(fr, testDriver, handle)
}

// waitFor waits until cond holds, failing the test after waitTimeout.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		e.t.Fatalf("timed out waiting for %s; events: %v", what, e.drainEvents())
	}
}

func (e *env) waitCleaned(handle string) {
	e.t.Helper()
	e.waitFor(handle+" recorded clean", func() bool {
		v := e.entry(handle)
		return v != nil && v.CleanedTime != nil && v.CleanupError == ""
	})
}

func (e *env) waitCleanupError(handle, contains string) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("a cleanup error of %s containing %q", handle, contains), func() bool {
		v := e.entry(handle)
		return v != nil && strings.Contains(v.CleanupError, contains)
	})
	if v := e.entry(handle); v.CleanedTime != nil {
		e.t.Errorf("%s recorded clean despite %q", handle, v.CleanupError)
	}
}

// drainEvents returns every event recorded so far (also those of earlier
// calls).
func (e *env) drainEvents() []string {
	for {
		select {
		case ev := <-e.recorder.Events:
			e.events = append(e.events, ev)
		default:
			return e.events
		}
	}
}

func (e *env) hasEvent(prefix string) bool {
	for _, ev := range e.drainEvents() {
		if strings.HasPrefix(ev, prefix) {
			return true
		}
	}
	return false
}

// publication returns the array's view of handle on the node (nil: none).
func (e *env) publication(handle string) *array.Publication {
	e.t.Helper()
	return e.publicationOn(handle, e.nodeID)
}

// publicationOn returns the array's view of handle on the node ID (nil:
// none).
func (e *env) publicationOn(handle, nodeID string) *array.Publication {
	e.t.Helper()
	s, err := e.arr.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	v := s.Volumes[handle]
	if v == nil {
		return nil
	}
	return v.Publications[nodeID]
}

func (e *env) violations() map[string]int {
	e.t.Helper()
	s, err := e.arr.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	return s.CountViolations()
}

func mustExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s should be left alone: %v", p, err)
		}
	}
}

func mustBeGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s should be removed: %v", p, err)
		}
	}
}

// detach takes the volume away from the node with a plain
// ControllerUnpublishVolume of a driver whose detach revokes access (the
// mock's DetachRevokes), and records it as the fence, as the controller
// does for a driver declared so.
func (e *env) detach(handle, pv string) {
	e.t.Helper()
	if err := e.arr.Unpublish(handle, e.nodeID, false, array.Options{PlainUnpublish: array.PlainUnpublishDetach}); err != nil {
		e.t.Fatal(err)
	}
	e.record(handle, pv)
}

// declare creates the driver's CSIDriver, with the unpublish-revokes-access
// annotation set to value ("": without it).
func (e *env) declare(value string) {
	e.t.Helper()
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}}
	if value != "" {
		d.Annotations = map[string]string{contract.UnpublishRevokesAccessAnnotation: value}
	}
	if _, err := e.csiNodes.StorageV1().CSIDrivers().Create(e.ctx, d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// fakeUnmounter unmounts in fakeMounts: the path stops being a mount point,
// and what the mock node plugin lays out in place of a file system (its
// marker file) goes with the mount.
type fakeUnmounter struct {
	mounts *fakeMounts
	mu     sync.Mutex
	paths  []string
}

func (f *fakeUnmounter) Unmount(p string) error {
	f.mu.Lock()
	f.paths = append(f.paths, p)
	f.mu.Unlock()
	f.mounts.set(p, false)
	if err := os.Remove(filepath.Join(p, driver.MarkerName)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (f *fakeUnmounter) unmounted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

// fakeMounts is a MountChecker over a set of mount points.
type fakeMounts struct {
	mu    sync.Mutex
	paths map[string]bool
}

func (f *fakeMounts) IsMountPoint(p string) (bool, error) {
	if _, err := os.Lstat(p); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paths[p], nil
}

func (f *fakeMounts) set(p string, mounted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths[p] = mounted
}

func counter(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(cleanups.WithLabelValues(testDriver, result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func recordErrorCount(t *testing.T, op string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(recordErrors.WithLabelValues(testDriver, op))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// denyAll fails every call it reacts to, as RBAC would.
func denyAll(action k8stesting.Action) (bool, runtime.Object, error) {
	return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", fmt.Errorf("denied by the test"))
}

// compareAndSwap makes the fake apiserver do what the real one does with
// an update of a FencingRequest (or its status): it fails with a conflict
// unless it carries the object's current resourceVersion, and bumps it. The
// agent's workers write one record concurrently: without it, a write from
// a stale read would silently undo another's (a cleanup done twice).
func compareAndSwap(dyn *dynamicfake.FakeDynamicClient, counts *writeCounts) {
	var mu sync.Mutex
	dyn.PrependReactor("get", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		counts.gets.Add(1)
		return false, nil, nil // answered by the tracker
	})
	dyn.PrependReactor("update", "fencingrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		counts.writes.Add(1)
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		cur, err := dyn.Tracker().Get(a.GetResource(), obj.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		curRV := cur.(*unstructured.Unstructured).GetResourceVersion()
		if curRV != obj.GetResourceVersion() {
			counts.conflicts.Add(1)
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), obj.GetName(), errors.New("the object has been modified"))
		}
		rv, _ := strconv.Atoi(curRV)
		obj.SetResourceVersion(strconv.Itoa(rv + 1))
		return true, obj, dyn.Tracker().Update(a.GetResource(), obj, obj.GetNamespace())
	})
}
