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

package kubeletsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/pkg/nodeagent"
)

const (
	drv         = "fence.csi-fence.io"
	nodeName    = "node-1"
	waitTimeout = 30 * time.Second
)

// call is one node RPC the plugin served.
type call struct {
	method string
	volume string // the volume ID of the request
	force  bool
	err    error
}

type env struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	arr    *array.Array
	conn   *grpc.ClientConn
	root   string
	layout kubeletlayout.Layout

	mu    sync.Mutex
	calls []call
}

func newEnv(t *testing.T, cfg driver.Config) *env {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, root: t.TempDir()}
	e.layout = kubeletlayout.New(e.root)
	var err error
	if e.arr, err = array.Open(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.NodeID = drv, nodeName
	d := driver.New(cfg, e.arr)
	srv := grpc.NewServer(grpc.UnaryInterceptor(e.spy))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	sockDir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	lis, err := net.Listen("unix", filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	// GracefulStop, not Stop: a test may end while the driver still
	// handles an RPC the stopped kubelet gave up on (a NodePublish making
	// its target directory); the test's directories are removed only once
	// every handler has returned.
	t.Cleanup(srv.GracefulStop)
	if e.conn, err = grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close() })
	e.client = fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})
	return e
}

// spy records every node RPC with its force bit and result.
func (e *env) spy(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (interface{}, error) {
	rsp, err := h(ctx, req)
	c := call{method: filepath.Base(info.FullMethod), err: err}
	if r, ok := req.(interface{ GetVolumeId() string }); ok {
		c.volume = r.GetVolumeId()
	}
	switch r := req.(type) {
	case *csi.NodeUnpublishVolumeRequest:
		c.force, _ = fence.GetNodeUnpublishForce(r)
	case *csi.NodeUnstageVolumeRequest:
		c.force, _ = fence.GetNodeUnstageForce(r)
	}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	return rsp, err
}

func (e *env) sawCall(pred func(call) bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.calls {
		if pred(c) {
			return true
		}
	}
	return false
}

// volume creates an attached PV/PVC pair of the mock driver, attached to the
// node on the array and in the API, as the attacher would leave it.
func (e *env) volume(handle, pv string, block bool) {
	e.t.Helper()
	mode := v1.PersistentVolumeFilesystem
	if block {
		mode = v1.PersistentVolumeBlock
	}
	objs := []runtime.Object{
		&v1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pv},
			Spec: v1.PersistentVolumeSpec{
				AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
				VolumeMode:             &mode,
				PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: drv, VolumeHandle: handle}},
				ClaimRef:               &v1.ObjectReference{Namespace: "default", Name: "claim-" + pv},
			},
		},
		&v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-" + pv},
			Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pv, VolumeMode: &mode},
			Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
		},
		&storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: kubeletlayout.AttachmentName(handle, drv, nodeName)},
			Spec:       storagev1.VolumeAttachmentSpec{Attacher: drv, NodeName: nodeName, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
			Status:     storagev1.VolumeAttachmentStatus{Attached: true},
		},
	}
	for _, o := range objs {
		if err := e.client.Tracker().Add(o); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.arr.AddVolume(handle, 1<<30); err != nil {
		e.t.Fatal(err)
	}
	if err := e.arr.Publish(handle, nodeName, true, false, array.Options{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pod(uid, pv string) {
	e.t.Helper()
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + uid, UID: types.UID(uid)},
		Spec: v1.PodSpec{NodeName: nodeName, Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-" + pv}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
	if _, err := e.client.CoreV1().Pods("default").Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deletePod(uid string) {
	e.t.Helper()
	if err := e.client.CoreV1().Pods("default").Delete(e.ctx, "pod-"+uid, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// start runs a simulated kubelet on the node's directory.
func (e *env) start() *Kubelet {
	e.t.Helper()
	k, err := New(Options{Client: e.client, NodeName: nodeName, DriverName: drv, KubeletDir: e.root, Conn: e.conn,
		Period: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, ReportVolumesInUse: true})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = k.Run(e.ctx); close(done) }()
	e.t.Cleanup(func() { k.PowerOff(); <-done })
	return k
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		e.t.Fatalf("timed out waiting for %s", what)
	}
}

func (e *env) publication(handle string) *array.Publication {
	s, err := e.arr.Snapshot()
	if err != nil {
		e.t.Fatal(err)
	}
	return s.Volumes[handle].Publications[nodeName]
}

func (e *env) volumesInUse() []v1.UniqueVolumeName {
	n, err := e.client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n.Status.VolumesInUse
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestMountAndUnmount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   driver.Config
		block bool
	}{
		{name: "filesystem, staged"},
		{name: "filesystem, no staging", cfg: driver.Config{NoStage: true}},
		{name: "block, staged", block: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			e.volume("vol-1", "pv-1", tc.block)
			e.pod("uid-1", "pv-1")
			e.pod("uid-2", "pv-1")
			e.start()
			l := e.layout
			targets := []string{l.PublishPath("uid-1", "pv-1"), l.PublishPath("uid-2", "pv-1")}
			staging := l.StagingPath(drv, "vol-1")
			if tc.block {
				targets = []string{l.BlockPublishPath("pv-1", "uid-1"), l.BlockPublishPath("pv-1", "uid-2")}
				staging = l.BlockStagingPath("pv-1")
			}
			e.waitFor("the volume published to both pods", func() bool {
				p := e.publication("vol-1")
				return p != nil && len(p.Published) == 2 && exists(targets[0]) && exists(targets[1])
			})
			p := e.publication("vol-1")
			if tc.cfg.NoStage != (p.Staged == "") {
				t.Errorf("staged at %q with NoStage=%v", p.Staged, tc.cfg.NoStage)
			}
			if !tc.cfg.NoStage && p.Staged != staging {
				t.Errorf("staged at %s, want the kubelet's path %s", p.Staged, staging)
			}
			// The kubelet's metadata is there, so the node agent can find it.
			inv, err := l.Scan()
			if err != nil {
				t.Fatal(err)
			}
			m := inv.Match(kubeletlayout.Volume{Driver: drv, VolumeHandle: "vol-1"})
			if got := len(m.PodVolumes) + len(m.Block); got != 2 && !tc.block || tc.block && (len(m.Block) != 1 || len(m.Block[0].PodUIDs) != 2) {
				t.Errorf("scan found %+v", m)
			}
			if tc.block && !exists(l.PodDeviceMapPath("uid-1", "pv-1")) {
				t.Error("block device not mapped into the pod")
			}
			e.waitFor("volumesInUse reported", func() bool {
				in := e.volumesInUse()
				return len(in) == 1 && in[0] == UniqueVolumeName(drv, "vol-1")
			})

			e.deletePod("uid-1")
			e.waitFor("uid-1 unpublished", func() bool { return len(e.publication("vol-1").Published) == 1 })
			e.waitFor("uid-1's directory removed", func() bool { return !exists(l.PodDir("uid-1")) })
			if !tc.cfg.NoStage && e.publication("vol-1").Staged == "" {
				t.Error("unstaged while uid-2 still uses the volume")
			}
			e.deletePod("uid-2")
			e.waitFor("unstaged", func() bool {
				p := e.publication("vol-1")
				return len(p.Published) == 0 && p.Staged == ""
			})
			e.waitFor("every directory removed", func() bool {
				inv, err := l.Scan()
				return err == nil && inv.Match(kubeletlayout.Volume{Driver: drv, VolumeHandle: "vol-1", PVName: "pv-1"}).Empty() && !exists(l.PodDir("uid-2"))
			})
			e.waitFor("volumesInUse cleared", func() bool { return len(e.volumesInUse()) == 0 })
			if e.sawCall(func(c call) bool { return c.force }) {
				t.Error("the simulated kubelet used force")
			}
		})
	}
}

func TestWaitsForAttach(t *testing.T) {
	e := newEnv(t, driver.Config{})
	e.volume("vol-1", "pv-1", false)
	va, _ := e.client.StorageV1().VolumeAttachments().Get(e.ctx, kubeletlayout.AttachmentName("vol-1", drv, nodeName), metav1.GetOptions{})
	va.Status.Attached = false
	if _, err := e.client.StorageV1().VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod("uid-1", "pv-1")
	e.start()
	// A reconcile pass patches volumesInUse; by then the pod is known, and
	// its volume must not be staged or published before it is attached.
	e.waitFor("a reconcile pass", func() bool {
		for _, a := range e.client.Actions() {
			if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
				return true
			}
		}
		return false
	})
	if e.sawCall(func(c call) bool { return c.method == "NodeStageVolume" || c.method == "NodePublishVolume" }) {
		t.Fatal("staged or published before the volume was attached")
	}
	// As the kubelet: in use as soon as a pod wants it, before the attach.
	e.waitFor("volumesInUse reported before the attach", func() bool {
		return slices.Equal(e.volumesInUse(), []v1.UniqueVolumeName{UniqueVolumeName(drv, "vol-1")})
	})
	va.Status.Attached = true
	if _, err := e.client.StorageV1().VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("published once attached", func() bool { return len(e.publication("vol-1").Published) == 1 })
}

// TestVolumesInUseKeepsOtherDrivers: a node with two drivers has a simulated
// kubelet per driver, both writing node.status.volumesInUse. The other
// driver's kubelet writes between this one's read of the node and its
// write: its entry must survive (the write from the stale read is refused
// as the apiserver refuses it, and made again from a fresh read).
func TestVolumesInUseKeepsOtherDrivers(t *testing.T) {
	e := newEnv(t, driver.Config{})
	e.volume("vol-1", "pv-1", false)
	e.pod("uid-1", "pv-1")
	theirs := []v1.UniqueVolumeName{UniqueVolumeName("other.csi-fence.io", "a"), UniqueVolumeName("other.csi-fence.io", "b")}
	e.optimisticNodes(
		func(n *v1.Node) { n.Status.VolumesInUse = theirs[:1] },
		func(n *v1.Node) { n.Status.VolumesInUse = theirs },
	)
	e.start()
	want := append(theirs, UniqueVolumeName(drv, "vol-1"))
	// Read past the reactors: the first read through the client is the
	// kubelet's.
	e.waitFor(fmt.Sprintf("volumesInUse %v", want), func() bool {
		n, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", nodeName)
		return err == nil && slices.Equal(n.(*v1.Node).Status.VolumesInUse, want)
	})
}

// optimisticNodes makes the fake clientset treat the node as the apiserver
// does: a patch naming a resourceVersion other than the node's current one
// fails with Conflict, and every write gets a new resourceVersion. The node
// starts as initial makes it; right after the first read of it, another
// writer changes it as between does.
func (e *env) optimisticNodes(initial, between func(*v1.Node)) {
	e.t.Helper()
	tracker := e.client.Tracker()
	gvr := v1.SchemeGroupVersion.WithResource("nodes")
	rv := 0
	write := func(n *v1.Node) error {
		rv++
		n.ResourceVersion = strconv.Itoa(rv)
		return tracker.Update(gvr, n, "")
	}
	get := func(name string) (*v1.Node, error) {
		obj, err := tracker.Get(gvr, "", name)
		if err != nil {
			return nil, err
		}
		return obj.(*v1.Node).DeepCopy(), nil
	}
	n, err := get(nodeName)
	if err != nil {
		e.t.Fatal(err)
	}
	initial(n)
	if err := write(n); err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	read := false
	e.client.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		n, err := get(a.(k8stesting.GetAction).GetName())
		if err != nil || read {
			return true, n, err
		}
		read = true
		other := n.DeepCopy()
		between(other)
		return true, n, write(other)
	})
	// The simulated kubelet patches nothing but volumesInUse.
	e.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		pa := a.(k8stesting.PatchAction)
		var patch struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Status   v1.NodeStatus     `json:"status"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
			return true, nil, err
		}
		n, err := get(pa.GetName())
		if err != nil {
			return true, nil, err
		}
		if patch.Metadata.ResourceVersion != "" && patch.Metadata.ResourceVersion != n.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), n.Name, errors.New("the object has been modified"))
		}
		n.Status.VolumesInUse = patch.Status.VolumesInUse
		return true, n, write(n)
	})
}

// TestPowerOffAndReturn plays the return path of a fenced node: power off
// with everything mounted, failover (pod deleted, volume fenced and
// recorded), power on. The simulated kubelet cannot clean a fenced volume
// (plain calls); the node agent can (forced calls); the kubelet then removes
// the orphaned pod directory.
func TestPowerOffAndReturn(t *testing.T) {
	e := newEnv(t, driver.Config{})
	e.volume("vol-1", "pv-1", false)
	e.pod("uid-1", "pv-1")
	k := e.start()
	l := e.layout
	e.waitFor("published", func() bool {
		return len(e.publication("vol-1").Published) == 1 && exists(l.PublishPath("uid-1", "pv-1"))
	})

	k.PowerOff()
	// Power is off: Run has returned, nothing reacts any more.
	e.deletePod("uid-1")
	if !exists(l.PublishPath("uid-1", "pv-1")) || !exists(l.StagingPath(drv, "vol-1")) {
		t.Fatal("a powered-off node cleaned up")
	}
	// Failover: the volume is fenced on this node and recorded.
	if err := e.arr.Unpublish("vol-1", nodeName, true, array.Options{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	records := fencingv1alpha1.NewClient(dyn)
	if err := fencerecord.RecordFenced(e.ctx, records, nodeName, "NodeUnreachable", fencingv1alpha1.FencedVolume{
		Driver: drv, VolumeHandle: "vol-1", PersistentVolumeName: "pv-1", NodeID: nodeName}); err != nil {
		t.Fatal(err)
	}

	// Power on: the kubelet reconstructs the mount and tries to tear it
	// down; the plugin refuses a plain unpublish of a fenced volume.
	e.start()
	e.waitFor("a refused plain unpublish", func() bool {
		return e.sawCall(func(c call) bool { return c.method == "NodeUnpublishVolume" && !c.force && c.err != nil })
	})
	if !exists(l.PublishPath("uid-1", "pv-1")) {
		t.Fatal("the fenced volume's mount disappeared without a forced cleanup")
	}

	// The node agent cleans it.
	agent, err := nodeagent.New(nodeagent.Options{DriverName: drv, NodeName: nodeName, KubeletDir: e.root, Conn: e.conn,
		Dynamic: dyn, Recorder: record.NewFakeRecorder(100), RetryIntervalStart: 10 * time.Millisecond, RetryIntervalMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); agent.Run(actx) }()
	defer func() { cancel(); wg.Wait() }()
	e.waitFor("the volume recorded clean", func() bool {
		fr, err := records.Get(e.ctx, nodeName)
		v := fencerecord.Find(fr, drv, "vol-1")
		return err == nil && v != nil && v.CleanedTime != nil
	})
	if p := e.publication("vol-1"); p != nil {
		t.Errorf("still quarantined on the array: %+v", p)
	}
	e.waitFor("the orphaned pod directory removed", func() bool { return !exists(l.PodDir("uid-1")) })
	s, _ := e.arr.Snapshot()
	if v := s.CountViolations(); v["S1"]+v["S2"] != 0 {
		t.Errorf("violations: %v", v)
	}
}

// A pod that wants a volume whose attachment is being deleted (still
// attached: the detach is pending) gets nothing mounted: the kubelet mounts
// only what the attach/detach controller reports attached, and it stops
// reporting a volume before it deletes its attachment (trial seed 11032).
// The volume is reported in use all the same, as by the kubelet.
func TestMountsNothingWhileTheAttachmentIsDeleted(t *testing.T) {
	e := newEnv(t, driver.Config{})
	e.volume("vol-1", "pv-1", false)
	va, _ := e.client.StorageV1().VolumeAttachments().Get(e.ctx, kubeletlayout.AttachmentName("vol-1", drv, nodeName), metav1.GetOptions{})
	now := metav1.Now()
	va.DeletionTimestamp, va.Finalizers = &now, []string{"external-attacher/" + drv}
	if _, err := e.client.StorageV1().VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pod("uid-1", "pv-1")
	e.start()
	e.waitFor("volumesInUse reported", func() bool {
		return slices.Equal(e.volumesInUse(), []v1.UniqueVolumeName{UniqueVolumeName(drv, "vol-1")})
	})
	// It would be mounted in the pass that reported it: a volume wanted
	// since, attached, is published in a later pass.
	e.volume("vol-2", "pv-2", false)
	e.pod("uid-2", "pv-2")
	e.waitFor("the other volume published", func() bool { return len(e.publication("vol-2").Published) == 1 })
	if e.sawCall(func(c call) bool {
		return (c.method == "NodeStageVolume" || c.method == "NodePublishVolume") && c.volume == "vol-1"
	}) {
		t.Fatal("staged or published while the attachment was being deleted")
	}
	// The attachment made again (not being deleted): mounted.
	va.DeletionTimestamp, va.Finalizers = nil, nil
	if _, err := e.client.StorageV1().VolumeAttachments().Update(e.ctx, va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("published once attached anew", func() bool {
		p := e.publication("vol-1")
		return p != nil && len(p.Published) == 1
	})
}

// Simulated kubelets that share their cluster-wide informers (a hundred
// simulated nodes in one process watch each kind once): the factory is
// started by its owner, outlives a kubelet powered off, and serves the
// kubelet powered on after it.
func TestSharedInformers(t *testing.T) {
	e := newEnv(t, driver.Config{})
	shared := informers.NewSharedInformerFactory(e.client, 0)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); shared.Shutdown() })
	start := func() (*Kubelet, chan struct{}) {
		k, err := New(Options{Client: e.client, NodeName: nodeName, DriverName: drv, KubeletDir: e.root, Conn: e.conn,
			Period: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, ReportVolumesInUse: true, Informers: shared})
		if err != nil {
			t.Fatal(err)
		}
		shared.Start(stop)
		done := make(chan struct{})
		go func() { _ = k.Run(e.ctx); close(done) }()
		return k, done
	}
	e.volume("vol-1", "pv-1", false)
	e.pod("uid-1", "pv-1")
	k, done := start()
	e.waitFor("vol-1 published", func() bool { return e.publication("vol-1") != nil && len(e.publication("vol-1").Published) == 1 })
	k.PowerOff()
	<-done
	pvs := shared.Core().V1().PersistentVolumes().Informer()
	if pvs.IsStopped() {
		t.Fatal("a kubelet powered off stopped the informers it shares")
	}
	e.volume("vol-2", "pv-2", false)
	e.pod("uid-2", "pv-2")
	k2, done2 := start()
	t.Cleanup(func() { k2.PowerOff(); <-done2 })
	e.waitFor("vol-2 published by the next kubelet", func() bool {
		return e.publication("vol-2") != nil && len(e.publication("vol-2").Published) == 1
	})
	// One list of each shared kind for both kubelets, the pods' one each.
	lists := map[string]int{}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "list" {
			lists[a.GetResource().Resource]++
		}
	}
	if lists["persistentvolumes"] != 1 || lists["persistentvolumeclaims"] != 1 || lists["volumeattachments"] != 1 || lists["pods"] != 2 {
		t.Errorf("lists %v, want one of each shared kind and one of pods per kubelet", lists)
	}
}
