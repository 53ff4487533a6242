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

// Package nodeagent is the node role of csi-fence-attacher: a container
// beside a CSI driver's node plugin that cleans up, when a fenced node comes
// back, the volumes that were fenced on it while they failed over elsewhere
// (DESIGN.md section 5, step 7).
//
// It learns what to clean from the durable record (the status of the
// FencingRequest named after its node; pkg/fencerecord), finds the kubelet's
// leftovers of each volume (pkg/kubeletlayout), calls NodeUnpublishVolume and
// NodeUnstageVolume with force=true when the plugin advertises
// FORCE_UNPUBLISH (plainly otherwise: for a driver whose CSIDriver declares
// that its unpublish revokes access, the volume was fenced by detach, and
// detach.go says how its stale mounts are cleaned), removes the leftover
// directories as the kubelet would, and records per volume that cleanup
// succeeded, or why it failed. It never
// removes a quarantine itself: the controller role lifts it once every fenced
// volume of the node is recorded clean.
//
// Safety rules:
//   - only volumes of its own driver that the record says are fenced on its
//     node and not cleaned are touched; one fenced from another CSI node ID
//     than its plugin reports now only when the CSINodes prove the ID moved
//     on this node (nodeid.go);
//   - leftovers are attributed by their vol_data.json; without it, only by a
//     name that cannot belong to another volume (the staging directory named
//     by the hash of the recorded handle, a block volume named after the
//     recorded PV). A pod's publish directory without metadata, whose name a
//     CSI inline volume of another driver may share, gets no CSI call and is
//     removed only when named after the recorded PV and nothing in it is
//     mounted; anything else without metadata is left alone and reported;
//   - nothing that is still a mount point is removed or entered;
//   - the publish directory of a pod that still exists on the node, with
//     its vol_data.json, and the directory of a block volume such a pod
//     maps, with its own, are left to the kubelet (its unmounters need
//     them);
//   - a cleanup is recorded only after a fresh scan finds nothing left but
//     the unmounted directories left for running pods (kubeletKept); a
//     record that cannot be read, a plugin that is down or a kubelet
//     directory that cannot be read leave the volume unclean, with the reason
//     in an Event on the Node, the record's cleanupError and the metrics.
//     Nothing is ever declared clean by timeout.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/pkg/liveread"
)

// Event reasons, on the Node.
const (
	ReasonVolumeCleaned             = "FencedVolumeCleaned"
	ReasonCleanupFailed             = "FencedVolumeCleanupFailed"
	ReasonForceUnpublishUnsupported = "ForceUnpublishUnsupported"
	ReasonUnattributedLeftover      = "UnattributedVolumeLeftover"
	ReasonRecordUnreadable          = "FencingRecordUnreadable"
)

// Options configure an Agent.
type Options struct {
	// DriverName is the CSI driver whose fenced volumes this agent cleans
	// (from GetPluginInfo). Required.
	DriverName string
	// NodeName is the Kubernetes node this agent runs on, the name of its
	// FencingRequest. Required.
	NodeName string
	// KubeletDir is the kubelet's root directory as this container sees it
	// (default /var/lib/kubelet). It must show the host's mounts
	// (mountPropagation HostToContainer or Bidirectional).
	KubeletDir string
	// Conn is the connection to the node plugin. Required.
	Conn grpc.ClientConnInterface
	// Dynamic is the client for FencingRequests. Required.
	Dynamic dynamic.Interface
	// CSINodes reads the CSINodes, live, to tell whether a volume fenced
	// from a node ID the node plugin no longer reports was fenced from
	// this node (movedNodeID). Without it such a volume is never cleaned.
	CSINodes storagev1client.CSINodeInterface
	// CSIDrivers reads the driver's CSIDriver, live, to learn whether its
	// owner declares that a plain ControllerUnpublishVolume revokes the
	// node's access (contract.UnpublishRevokesAccessAnnotation). Without
	// it, or when the CSIDriver is missing or cannot be read, the driver
	// is taken as undeclared.
	CSIDrivers storagev1client.CSIDriverInterface
	// Pods lists the pods of every namespace, live, to tell the pods that
	// still exist on this node (their publish directories are the
	// kubelet's to remove, see livePods). Without it every pod is taken
	// as gone.
	Pods corev1client.PodInterface
	// Nodes reads this node, live, to tell whether its kubelet still holds
	// a block volume (status.volumesInUse): its directory is then the
	// kubelet's to remove (kubeletHolds). Without it no volume is held.
	Nodes corev1client.NodeInterface
	// Recorder records Events on the Node. Required.
	Recorder record.EventRecorder
	// Mounts tells mount points apart; default mount.New("").
	Mounts kubeletlayout.MountChecker
	// Unmounter unmounts the stale mounts a volume fenced by detach left
	// behind (detach.go); default: a lazy unmount(2) (MNT_DETACH), which
	// needs the privileges and the Bidirectional mount propagation the
	// node plugin has.
	Unmounter Unmounter
	// Timeout of each CSI call; default 30s.
	Timeout time.Duration
	// RetryIntervalStart and RetryIntervalMax bound the per-volume
	// exponential backoff after a failed cleanup; default 1s and 5m.
	RetryIntervalStart time.Duration
	RetryIntervalMax   time.Duration
	// Resync is the informer resync period: every pending volume is tried
	// again at least this often; default 1m.
	Resync time.Duration
	// Workers is the number of volumes cleaned in parallel; default 2.
	Workers int
}

func (o *Options) defaults() error {
	var missing []string
	if o.DriverName == "" {
		missing = append(missing, "DriverName")
	}
	if o.NodeName == "" {
		missing = append(missing, "NodeName")
	}
	if o.Conn == nil {
		missing = append(missing, "Conn")
	}
	if o.Dynamic == nil {
		missing = append(missing, "Dynamic")
	}
	if o.Recorder == nil {
		missing = append(missing, "Recorder")
	}
	if len(missing) > 0 {
		return fmt.Errorf("node agent options missing: %s", strings.Join(missing, ", "))
	}
	if o.KubeletDir == "" {
		o.KubeletDir = kubeletlayout.DefaultRoot
	}
	if o.Mounts == nil {
		o.Mounts = mount.New("")
	}
	if o.Unmounter == nil {
		o.Unmounter = lazyUnmounter{}
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.RetryIntervalStart <= 0 {
		o.RetryIntervalStart = time.Second
	}
	if o.RetryIntervalMax < o.RetryIntervalStart {
		o.RetryIntervalMax = max(5*time.Minute, o.RetryIntervalStart)
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	return nil
}

// Agent is the node-role controller: one per node and driver.
type Agent struct {
	opts    Options
	layout  kubeletlayout.Layout
	remover kubeletlayout.Remover
	node    csi.NodeClient
	records *fencingv1alpha1.Client
	// recorder writes the workers' outcomes together: one FencingRequest
	// per node, written by every worker of a node that came back with many
	// volumes, would otherwise cost a write and its conflicts per volume.
	recorder *fencerecord.Recorder
	nodeRef  *v1.ObjectReference

	factory  dynamicinformer.DynamicSharedInformerFactory
	informer cache.SharedIndexInformer
	lister   cache.GenericLister
	queue    workqueue.TypedRateLimitingInterface[string]

	// podReads shares the live pod LIST of this node among the workers
	// that clean volumes at the same time (a node back with many fenced
	// volumes), each still getting a LIST begun after it asked.
	podReads liveread.Group[nodePods]

	mu sync.Mutex
	// reported holds the unattributed leftovers already reported.
	reported sets.Set[string]
}

// New returns an Agent. Call RegisterMetrics once in the binary.
func New(opts Options) (*Agent, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	// Registered first: component-base's vectors create no series before.
	RegisterMetrics()
	initMetrics(opts.DriverName)
	layout := kubeletlayout.New(opts.KubeletDir)
	records := fencingv1alpha1.NewClient(opts.Dynamic)
	a := &Agent{
		opts:     opts,
		layout:   layout,
		remover:  kubeletlayout.Remover{Layout: layout, Mounts: opts.Mounts},
		node:     csi.NewNodeClient(opts.Conn),
		records:  records,
		recorder: fencerecord.NewRecorder(records),
		// The kubelet refers to its Node this way in its own Events.
		nodeRef: &v1.ObjectReference{Kind: "Node", Name: opts.NodeName, UID: types.UID(opts.NodeName)},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryIntervalStart, opts.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-fence-node-cleanup"}),
		reported: sets.New[string](),
	}
	// Only this node's request is watched.
	a.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(opts.Dynamic, opts.Resync, metav1.NamespaceAll,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.NodeName).String()
		})
	gi := a.factory.ForResource(fencingv1alpha1.Resource)
	a.informer, a.lister = gi.Informer(), gi.Lister()
	if err := a.informer.SetWatchErrorHandlerWithContext(a.watchError); err != nil {
		return nil, err
	}
	if _, err := a.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { a.requestChanged(nil, obj) },
		UpdateFunc: a.requestChanged,
		DeleteFunc: a.requestDeleted,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// Run cleans fenced volumes until ctx is done. It waits for the record to be
// readable first; while it is not, the reason is reported by watchError.
func (a *Agent) Run(ctx context.Context) {
	defer a.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("driver", a.opts.DriverName, "node", a.opts.NodeName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting node cleanup agent", "kubeletDir", a.layout.Root)
	defer logger.Info("Shutting down node cleanup agent")

	a.factory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSync("csi-fence-node-cleanup", ctx.Done(), a.informer.HasSynced) {
		return
	}
	for i := 0; i < a.opts.Workers; i++ {
		go wait.UntilWithContext(ctx, a.worker, 0)
	}
	<-ctx.Done()
}

func (a *Agent) worker(ctx context.Context) {
	for a.processNext(ctx) {
	}
}

func (a *Agent) processNext(ctx context.Context) bool {
	handle, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(handle)
	logger := klog.FromContext(ctx).WithValues("volumeHandle", handle)
	if err := a.syncVolume(klog.NewContext(ctx, logger), handle); err != nil {
		logger.Error(err, "Cleanup of fenced volume failed; retrying with backoff")
		a.queue.AddRateLimited(handle)
		return true
	}
	a.queue.Forget(handle)
	return true
}

// ---- record events ----

// pending returns the entries of fr for this driver that are fenced and not
// cleaned up.
func (a *Agent) pending(fr *fencingv1alpha1.FencingRequest) []fencingv1alpha1.FencedVolume {
	var out []fencingv1alpha1.FencedVolume
	if fr == nil || fr.Name != a.opts.NodeName {
		return nil
	}
	for _, v := range fr.Status.Volumes {
		if v.Driver == a.opts.DriverName && fencerecord.MayBeQuarantined(fr, v.Driver, v.VolumeHandle) {
			out = append(out, v)
		}
	}
	return out
}

// requestChanged enqueues the volumes that became pending, whose fence
// changed, or all pending ones on a resync. Our own status writes (a
// cleanupError) change none of these, so they do not bypass the backoff.
func (a *Agent) requestChanged(oldObj, newObj interface{}) {
	fr, err := fencingv1alpha1.FromUnstructured(newObj)
	if err != nil {
		a.recordReadError(context.TODO(), err)
		return
	}
	if fr.Name != a.opts.NodeName {
		return
	}
	now := a.pending(fr)
	pendingVolumes.WithLabelValues(a.opts.DriverName).Set(float64(len(now)))
	var old *fencingv1alpha1.FencingRequest
	if oldObj != nil {
		old, _ = fencingv1alpha1.FromUnstructured(oldObj)
	}
	resync := old != nil && old.ResourceVersion == fr.ResourceVersion
	for _, v := range now {
		var before *fencingv1alpha1.FencedVolume
		if old != nil {
			before = fencerecord.Find(old, v.Driver, v.VolumeHandle)
		}
		if resync || before == nil || !fencerecord.MayBeQuarantined(old, v.Driver, v.VolumeHandle) ||
			!before.FencedTime.Equal(v.FencedTime) {
			a.queue.Add(v.VolumeHandle)
		}
	}
}

func (a *Agent) requestDeleted(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fr, err := fencingv1alpha1.FromUnstructured(obj); err == nil && fr.Name != a.opts.NodeName {
		return
	}
	pendingVolumes.WithLabelValues(a.opts.DriverName).Set(0)
}

// watchError reports that the record cannot be read (the CRD is missing, RBAC
// denies it, the API server is unreachable): the node then stays quarantined,
// and says why.
func (a *Agent) watchError(ctx context.Context, r *cache.Reflector, err error) {
	cache.DefaultWatchErrorHandler(ctx, r, err)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a normal end of a watch
	}
	a.recordReadError(ctx, err)
}

func (a *Agent) recordReadError(ctx context.Context, err error) {
	recordErrors.WithLabelValues(a.opts.DriverName, opRead).Inc()
	klog.FromContext(ctx).Error(err, "Cannot read the fencing record of this node: fenced volumes stay quarantined", "node", a.opts.NodeName)
	a.opts.Recorder.Eventf(a.nodeRef, v1.EventTypeWarning, ReasonRecordUnreadable,
		"%s: cannot read FencingRequest %s, volumes fenced on this node stay quarantined: %v", a.opts.DriverName, a.opts.NodeName, err)
}

// ---- one volume ----

// syncVolume cleans one volume if the record says it is fenced on this node
// and not cleaned, and records the outcome.
func (a *Agent) syncVolume(ctx context.Context, handle string) error {
	logger := klog.FromContext(ctx)
	obj, err := a.lister.Get(a.opts.NodeName)
	if apierrors.IsNotFound(err) {
		return nil // nothing is fenced on this node
	}
	if err != nil {
		a.recordReadError(ctx, err)
		return err
	}
	fr, err := fencingv1alpha1.FromUnstructured(obj)
	if err != nil {
		a.recordReadError(ctx, err)
		return err
	}
	if !fencerecord.MayBeQuarantined(fr, a.opts.DriverName, handle) {
		return nil
	}
	// The cache may not have seen our own last write yet: confirm with a
	// fresh read before calling the plugin and recording anything. The
	// read is shared with the other workers' (and their outcomes' next
	// write), started after this call: it sees every write that returned.
	fr, err = a.recorder.Read(ctx, a.opts.NodeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		a.recordReadError(ctx, err)
		return err
	}
	if !fencerecord.MayBeQuarantined(fr, a.opts.DriverName, handle) {
		return nil
	}
	entry := *fencerecord.Find(fr, a.opts.DriverName, handle)

	logger = logger.WithValues("pv", entry.PersistentVolumeName)
	ctx = klog.NewContext(ctx, logger)
	// A fence whose RPC never answered has no fencedTime: logged as
	// such (klog calls String on the nil pointer otherwise).
	fenced := "never confirmed"
	if entry.FencedTime != nil {
		fenced = entry.FencedTime.String()
	}
	logger.V(2).Info("Cleaning up a volume fenced on this node", "fencedTime", fenced)
	report, err := a.cleanVolume(ctx, fr, entry)
	if err != nil {
		cleanups.WithLabelValues(a.opts.DriverName, resultError).Inc()
		a.opts.Recorder.Eventf(a.nodeRef, v1.EventTypeWarning, ReasonCleanupFailed,
			"%s: volume %s (PV %s) fenced on this node is not cleaned up, the node stays quarantined: %v",
			a.opts.DriverName, handle, entry.PersistentVolumeName, err)
		if rerr := a.recorder.RecordCleanupError(ctx, a.opts.NodeName, a.opts.DriverName, handle, err.Error()); rerr != nil {
			recordErrors.WithLabelValues(a.opts.DriverName, opUpdate).Inc()
			logger.Error(rerr, "Cannot record the cleanup error")
		}
		return err
	}
	// Only now that the cleanup is done (S8). The write is shared with the
	// other workers' outcomes; if it fails, the cleanup is not recorded and
	// is done again on the retry (it is idempotent).
	if err := a.recorder.RecordCleaned(ctx, a.opts.NodeName, a.opts.DriverName, handle); err != nil {
		recordErrors.WithLabelValues(a.opts.DriverName, opUpdate).Inc()
		cleanups.WithLabelValues(a.opts.DriverName, resultError).Inc()
		return fmt.Errorf("recording the cleanup: %w", err)
	}
	cleanups.WithLabelValues(a.opts.DriverName, resultSuccess).Inc()
	logger.Info("Cleaned up a volume fenced on this node", "steps", report)
	a.opts.Recorder.Eventf(a.nodeRef, v1.EventTypeNormal, ReasonVolumeCleaned,
		"%s: volume %s (PV %s) fenced on this node is cleaned up: %s", a.opts.DriverName, handle, entry.PersistentVolumeName, report)
	return nil
}

// nodePods are the pods of this node that still exist in the API, by UID.
// One read is shared by the workers that asked for it (Agent.podReads): it
// is never modified.
type nodePods struct {
	// exist holds every pod of this node in the API: the kubelet still
	// has to tear each one's volumes down, when it goes, with its CSI
	// unmounter, which reads the publish directory's vol_data.json.
	exist sets.Set[string]
	// deleting holds those being deleted now (a deletionTimestamp).
	deleting sets.Set[string]
}

// livePods returns the pods of this node that still exist in the API (none
// without Options.Pods).
//
// The kubelet tears down the volumes of every pod it runs, or ran, on this
// node, with the volumes it knows (those it mounted, or reconstructed from
// the disk at its start), and deletes a pod only once they are unmounted.
// Its CSI unmounter (NewUnmounter) reads the publish directory's
// vol_data.json: had the agent removed it, the kubelet would retry
// "UnmountVolume.NewUnmounter failed" forever and the pod would stay
// Terminating until the kubelet restarts. Seen on real nodes for a pod that
// was Terminating when its node came back (issue 41, the node back
// mid-fence) and for a running pod of a Ready node an admin fenced, deleted
// (drained) later (TestRealNodesManualFence). So the agent unpublishes such
// a pod's volume (force, as always) but leaves its publish directory to the
// kubelet (leaveToKubelet); when the volume is recorded clean depends on
// whether the pod is being deleted (kubeletKept).
func (a *Agent) livePods(ctx context.Context) (nodePods, error) {
	if a.opts.Pods == nil {
		return nodePods{exist: sets.New[string](), deleting: sets.New[string]()}, nil
	}
	return a.podReads.Do(ctx, a.opts.NodeName, a.listPods)
}

// listPods is the LIST behind livePods.
func (a *Agent) listPods(ctx context.Context) (nodePods, error) {
	pods := nodePods{exist: sets.New[string](), deleting: sets.New[string]()}
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	list, err := a.opts.Pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", a.opts.NodeName).String()})
	if err != nil {
		return nodePods{}, fmt.Errorf("listing the pods of this node, to leave the kubelet the publish directories of those that still exist: %w", err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != a.opts.NodeName {
			continue
		}
		pods.exist.Insert(string(p.UID))
		if p.DeletionTimestamp != nil {
			pods.deleting.Insert(string(p.UID))
		}
	}
	return pods, nil
}

// kubeletHolds reads this node live and returns the block volumes of found
// whose volume its kubelet still lists in status.volumesInUse (none when m
// has no block volume, or without Options.Nodes).
//
// The kubelet unmaps a block volume's device (NodeUnstageVolume, then the
// volume's directories) after the pods that mapped it are gone, with an
// unmapper that reads the volume's vol_data.json (NewBlockVolumeUnmapper):
// had the agent removed that file, the kubelet would retry
// "UnmapDevice.NewUnmapper failed" for ever. Seen on a real node when an
// admin drained the pod of a block volume fenced under it
// (TestRealNodesManualFence, block volume): the pod went, the agent's retry
// removed the directory before the kubelet's unmap, which had failed on
// the fenced volume's plain NodeUnstageVolume until then. The kubelet lists
// a volume in use until it is done with its device; a kubelet that never
// knew the volume (a node that booted without reconstructing it) does not,
// and the agent removes the directory itself.
func (a *Agent) kubeletHolds(ctx context.Context, vol kubeletlayout.Volume, found kubeletlayout.Match) (sets.Set[string], error) {
	held := sets.New[string]()
	if len(found.Block) == 0 || a.opts.Nodes == nil {
		return held, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	node, err := a.opts.Nodes.Get(ctx, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading this node, to leave the kubelet the block volumes it still holds: %w", err)
	}
	if slices.Contains(node.Status.VolumesInUse, kubeletlayout.UniqueVolumeName(vol.Driver, vol.VolumeHandle)) {
		for _, b := range found.Block {
			held.Insert(b.SpecName)
		}
	}
	return held, nil
}

// pluginState is what the node plugin says about itself.
type pluginState struct {
	caps   fence.NodeCapabilitySet
	nodeID string
}

func (a *Agent) plugin(ctx context.Context) (pluginState, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	caps, err := fence.GetNodeCapabilities(ctx, a.opts.Conn)
	if err != nil {
		return pluginState{}, fmt.Errorf("node plugin unavailable: NodeGetCapabilities: %w", err)
	}
	info, err := a.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return pluginState{}, fmt.Errorf("node plugin unavailable: NodeGetInfo: %w", err)
	}
	return pluginState{caps: caps, nodeID: info.GetNodeId()}, nil
}

// checkKubeletDir refuses a kubelet root that is not one: scanning a wrong or
// unmounted directory would find nothing and declare the volume clean.
func (a *Agent) checkKubeletDir() error {
	for _, sub := range []string{"pods", "plugins"} {
		fi, err := os.Stat(filepath.Join(a.layout.Root, sub))
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("%s does not look like the kubelet's root directory (no %s/ directory): refusing to declare anything clean", a.layout.Root, sub)
		}
	}
	return nil
}

// cleanVolume cleans one volume: plugin state, scan, plan, execution, and a
// fresh scan that must find nothing left. It returns a short summary.
func (a *Agent) cleanVolume(ctx context.Context, fr *fencingv1alpha1.FencingRequest, entry fencingv1alpha1.FencedVolume) (string, error) {
	logger := klog.FromContext(ctx)
	if err := a.checkKubeletDir(); err != nil {
		return "", err
	}
	ps, err := a.plugin(ctx)
	if err != nil {
		return "", err
	}
	movedFrom := ""
	if entry.NodeID != "" && ps.nodeID != entry.NodeID {
		// The record is this node's; the ID may be its past (nodeid.go).
		if err := a.checkMovedNodeID(ctx, ps.nodeID, entry.NodeID); err != nil {
			return "", fmt.Errorf("the node plugin reports node ID %q but the volume was fenced from node ID %q, and %w: not cleaning what may be another node's volume", ps.nodeID, entry.NodeID, err)
		}
		logger.Info("The volume was fenced from a node ID this node had before: cleaning it up under the new one", "fencedNodeID", entry.NodeID, "nodeID", ps.nodeID)
		movedFrom = entry.NodeID
	}
	mode := modePlain
	if ps.caps.CanForceUnpublish() {
		mode = modeForce
	} else if declared, why := a.unpublishRevokesAccess(ctx); declared {
		// The expected path of a driver fenced by its own detach
		// (detach.go): no warning.
		mode = modeDetached
		logger.V(2).Info("The driver's CSIDriver declares that its unpublish revokes access: cleaning up the stale paths with plain calls")
	} else {
		if why != "" {
			why = " (" + why + ")"
		}
		logger.Info("Warning: the node plugin does not advertise FORCE_UNPUBLISH: cleaning up with plain NodeUnpublishVolume/NodeUnstageVolume, which a driver may refuse for a fenced volume", "csiDriver", why)
		a.opts.Recorder.Eventf(a.nodeRef, v1.EventTypeWarning, ReasonForceUnpublishUnsupported,
			"%s: the node plugin does not advertise FORCE_UNPUBLISH and the driver does not declare that its unpublish revokes access (%s)%s; volume %s fenced on this node is cleaned up with plain NodeUnpublishVolume/NodeUnstageVolume calls",
			a.opts.DriverName, contract.UnpublishRevokesAccessAnnotation, why, entry.VolumeHandle)
	}

	inv, err := a.layout.Scan()
	if err != nil {
		return "", fmt.Errorf("scanning the kubelet directory: %w", err)
	}
	a.reportUnattributed(ctx, inv, fr)
	vol := kubeletlayout.Volume{Driver: a.opts.DriverName, VolumeHandle: entry.VolumeHandle, PVName: entry.PersistentVolumeName}
	pods, err := a.livePods(ctx)
	if err != nil {
		return "", err
	}
	found := inv.Match(vol)
	users := blockUsers(found, pods.exist)
	held, err := a.kubeletHolds(ctx, vol, found)
	if err != nil {
		return "", err
	}
	steps := leaveToKubelet(planCleanup(a.layout, vol, found, ps.caps.CanStage()), pods.exist, users, held)
	if err := a.execute(ctx, vol.VolumeHandle, steps, mode); err != nil {
		switch mode {
		case modePlain:
			err = fmt.Errorf("%w (the node plugin does not advertise FORCE_UNPUBLISH, so only plain calls were made)", err)
		case modeDetached:
			err = fmt.Errorf("%w (the driver declares that its unpublish revokes access: plain calls, NotFound tolerated, stale mounts unmounted)", err)
		}
		return "", err
	}

	inv, err = a.layout.Scan()
	if err != nil {
		return "", fmt.Errorf("scanning the kubelet directory after the cleanup: %w", err)
	}
	m, kept, keptBlock := kubeletKept(inv.Match(vol), pods, users)
	if err := a.checkKeptUnmounted(kept, keptBlock, users); err != nil {
		return "", err
	}
	if !m.Empty() {
		if specs := heldBlock(m, held); len(specs) > 0 {
			return "", fmt.Errorf("unpublished and unstaged, waiting for the kubelet to unmap block volume %s, which it still lists in use on this node (it cannot without its vol_data.json): %s", strings.Join(specs, ", "), strings.Join(m.Paths(a.layout), ", "))
		}
		if uids := kubeletsToRemove(m, pods.deleting, users); len(uids) > 0 {
			return "", fmt.Errorf("unpublished, waiting for the kubelet to tear down the volume directories of pods %s, which are being deleted on this node (it cannot without their vol_data.json): %s", strings.Join(uids, ", "), strings.Join(m.Paths(a.layout), ", "))
		}
		return "", fmt.Errorf("leftovers remain after the cleanup: %s", strings.Join(m.Paths(a.layout), ", "))
	}
	summary := summarize(steps, mode)
	if len(kept)+len(keptBlock) > 0 {
		uids := sets.New[string]()
		for _, p := range kept {
			uids.Insert(p.PodUID)
		}
		for _, b := range keptBlock {
			uids = uids.Union(users[b.SpecName])
		}
		summary += fmt.Sprintf("; the unmounted volume directories of running pods %s left with their vol_data.json, for the kubelet to tear down when they go", strings.Join(sets.List(uids), ", "))
	}
	if movedFrom != "" {
		summary += fmt.Sprintf("; fenced from node ID %q, which this node's plugin no longer uses (its fence at the storage is the driver's to lift)", movedFrom)
	}
	return summary, nil
}

// checkKeptUnmounted checks that nothing is mounted in what is left to the
// kubelet of pods that are not being deleted (kubeletKept): a publish
// directory and the target path in it, a block volume's directory, staging
// path and publish directory. The volume is recorded clean with them in place
// only once the forced calls have cut the pod off its volume.
func (a *Agent) checkKeptUnmounted(kept []kubeletlayout.PodVolume, keptBlock []kubeletlayout.BlockVolume, users map[string]sets.Set[string]) error {
	for _, p := range kept {
		for _, path := range []string{p.Dir, p.TargetPath} {
			if err := a.remover.CheckUnmounted(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("left to the kubelet for running pod %s after its NodeUnpublishVolume: %w", p.PodUID, err)
			}
		}
	}
	l := a.layout
	for _, b := range keptBlock {
		for _, path := range []string{l.BlockVolumeDir(b.SpecName), l.BlockStagingPath(b.SpecName), l.BlockPublishDir(b.SpecName)} {
			if err := a.remover.CheckTreeUnmounted(path); err != nil {
				return fmt.Errorf("left to the kubelet for running pods %s after their NodeUnpublishVolume and NodeUnstageVolume: %w", strings.Join(sets.List(users[b.SpecName]), ", "), err)
			}
		}
	}
	return nil
}

// execute runs the steps in order and stops at the first failure: the
// volume is not unstaged while a publish path failed, as the kubelet does.
// For a volume fenced by detach, each call is finished by afterDetachedCall
// (detach.go).
func (a *Agent) execute(ctx context.Context, handle string, steps []step, mode cleanupMode) error {
	logger := klog.FromContext(ctx)
	force := mode == modeForce
	for _, s := range steps {
		logger.V(4).Info("Cleanup step", "step", s.String(), "mode", mode.String())
		var err error
		switch s.kind {
		case stepUnpublish:
			err = a.unpublish(ctx, handle, s.path, force)
			if mode == modeDetached {
				err = a.afterDetachedCall(ctx, "NodeUnpublishVolume", s.path, err)
			}
		case stepUnstage:
			err = a.unstage(ctx, handle, s.path, force)
			if mode == modeDetached {
				err = a.afterDetachedCall(ctx, "NodeUnstageVolume", s.path, err)
			}
		case stepRemovePodVolume:
			err = a.remover.RemovePodVolume(s.podVolume)
		case stepRemoveStaged:
			err = a.remover.RemoveStaged(s.staged)
		case stepRemoveBlockPod:
			if mode == modeDetached {
				err = a.unmountStale(ctx, filepath.Join(a.layout.BlockGlobalMapPath(s.specName), s.podUID))
			}
			if err == nil {
				err = a.remover.RemoveBlockPod(s.specName, s.podUID)
			}
		case stepRemoveBlockVolume:
			err = a.remover.RemoveBlockVolume(s.specName)
		}
		if err != nil {
			if errors.Is(err, kubeletlayout.ErrStillMounted) || errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w (left in place)", s, err)
			}
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func (a *Agent) unpublish(ctx context.Context, handle, path string, force bool) error {
	req := &csi.NodeUnpublishVolumeRequest{VolumeId: handle, TargetPath: path}
	fence.SetNodeUnpublishForce(req, force)
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	_, err := a.node.NodeUnpublishVolume(ctx, req)
	return err
}

func (a *Agent) unstage(ctx context.Context, handle, path string, force bool) error {
	req := &csi.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: path}
	fence.SetNodeUnstageForce(req, force)
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	_, err := a.node.NodeUnstageVolume(ctx, req)
	return err
}

// reportUnattributed reports, once per path, leftovers without metadata that
// no recorded volume of this driver claims: they are left alone.
func (a *Agent) reportUnattributed(ctx context.Context, inv *kubeletlayout.Inventory, fr *fencingv1alpha1.FencingRequest) {
	var known []kubeletlayout.Volume
	for _, v := range fr.Status.Volumes {
		if v.Driver == a.opts.DriverName && v.FencedTime != nil {
			known = append(known, kubeletlayout.Volume{Driver: v.Driver, VolumeHandle: v.VolumeHandle, PVName: v.PersistentVolumeName})
		}
	}
	paths := inv.Unattributed(a.layout, a.opts.DriverName, known)
	unattributedLeftovers.WithLabelValues(a.opts.DriverName).Set(float64(len(paths)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range paths {
		if a.reported.Has(p) {
			continue
		}
		a.reported.Insert(p)
		klog.FromContext(ctx).Info("Warning: volume directory without readable vol_data.json matches no fenced volume; left alone", "path", p)
		a.opts.Recorder.Eventf(a.nodeRef, v1.EventTypeWarning, ReasonUnattributedLeftover,
			"%s: %s has no readable vol_data.json and matches no volume fenced on this node; it is left alone", a.opts.DriverName, p)
	}
}

func summarize(steps []step, mode cleanupMode) string {
	var unpublished, unstaged, removed int
	for _, s := range steps {
		switch s.kind {
		case stepUnpublish:
			unpublished++
		case stepUnstage:
			unstaged++
		default:
			removed++
		}
	}
	return fmt.Sprintf("%d NodeUnpublishVolume, %d NodeUnstageVolume (%s), %d leftover removals", unpublished, unstaged, mode, removed)
}
