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

// Package kubeletsim simulates the volume manager of a kubelet for one node
// and one CSI driver, for KWOK nodes in the end-to-end tests and the demo,
// which have no kubelet; a node with several drivers runs one per driver, on
// the same kubelet directory. It drives a real CSI node plugin over gRPC and lays
// out the kubelet directory exactly as the kubelet does (pkg/kubeletlayout),
// so that the node agent meets on a simulated node what it would meet on a
// real one.
//
// Like the kubelet it:
//   - mounts, for each pod bound to its node, every PVC-backed volume of its
//     driver once the volume's VolumeAttachment to this node is attached:
//     NodeStageVolume (with STAGE_UNSTAGE_VOLUME) then NodePublishVolume,
//     with vol_data.json written first, filesystem and block volumes;
//   - unmounts, while it runs, the volumes of pods that are gone or being
//     deleted: NodeUnpublishVolume, then NodeUnstageVolume when no pod uses
//     the volume, with plain (never forced) calls, and removes its
//     directories and the orphaned pod directories;
//   - on start, reconstructs what is mounted from the directory, as the
//     kubelet does after a reboot, and tears down what no pod needs;
//   - optionally reports node.status.volumesInUse: its own driver's entries,
//     written with optimistic concurrency so that the kubelets of a node's
//     other drivers never lose theirs.
//
// PowerOff stops it at once and leaves every directory and every publish in
// place, as a node that loses power would.
package kubeletsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// Options configure a simulated kubelet.
type Options struct {
	// Client is the Kubernetes client. Required.
	Client kubernetes.Interface
	// NodeName is the node simulated. Required.
	NodeName string
	// DriverName is the CSI driver whose volumes are mounted. Required.
	DriverName string
	// KubeletDir is the kubelet root directory. Required.
	KubeletDir string
	// Conn is the connection to the driver's node plugin. Required.
	Conn grpc.ClientConnInterface
	// Period of the reconcile loop; default 200ms. Changes seen by the
	// informers also start a pass at once.
	Period time.Duration
	// HousekeepingPeriod is how often, at most, the directories of pods
	// that are gone are looked for and removed, which reads the whole
	// kubelet directory; default 2s, the kubelet's housekeeping period.
	HousekeepingPeriod time.Duration
	// Timeout of each CSI call; default 10s.
	Timeout time.Duration
	// RetryMax caps the per-operation backoff after a failed CSI call;
	// default 5s.
	RetryMax time.Duration
	// ReportVolumesInUse makes it maintain node.status.volumesInUse for its
	// driver's volumes, as the kubelet does (the attach/detach controller
	// waits for a volume to leave that list before it detaches from a
	// healthy node): a volume is reported as soon as a pod on the node
	// wants it, before its attach, and mounted only once reported, until
	// unmounted. Other drivers' entries are kept.
	ReportVolumesInUse bool
	// Informers, when set, is the factory the kubelet takes its
	// cluster-wide informers from (claims, volumes, attachments): one the
	// simulated kubelets of a process share, so that a hundred of them
	// watch and cache each of those once, not a hundred times. Its owner
	// starts it once New has asked for them, and stops it. nil: the kubelet
	// has its own.
	Informers informers.SharedInformerFactory
}

// Kubelet is a simulated kubelet volume manager.
type Kubelet struct {
	opts    Options
	layout  kubeletlayout.Layout
	remover kubeletlayout.Remover
	node    csi.NodeClient

	// factories are the informer factories the kubelet starts and stops;
	// shared are its handlers on informers another owns.
	factories []informers.SharedInformerFactory
	shared    []sharedHandler
	podLister corelisters.PodLister
	pvcLister corelisters.PersistentVolumeClaimLister
	pvLister  corelisters.PersistentVolumeLister
	vaLister  storagelisters.VolumeAttachmentLister
	synced    []cache.InformerSynced
	kick      chan struct{}

	// State of the world, owned by the reconcile loop.
	caps      fence.NodeCapabilitySet
	published map[podVolume]mounted
	staged    map[string]stagedVolume // by volume handle
	backoff   map[string]retry
	inUse     []string
	housekept time.Time // the last look for orphaned pod directories

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

type podVolume struct {
	podUID string
	spec   string // the PV name
}

// mounted is a publish the kubelet knows of. uncertain: the last
// NodePublishVolume failed after the driver may have done something, so it
// is retried while wanted and torn down when not, as the kubelet does.
type mounted struct {
	handle    string
	block     bool
	uncertain bool
}

type stagedVolume struct {
	path      string
	block     bool
	spec      string
	uncertain bool
}

type retry struct {
	next  time.Time
	delay time.Duration
}

// desired is one volume a pod needs mounted.
type desired struct {
	key      podVolume
	handle   string
	block    bool
	readOnly bool
	pv       *v1.PersistentVolume
	va       map[string]string // publish context
	// detaching: the attachment is being deleted. The kubelet mounts a
	// volume only once the attach/detach controller reports it in
	// node.status.volumesAttached, from which it removes the volume before
	// it deletes the attachment: a volume already mounted stays, none is
	// mounted anew.
	detaching bool
}

// New returns a simulated kubelet; Run starts it.
func New(opts Options) (*Kubelet, error) {
	if opts.Client == nil || opts.NodeName == "" || opts.DriverName == "" || opts.KubeletDir == "" || opts.Conn == nil {
		return nil, errors.New("kubeletsim: Client, NodeName, DriverName, KubeletDir and Conn are required")
	}
	if opts.Period <= 0 {
		opts.Period = 200 * time.Millisecond
	}
	if opts.HousekeepingPeriod <= 0 {
		opts.HousekeepingPeriod = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Second
	}
	layout := kubeletlayout.New(opts.KubeletDir)
	k := &Kubelet{
		opts:      opts,
		layout:    layout,
		remover:   kubeletlayout.Remover{Layout: layout, Mounts: mount.New("")},
		node:      csi.NewNodeClient(opts.Conn),
		kick:      make(chan struct{}, 1),
		published: map[podVolume]mounted{},
		staged:    map[string]stagedVolume{},
		backoff:   map[string]retry{},
		done:      make(chan struct{}),
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
	}))
	k.factories = []informers.SharedInformerFactory{podFactory}
	factory := opts.Informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(opts.Client, 0)
		k.factories = append(k.factories, factory)
	}
	pods := podFactory.Core().V1().Pods()
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	vas := factory.Storage().V1().VolumeAttachments()
	k.podLister, k.pvcLister, k.pvLister, k.vaLister = pods.Lister(), pvcs.Lister(), pvs.Lister(), vas.Lister()
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { k.trigger() },
		UpdateFunc: func(interface{}, interface{}) { k.trigger() },
		DeleteFunc: func(interface{}) { k.trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), pvcs.Informer(), pvs.Informer(), vas.Informer()} {
		reg, err := inf.AddEventHandler(kick)
		if err != nil {
			k.removeSharedHandlers()
			return nil, err
		}
		if opts.Informers != nil && inf != pods.Informer() {
			k.shared = append(k.shared, sharedHandler{inf, reg})
		}
		k.synced = append(k.synced, inf.HasSynced)
	}
	return k, nil
}

// sharedHandler is a kubelet's handler on an informer it does not own.
type sharedHandler struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// removeSharedHandlers takes the kubelet's handlers off the shared
// informers, which outlive it.
func (k *Kubelet) removeSharedHandlers() {
	for _, h := range k.shared {
		_ = h.inf.RemoveEventHandler(h.reg)
	}
	k.shared = nil
}

func (k *Kubelet) trigger() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// Run runs the simulated kubelet until ctx is done or PowerOff is called.
func (k *Kubelet) Run(ctx context.Context) error {
	k.mu.Lock()
	if k.stopped || k.cancel != nil {
		k.mu.Unlock()
		return errors.New("kubeletsim: Run called twice")
	}
	ctx, k.cancel = context.WithCancel(ctx)
	k.mu.Unlock()
	defer close(k.done)
	logger := klog.FromContext(ctx).WithValues("node", k.opts.NodeName, "driver", k.opts.DriverName)
	ctx = klog.NewContext(ctx, logger)
	defer func() {
		for _, f := range k.factories {
			f.Shutdown()
		}
		k.removeSharedHandlers()
	}()

	// What the kubelet does at start: its data directories, then the
	// reconstruction of what is mounted.
	for _, d := range []string{k.layout.PodsDir(), filepath.Join(k.layout.Root, "plugins")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := k.reconstruct(); err != nil {
		return fmt.Errorf("reconstructing mounted volumes: %w", err)
	}
	for _, f := range k.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), k.synced...) {
		return nil
	}
	// The plugin may come up after us: wait for its capabilities.
	for k.caps == nil {
		cctx, cancel := context.WithTimeout(ctx, k.opts.Timeout)
		caps, err := fence.GetNodeCapabilities(cctx, k.opts.Conn)
		cancel()
		if err == nil {
			k.caps = caps
			break
		}
		logger.V(2).Info("Waiting for the node plugin", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(k.opts.Period):
		}
	}
	logger.Info("Simulated kubelet running", "kubeletDir", k.layout.Root, "stage", k.caps.CanStage())
	ticker := time.NewTicker(k.opts.Period)
	defer ticker.Stop()
	for {
		k.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-k.kick:
		}
	}
}

// PowerOff stops the simulated kubelet at once, leaving everything on disk
// and on the plugin as it is, and returns once it has stopped.
func (k *Kubelet) PowerOff() {
	k.mu.Lock()
	k.stopped = true
	cancel := k.cancel
	k.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-k.done
}

// reconstruct loads the state of the world from the kubelet directory.
func (k *Kubelet) reconstruct() error {
	inv, err := k.layout.Scan()
	if err != nil {
		return err
	}
	ours := func(d *kubeletlayout.VolumeData) bool { return d != nil && d.DriverName == k.opts.DriverName }
	for _, p := range inv.PodVolumes {
		if ours(p.Data) {
			k.published[podVolume{p.PodUID, p.SpecName}] = mounted{handle: p.Data.VolumeHandle}
		}
	}
	for _, s := range inv.Staged {
		if ours(s.Data) {
			k.staged[s.Data.VolumeHandle] = stagedVolume{path: s.StagingPath}
		}
	}
	for _, b := range inv.Block {
		if !ours(b.Data) {
			continue
		}
		for _, uid := range b.PodUIDs {
			k.published[podVolume{uid, b.SpecName}] = mounted{handle: b.Data.VolumeHandle, block: true}
		}
		if b.StagingPath != "" {
			k.staged[b.Data.VolumeHandle] = stagedVolume{path: b.StagingPath, block: true, spec: b.SpecName}
		}
	}
	return nil
}

// desiredVolumes lists the volumes of this driver that pods on this node
// need and that are attached to it, the pods on the node, and the handles
// of every volume of this driver its pods need, attached or not.
func (k *Kubelet) desiredVolumes(logger klog.Logger) (map[podVolume]desired, map[types.UID]bool, map[string]bool) {
	want := map[podVolume]desired{}
	live := map[types.UID]bool{}
	needed := map[string]bool{}
	pods, err := k.podLister.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing pods")
		return want, live, needed
	}
	for _, pod := range pods {
		if pod.Spec.NodeName != k.opts.NodeName {
			continue
		}
		live[pod.UID] = true
		if pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue // its containers are stopped: its volumes are unmounted
		}
		for _, vol := range pod.Spec.Volumes {
			claim, readOnly := "", false
			switch {
			case vol.PersistentVolumeClaim != nil:
				claim, readOnly = vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly
			case vol.Ephemeral != nil:
				claim = pod.Name + "-" + vol.Name
			default:
				continue
			}
			pvc, err := k.pvcLister.PersistentVolumeClaims(pod.Namespace).Get(claim)
			if err != nil || pvc.Spec.VolumeName == "" || pvc.Status.Phase != v1.ClaimBound {
				continue
			}
			pv, err := k.pvLister.Get(pvc.Spec.VolumeName)
			if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != k.opts.DriverName {
				continue
			}
			needed[pv.Spec.CSI.VolumeHandle] = true
			va, err := k.vaLister.Get(kubeletlayout.AttachmentName(pv.Spec.CSI.VolumeHandle, k.opts.DriverName, k.opts.NodeName))
			if err != nil || !va.Status.Attached || va.Spec.NodeName != k.opts.NodeName {
				continue // the kubelet waits for the attach
			}
			key := podVolume{string(pod.UID), pv.Name}
			want[key] = desired{
				key: key, handle: pv.Spec.CSI.VolumeHandle, pv: pv, va: va.Status.AttachmentMetadata,
				block:     pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock,
				readOnly:  readOnly || pv.Spec.CSI.ReadOnly,
				detaching: va.DeletionTimestamp != nil,
			}
		}
	}
	return want, live, needed
}

// reconcile makes one pass: unmount what is not wanted, mount what is.
func (k *Kubelet) reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx)
	want, live, needed := k.desiredVolumes(logger)

	// Unmount first, as the kubelet's reconciler does.
	keys := make([]podVolume, 0, len(k.published))
	for key := range k.published {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].podUID+keys[i].spec < keys[j].podUID+keys[j].spec })
	for _, key := range keys {
		if _, ok := want[key]; !ok {
			k.unpublish(ctx, key, k.published[key])
		}
	}
	wantHandles := map[string]bool{}
	for _, d := range want {
		wantHandles[d.handle] = true
	}
	for handle, s := range k.staged {
		if !wantHandles[handle] && !k.publishedAnywhere(handle) {
			k.unstage(ctx, handle, s)
		}
	}
	// Every pass would read the whole kubelet directory, five times a
	// second: twenty simulated kubelets in fence-bench's process took
	// about a fifth of a 2-core machine that way, from the failovers it
	// measures.
	if time.Since(k.housekept) >= k.opts.HousekeepingPeriod {
		k.cleanOrphanPodDirs(logger, live)
		k.housekept = time.Now()
	}

	// Report before mounting, as the kubelet does: it mounts only volumes
	// it reported in use, so that the attach/detach controller never
	// detaches a volume it is mounting.
	if k.opts.ReportVolumesInUse {
		k.reportVolumesInUse(ctx, needed)
	}
	for _, d := range sortedDesired(want) {
		if m, ok := k.published[d.key]; ok && !m.uncertain {
			continue
		}
		if d.detaching || (k.opts.ReportVolumesInUse && !k.reportedInUse(d.handle)) || !k.attachedLive(ctx, d.handle) {
			continue
		}
		k.mount(ctx, d)
	}
}

// attachedLive reads the volume's attachment from the API before a mount,
// as the kubelet's wait for the attach does: the informer's copy may not
// show yet that its deletion began.
func (k *Kubelet) attachedLive(ctx context.Context, handle string) bool {
	va, err := k.opts.Client.StorageV1().VolumeAttachments().Get(ctx, kubeletlayout.AttachmentName(handle, k.opts.DriverName, k.opts.NodeName), metav1.GetOptions{})
	return err == nil && va.Status.Attached && va.DeletionTimestamp == nil
}

// reportedInUse reports whether the last report of volumesInUse that
// succeeded lists the volume.
func (k *Kubelet) reportedInUse(handle string) bool {
	return slices.Contains(k.inUse, string(UniqueVolumeName(k.opts.DriverName, handle)))
}

func sortedDesired(m map[podVolume]desired) []desired {
	out := make([]desired, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.podUID+out[i].key.spec < out[j].key.podUID+out[j].key.spec })
	return out
}

func (k *Kubelet) publishedAnywhere(handle string) bool {
	for _, m := range k.published {
		if m.handle == handle {
			return true
		}
	}
	return false
}

// due reports whether op may be tried now; failed reports a failure of op.
func (k *Kubelet) due(op string) bool { return !time.Now().Before(k.backoff[op].next) }

func (k *Kubelet) failed(op string) {
	r := k.backoff[op]
	r.delay = min(max(2*r.delay, k.opts.Period), k.opts.RetryMax)
	r.next = time.Now().Add(r.delay)
	k.backoff[op] = r
}

func (k *Kubelet) succeeded(op string) { delete(k.backoff, op) }

func (k *Kubelet) capability(d desired) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(d.pv.Spec.AccessModes, false)
	if err != nil {
		return nil, err
	}
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if d.block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: d.pv.Spec.CSI.FSType, MountFlags: d.pv.Spec.MountOptions}}
	}
	return c, nil
}

// call runs one volume operation unless it is backing off after a failure.
func (k *Kubelet) call(ctx context.Context, op string, fn func(context.Context) error) bool {
	if !k.due(op) {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, k.opts.Timeout)
	defer cancel()
	if err := fn(cctx); err != nil {
		if ctx.Err() == nil { // not powered off meanwhile
			klog.FromContext(ctx).Info("Volume operation failed; retrying with backoff", "op", op, "err", err)
		}
		k.failed(op)
		return false
	}
	k.succeeded(op)
	return true
}

// mount stages (if needed) and publishes one pod volume.
func (k *Kubelet) mount(ctx context.Context, d desired) {
	logger := klog.FromContext(ctx).WithValues("pod", d.key.podUID, "pv", d.key.spec, "volumeHandle", d.handle)
	vc, err := k.capability(d)
	if err != nil {
		logger.Error(err, "Unsupported access modes")
		return
	}
	stageOp, publishOp := "stage/"+d.handle, "publish/"+d.key.podUID+"/"+d.key.spec
	if !k.due(stageOp) || !k.due(publishOp) {
		return // backing off after a failure
	}
	data := kubeletlayout.VolumeData{VolumeHandle: d.handle, DriverName: k.opts.DriverName, NodeName: k.opts.NodeName,
		AttachmentID: kubeletlayout.AttachmentName(d.handle, k.opts.DriverName, k.opts.NodeName)}
	if d.block {
		if err := k.layout.PrepareBlock(d.key.spec, data); err != nil {
			logger.Error(err, "Preparing the block volume")
			return
		}
	}
	s, staged := k.staged[d.handle]
	if k.caps.CanStage() && (!staged || s.uncertain) {
		var path string
		var err error
		if d.block {
			path, err = k.layout.PrepareBlockStage(d.key.spec)
		} else {
			path, err = k.layout.PrepareStage(k.opts.DriverName, d.handle)
		}
		if err != nil {
			logger.Error(err, "Preparing the staging path")
			return
		}
		ok := k.call(ctx, stageOp, func(ctx context.Context) error {
			_, err := k.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
				VolumeId: d.handle, PublishContext: d.va, StagingTargetPath: path, VolumeCapability: vc, VolumeContext: d.pv.Spec.CSI.VolumeAttributes})
			return err
		})
		s = stagedVolume{path: path, block: d.block, spec: d.key.spec, uncertain: !ok}
		k.staged[d.handle] = s
		if !ok {
			return
		}
		logger.V(2).Info("Staged volume", "path", path)
	}

	var target string
	if d.block {
		target, err = k.layout.PrepareBlockPublish(d.key.spec, d.key.podUID)
	} else {
		target, err = k.layout.PreparePublish(d.key.podUID, d.key.spec, data)
	}
	if err != nil {
		logger.Error(err, "Preparing the publish path")
		return
	}
	ok := k.call(ctx, publishOp, func(ctx context.Context) error {
		_, err := k.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: d.handle, PublishContext: d.va, StagingTargetPath: s.path, TargetPath: target,
			VolumeCapability: vc, Readonly: d.readOnly, VolumeContext: d.pv.Spec.CSI.VolumeAttributes})
		return err
	})
	if !ok {
		if ctx.Err() != nil {
			return // powered off: a dead node does nothing more
		}
		if _, err := os.Lstat(target); err == nil {
			k.published[d.key] = mounted{handle: d.handle, block: d.block, uncertain: true}
			return
		}
		// Nothing was published: drop the metadata, as the kubelet does
		// after a final error.
		delete(k.published, d.key)
		if d.block {
			_ = k.remover.RemoveBlockPod(d.key.spec, d.key.podUID)
		} else {
			_ = k.remover.RemovePodVolume(kubeletlayout.PodVolume{Dir: k.layout.PodVolumeDir(d.key.podUID, d.key.spec), TargetPath: target})
		}
		return
	}
	if d.block {
		if err := k.layout.MapBlockDevice(d.key.spec, d.key.podUID); err != nil {
			logger.Error(err, "Mapping the block device")
		}
	}
	k.published[d.key] = mounted{handle: d.handle, block: d.block}
	logger.V(2).Info("Published volume", "path", target)
}

// unpublish tears down one pod volume with a plain NodeUnpublishVolume, as
// the kubelet does: it cannot force, so a fenced volume stays until the node
// agent cleaned it.
func (k *Kubelet) unpublish(ctx context.Context, key podVolume, m mounted) {
	logger := klog.FromContext(ctx).WithValues("pod", key.podUID, "pv", key.spec, "volumeHandle", m.handle)
	target := k.layout.PublishPath(key.podUID, key.spec)
	if m.block {
		target = k.layout.BlockPublishPath(key.spec, key.podUID)
	}
	ok := k.call(ctx, "unpublish/"+key.podUID+"/"+key.spec, func(ctx context.Context) error {
		if _, err := k.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: m.handle, TargetPath: target}); err != nil {
			return err
		}
		if m.block {
			return k.remover.RemoveBlockPod(key.spec, key.podUID)
		}
		return k.remover.RemovePodVolume(kubeletlayout.PodVolume{Dir: k.layout.PodVolumeDir(key.podUID, key.spec), TargetPath: target})
	})
	if ok {
		delete(k.published, key)
		logger.V(2).Info("Unpublished volume", "path", target)
	}
}

func (k *Kubelet) unstage(ctx context.Context, handle string, s stagedVolume) {
	ok := k.call(ctx, "unstage/"+handle, func(ctx context.Context) error {
		if _, err := k.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: s.path}); err != nil {
			return err
		}
		if s.block {
			return k.remover.RemoveBlockVolume(s.spec)
		}
		return k.remover.RemoveStaged(kubeletlayout.StagedVolume{Dir: filepath.Dir(s.path), StagingPath: s.path})
	})
	if ok {
		delete(k.staged, handle)
		klog.FromContext(ctx).V(2).Info("Unstaged volume", "volumeHandle", handle, "path", s.path)
	}
}

// cleanOrphanPodDirs removes the directories of pods that are gone once no
// volume is left in them, and the data of block volumes no pod uses (a
// plugin without staging has no unstage to do it).
func (k *Kubelet) cleanOrphanPodDirs(logger klog.Logger, live map[types.UID]bool) {
	inv, err := k.layout.Scan()
	if err != nil {
		logger.Error(err, "Scanning the kubelet directory")
		return
	}
	for _, b := range inv.Block {
		if b.Data != nil && b.Data.DriverName == k.opts.DriverName && len(b.PodUIDs) == 0 && b.StagingPath == "" {
			if _, staged := k.staged[b.Data.VolumeHandle]; !staged {
				if err := k.remover.RemoveBlockVolume(b.SpecName); err != nil {
					logger.V(2).Info("Cannot remove block volume directory yet", "pv", b.SpecName, "err", err)
				}
			}
		}
	}
	uids, err := os.ReadDir(k.layout.PodsDir())
	if err != nil {
		return
	}
	for _, e := range uids {
		if !e.IsDir() || live[types.UID(e.Name())] {
			continue
		}
		if _, err := k.remover.RemovePodDirIfUnused(e.Name()); err != nil {
			logger.V(2).Info("Cannot remove orphaned pod directory yet", "pod", e.Name(), "err", err)
		}
	}
}

// UniqueVolumeName is the kubelet's name of a CSI volume in
// node.status.volumesInUse and volumesAttached.
func UniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(kubeletlayout.PluginName + "/" + driver + "^" + handle)
}

// reportVolumesInUse writes this driver's volumes that pods on the node
// need (attached or not) or that are still mounted into
// node.status.volumesInUse, keeping other drivers' entries. The
// list is one field that the simulated kubelets of a node's other drivers
// write too: the patch carries the resourceVersion it was computed from, so
// that a write from a stale read fails (Conflict) instead of dropping theirs,
// and the next pass writes again.
func (k *Kubelet) reportVolumesInUse(ctx context.Context, needed map[string]bool) {
	set := map[string]bool{}
	for h := range needed {
		set[string(UniqueVolumeName(k.opts.DriverName, h))] = true
	}
	for _, m := range k.published {
		set[string(UniqueVolumeName(k.opts.DriverName, m.handle))] = true
	}
	for h := range k.staged {
		set[string(UniqueVolumeName(k.opts.DriverName, h))] = true
	}
	ours := make([]string, 0, len(set))
	for n := range set {
		ours = append(ours, n)
	}
	sort.Strings(ours)
	if k.inUse != nil && strings.Join(ours, ",") == strings.Join(k.inUse, ",") {
		return
	}
	node, err := k.opts.Client.CoreV1().Nodes().Get(ctx, k.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Reading the node")
		}
		return
	}
	prefix := string(UniqueVolumeName(k.opts.DriverName, ""))
	list := []v1.UniqueVolumeName{}
	for _, n := range node.Status.VolumesInUse {
		if !strings.HasPrefix(string(n), prefix) {
			list = append(list, n)
		}
	}
	for _, n := range ours {
		list = append(list, v1.UniqueVolumeName(n))
	}
	patch, _ := json.Marshal(map[string]interface{}{
		"metadata": map[string]interface{}{"resourceVersion": node.ResourceVersion},
		"status":   map[string]interface{}{"volumesInUse": list},
	})
	if _, err := k.opts.Client.CoreV1().Nodes().Patch(ctx, k.opts.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsConflict(err) {
			klog.FromContext(ctx).V(4).Info("The node changed since it was read; reporting volumesInUse again on the next pass")
			return
		}
		klog.FromContext(ctx).Error(err, "Reporting volumesInUse")
		return
	}
	k.inUse = ours
}
