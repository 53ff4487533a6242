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

package sidecar

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	upstreamattacher "github.com/kubernetes-csi/external-attacher/v4/pkg/attacher"
	"github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	"go.uber.org/mock/gomock"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

const drv = "fence.csi.example.com"

func TestAttacherModeFrom(t *testing.T) {
	ctrl := func(types ...csi.ControllerServiceCapability_RPC_Type) rpc.ControllerCapabilitySet {
		s := rpc.ControllerCapabilitySet{}
		for _, c := range types {
			s[c] = true
		}
		return s
	}
	withController := rpc.PluginCapabilitySet{csi.PluginCapability_Service_CONTROLLER_SERVICE: true}
	publish := csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
	tests := []struct {
		name   string
		plugin rpc.PluginCapabilitySet
		ctrl   rpc.ControllerCapabilitySet
		want   AttacherMode
	}{
		{name: "no controller service: trivial", plugin: rpc.PluginCapabilitySet{}, ctrl: nil, want: AttacherMode{}},
		{name: "controller without publish: trivial", plugin: withController, ctrl: ctrl(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), want: AttacherMode{}},
		{name: "publish capability without the controller service: trivial", plugin: rpc.PluginCapabilitySet{}, ctrl: ctrl(publish), want: AttacherMode{}},
		{name: "fence without publish is meaningless: trivial", plugin: withController, ctrl: ctrl(fence.ControllerUnpublishFence), want: AttacherMode{}},
		{name: "publish only", plugin: withController, ctrl: ctrl(publish), want: AttacherMode{CSIHandler: true}},
		{name: "everything", plugin: withController, ctrl: ctrl(publish, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
			csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER, csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
			csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES, fence.ControllerUnpublishFence),
			want: AttacherMode{CSIHandler: true, Reconcile: true, PublishReadOnly: true, SingleNodeMultiWriter: true, Fence: true}},
		{name: "LIST_VOLUMES alone does not enable the reconciler", plugin: withController, ctrl: ctrl(publish, csi.ControllerServiceCapability_RPC_LIST_VOLUMES), want: AttacherMode{CSIHandler: true}},
		{name: "PR 477's own numbers are not the fence (14 is MODIFY_VOLUME, 7 GET_VOLUME)", plugin: withController, ctrl: ctrl(publish, 14, 7), want: AttacherMode{CSIHandler: true}},
		{name: "garbage values are ignored", plugin: withController, ctrl: ctrl(publish, 999, -1, 0), want: AttacherMode{CSIHandler: true}},
	}
	for _, tc := range tests {
		if got := AttacherModeFrom(tc.plugin, tc.ctrl); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A driver answering with garbage (empty entries, entries without a type,
// values no spec defines) is read without a crash, through the same
// csi-lib-utils calls main uses.
func TestAttacherModeFromGarbageDriver(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mc := gomock.NewController(t)
	identity := driver.NewMockIdentityServer(mc)
	controller := driver.NewMockControllerServer(mc)
	identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(&csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{},
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: 77}}},
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: 42}}},
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
	}}, nil)
	controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(&csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{
		{},
		{Type: &csi.ControllerServiceCapability_Rpc{}},
		{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: 31337}}},
		{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}}},
		{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: fence.ControllerUnpublishFence}}},
		{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: fence.ControllerUnpublishFence}}},
	}}, nil)
	d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{Identity: identity, Controller: controller})
	sock := filepath.Join(t.TempDir(), "csi.sock")
	if err := d.StartOnAddress("unix", sock); err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	conn, err := connection.Connect(ctx, sock, metrics.NewCSIMetricsManager(drv))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	plugin, err := rpc.GetPluginCapabilities(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	ctrlCaps, err := rpc.GetControllerCapabilities(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	want := AttacherMode{CSIHandler: true, Fence: true}
	if got := AttacherModeFrom(plugin, ctrlCaps); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

func frAPI() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{{
		GroupVersion: fencingv1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: contract.FencingResource}, {Name: contract.FencingResource + "/status"}},
	}}
}

func TestFencingRequestsServed(t *testing.T) {
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		err       error
		want      bool
		wantErr   bool
	}{
		{name: "served", resources: frAPI(), want: true},
		{name: "group not served", resources: nil, want: false},
		{name: "group served without the resource", resources: []*metav1.APIResourceList{{GroupVersion: fencingv1alpha1.SchemeGroupVersion.String()}}, want: false},
		{name: "discovery fails", err: errors.New("connection refused"), wantErr: true},
	}
	for _, tc := range tests {
		client := fake.NewSimpleClientset()
		client.Resources = tc.resources
		if tc.err != nil {
			client.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
		}
		got, err := FencingRequestsServed(client.Discovery())
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %v, %v", tc.name, got, err)
		}
	}
}

// fakeDriver records the calls NewAttacher's controller makes and lists
// what it published, as a driver would. It serves external-attacher's
// attacher and lister, and (fenceDriver) the fenced unpublish.
type fakeDriver struct {
	mu        sync.Mutex
	calls     []string
	published map[string][]string
}

var (
	_ upstreamattacher.Attacher = &fakeDriver{}
	_ controller.VolumeLister   = &fakeDriver{}
	_ csiclient.Attacher        = fenceDriver{}
)

func (f *fakeDriver) clients() CSIClients {
	return CSIClients{Attacher: f, Lister: f, Fence: fenceDriver{f}}
}

func (f *fakeDriver) Attach(_ context.Context, vol string, _ bool, node string, _ *csi.VolumeCapability, _, _ map[string]string) (map[string]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "attach "+vol+" "+node)
	if f.published == nil {
		f.published = map[string][]string{}
	}
	if !slices.Contains(f.published[vol], node) {
		f.published[vol] = append(f.published[vol], node)
	}
	return nil, false, nil
}

func (f *fakeDriver) Detach(_ context.Context, vol, node string, _ map[string]string) error {
	f.unpublish("detach "+vol+" "+node, vol, node)
	return nil
}

func (f *fakeDriver) unpublish(call, vol, node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	f.published[vol] = slices.DeleteFunc(f.published[vol], func(n string) bool { return n == node })
}

func (f *fakeDriver) ListVolumes(context.Context) (map[string][]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for v, nodes := range f.published {
		out[v] = slices.Clone(nodes)
	}
	return out, nil
}

// seen returns the calls made, a call repeated at once counted once:
// external-attacher may publish again when its cache has not caught up
// with its own status write yet (publish is idempotent).
func (f *fakeDriver) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Compact(slices.Clone(f.calls))
}

type fenceDriver struct{ *fakeDriver }

func (f fenceDriver) Attach(context.Context, csiclient.AttachRequest) (map[string]string, error) {
	return nil, errors.New("the fence client publishes nothing")
}

func (f fenceDriver) Detach(_ context.Context, vol, node string, _ map[string]string, fenced bool) error {
	s := "detach " + vol + " " + node
	if fenced {
		s += " fence"
	}
	f.unpublish(s, vol, node)
	return nil
}

func testObjects(nodeID string) []runtime.Object {
	pvName := "pv1"
	return []runtime.Object{
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}},
		&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: drv, NodeID: nodeID}}}},
		&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: v1.PersistentVolumeSpec{
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: "vol-1"}},
		}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va1"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: drv, NodeName: "node-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName},
		}},
	}
}

func waitVA(t *testing.T, ctx context.Context, client *fake.Clientset, what string, cond func(*storagev1.VolumeAttachment) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		va, err := client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
		return err == nil && cond(va), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// start runs the attacher NewAttacher made until ctx is done; the channel
// closes when it returned.
func start(ctx context.Context, run func(context.Context)) <-chan struct{} {
	done := make(chan struct{})
	go func() { run(ctx); close(done) }()
	return done
}

// attachThenDelete waits until va1 is attached, deletes it as the ADC
// does (a deletionTimestamp under its finalizer) and waits until it is
// detached.
func attachThenDelete(t *testing.T, ctx context.Context, client *fake.Clientset) {
	t.Helper()
	waitVA(t, ctx, client, "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached })
	va, _ := client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
	now := metav1.Now()
	va.DeletionTimestamp = &now
	if _, err := client.StorageV1().VolumeAttachments().Update(ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVA(t, ctx, client, "detached", func(va *storagev1.VolumeAttachment) bool { return len(va.Finalizers) == 0 })
}

// NewAttacher wires informers (including the dynamic FencingRequest one),
// the CSI handler, the fence pool and the controller: a VA is attached,
// then detached with a fence as its node is NotReady, and the fence is
// recorded. With --disable-fencing it is external-attacher's controller
// unchanged: the same detach is a plain unpublish, nothing recorded.
func TestNewAttacherFencesAndRecords(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(map[bool]string{false: "fencing", true: "disable-fencing"}[disabled], func(t *testing.T) {
			testNewAttacherFences(t, disabled)
		})
	}
}

func testNewAttacherFences(t *testing.T, disabled bool) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	objects := testObjects("node-1-id")
	objects[0].(*v1.Node).Status.Conditions[0].Status = v1.ConditionUnknown
	client := fake.NewSimpleClientset(objects...)
	client.Resources = frAPI()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	d := &fakeDriver{}
	args := []string{"--retry-interval-start=10ms", "--retry-interval-max=100ms", "--worker-threads=2"}
	if disabled {
		args = append(args, "--disable-fencing")
	}
	opts, _ := parse(t, args...)
	run, err := NewAttacher(ctx, AttacherDeps{
		DriverName: drv, Options: opts, Client: client, Dynamic: dyn, CSI: d.clients(), Access: FullAccess,
		Mode: AttacherMode{CSIHandler: true, Reconcile: true, Fence: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := start(ctx, run)
	// The node is NotReady from the start (attach does not mind; only a
	// quarantine would stop it), so that the detach is non-graceful however
	// late the informers are.
	attachThenDelete(t, ctx, client)
	calls := d.seen()
	want := []string{"attach vol-1 node-1-id", "detach vol-1 node-1-id fence"}
	if disabled {
		want[1] = "detach vol-1 node-1-id"
	}
	if !slices.Equal(calls, want) {
		t.Errorf("driver calls %q, want %q", calls, want)
	}
	fr, err := fencingv1alpha1.NewClient(dyn).Get(ctx, "node-1")
	if disabled && !apierrors.IsNotFound(err) {
		t.Errorf("--disable-fencing wrote a FencingRequest: %+v, %v", fr, err)
	}
	if !disabled && (err != nil || !fencerecord.IsFenced(fr, drv, "vol-1")) {
		t.Errorf("fence not recorded: %+v, %v", fr, err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the attacher did not stop")
	}
}

// Fence by detach (issue 37), wired: a driver without UNPUBLISH_FENCE whose
// CSIDriver declares that its unpublish revokes access has the same detach
// from a NotReady node sent as a plain unpublish and recorded as a fence;
// undeclared, it is a plain unpublish and nothing is recorded.
func TestNewAttacherFencesByDetach(t *testing.T) {
	for _, declared := range []bool{true, false} {
		t.Run(map[bool]string{true: "declared", false: "not declared"}[declared], func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			objects := testObjects("node-1-id")
			objects[0].(*v1.Node).Status.Conditions[0].Status = v1.ConditionUnknown
			csiDriver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: drv}}
			if declared {
				csiDriver.Annotations = map[string]string{contract.UnpublishRevokesAccessAnnotation: contract.UnpublishRevokesAccessTrue}
			}
			client := fake.NewSimpleClientset(append(objects, csiDriver)...)
			client.Resources = frAPI()
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
			d := &fakeDriver{}
			opts, _ := parse(t, "--retry-interval-start=10ms", "--retry-interval-max=100ms", "--worker-threads=2")
			run, err := NewAttacher(ctx, AttacherDeps{
				DriverName: drv, Options: opts, Client: client, Dynamic: dyn, CSI: d.clients(), Access: FullAccess,
				Mode: AttacherMode{CSIHandler: true, Reconcile: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			done := start(ctx, run)
			attachThenDelete(t, ctx, client)
			if want := []string{"attach vol-1 node-1-id", "detach vol-1 node-1-id"}; !slices.Equal(d.seen(), want) {
				t.Errorf("driver calls %q, want %q", d.seen(), want)
			}
			fr, err := fencingv1alpha1.NewClient(dyn).Get(ctx, "node-1")
			if declared && (err != nil || !fencerecord.IsFenced(fr, drv, "vol-1")) {
				t.Errorf("the plain unpublish of a declared driver was not recorded as a fence: %+v, %v", fr, err)
			}
			if !declared && !apierrors.IsNotFound(err) {
				t.Errorf("an undeclared driver's plain unpublish was recorded: %+v, %v", fr, err)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the attacher did not stop")
			}
		})
	}
}

func TestNewAttacherTrivial(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewSimpleClientset(testObjects("node-1-id")...)
	opts, _ := parse(t)
	run, err := NewAttacher(ctx, AttacherDeps{DriverName: drv, Options: opts, Client: client, Mode: AttacherMode{}})
	if err != nil {
		t.Fatal(err)
	}
	done := start(ctx, run)
	waitVA(t, ctx, client, "attached", func(va *storagev1.VolumeAttachment) bool { return va.Status.Attached && len(va.Finalizers) == 0 })
	cancel()
	<-done
}

func TestNewAttacherRejectsIncompleteDeps(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	opts, _ := parse(t)
	for name, d := range map[string]AttacherDeps{
		"no options":          {DriverName: drv, Client: fake.NewSimpleClientset()},
		"no driver name":      {Options: opts, Client: fake.NewSimpleClientset()},
		"publish without CSI": {DriverName: drv, Options: opts, Client: fake.NewSimpleClientset(), Mode: AttacherMode{CSIHandler: true}},
	} {
		if _, err := NewAttacher(ctx, d); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// With nothing but external-attacher's RBAC (Access{}: Nodes,
// FencingRequests and Events forbidden), the attacher attaches and detaches
// as external-attacher does, a detach from a NotReady node included, and
// starts no informer it may not list: its caches sync.
func TestNewAttacherWithStockRBAC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	objects := testObjects("node-1-id")
	objects[0].(*v1.Node).Status.Conditions[0].Status = v1.ConditionFalse
	client := fake.NewSimpleClientset(objects...)
	client.Resources = frAPI()
	forbidden := func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("stock RBAC"))
	}
	for _, verb := range []string{"get", "list", "watch", "create", "patch", "update"} {
		client.PrependReactor(verb, "nodes", forbidden)
		client.PrependReactor(verb, "events", forbidden)
	}
	client.PrependWatchReactor("nodes", func(a clienttesting.Action) (bool, watch.Interface, error) {
		_, _, err := forbidden(a)
		return true, nil, err
	})
	d := &fakeDriver{}
	health := NewSyncHealth()
	opts, _ := parse(t, "--retry-interval-start=10ms", "--retry-interval-max=100ms", "--worker-threads=2")
	run, err := NewAttacher(ctx, AttacherDeps{
		DriverName: drv, Options: opts, Client: client, CSI: d.clients(), Access: Access{}, Health: health,
		Mode: AttacherMode{CSIHandler: true, Reconcile: true, Fence: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := start(ctx, run)
	attachThenDelete(t, ctx, client)
	if calls := d.seen(); !slices.Equal(calls, []string{"attach vol-1 node-1-id", "detach vol-1 node-1-id"}) {
		t.Errorf("driver calls %q, want a publish and a plain unpublish", calls)
	}
	if unsynced, leading := health.status(); len(unsynced) > 0 || leading == 0 {
		t.Errorf("health: unsynced %q, leading for %v", unsynced, leading)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the attacher did not stop")
	}
}
