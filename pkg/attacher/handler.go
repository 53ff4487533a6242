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

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
)

// vaByNodeIndex indexes VolumeAttachments by spec.nodeName, so that a change
// of a node's health finds the attachments whose next sync it changes.
const vaByNodeIndex = "csi-fence-attacher/va-by-node"

// vaUnattachedIndex indexes, under vaUnattached, the VolumeAttachments of
// this driver that are to be attached and whose attach has not failed: the
// attaches a detach gives way to (deferDetach).
const (
	vaUnattachedIndex = "csi-fence-attacher/va-unattached"
	vaUnattached      = "unattached"
)

// maxDetachDeferral bounds how long a detach's sync gives way to attaches,
// from the first time it did. Giving way is worth it while the attaches are
// the queue's backlog, and 200 attaches at once, at 1000 QPS on a 2-core
// machine, are all attached in 3 to 5.5 s (cmd/fence-bench --mode=attach,
// alone); past that, attaches still arriving take their turn in the FIFO
// queue with the detach, as in external-attacher. The bound is also the
// most that an attach which only looks waiting (the cache not yet showing
// it attached, its attachError not saved) costs a detach.
const maxDetachDeferral = 5 * time.Second

// detachRetryDelay is how soon a detach that gave way before is looked at
// again when it still has to: the attaches it first went behind have been
// taken by workers, and those still waiting are newer or not queued at all,
// so looking again at this pace, rather than at once, keeps a queue holding
// only such detaches from spinning.
const detachRetryDelay = 100 * time.Millisecond

// Handler decorates external-attacher's CSI handler (controller.NewCSIHandler)
// with what the fence needs of the controller and external-attacher does
// not do:
//
//   - each sync's context carries the VolumeAttachment being synced, from
//     which Attacher takes the Node of a deleted node's attachment, the PV of
//     its single-node check, the node IDs the volume was published to and
//     the object its Events are about;
//   - the node ID an attach's sync is about to replace is recorded on the
//     VolumeAttachment before external-attacher's sync runs
//     (Attacher.RecordPreviousNodeID), and that sync does not run until it
//     is;
//   - a change of a node's health (Ready, quarantine or out-of-service
//     taint) or of its FencingRequest requeues the node's VolumeAttachments
//     at once, so that a detach in backoff is fenced, and a publish refused
//     for quarantine retried, without waiting for the backoff to expire; so
//     does the kubelet's release of a volume of the driver (volumesInUse),
//     which a detach that cannot be fenced waits for;
//   - the deletion of a VolumeAttachment requeues the other attachments of
//     its PV, whose publish the single-node check may have refused;
//   - a fenced detach hands its fence to Attacher's fence pool, and removes
//     its finalizer once the fence is recorded, before and instead of
//     external-attacher's sync, which would add a VolumeAttachment write to
//     each of the two (Attacher.detachAhead);
//   - a VolumeAttachment whose fence is under way in Attacher's fence pool
//     is not synced: its detach could only say so again, with a write of
//     its detachError and live reads each time its backoff expires, which
//     a burst of fences would multiply. The end of the fence requeues it
//     (Connect);
//   - attaches go before detaches (external-attacher issue #761): a
//     detach's sync does not take a worker while an attach of this driver
//     waits for one, see deferDetach.
//
// The backoff stays external-attacher's: the inner handler still Forgets or
// AddRateLimits every item it syncs; Handler only Adds.
type Handler struct {
	controller.Handler
	driverName string
	vas        cache.Indexer
	vaQueue    workqueue.TypedRateLimitingInterface[string]
	// fencing reports a fence under way (Attacher.Fencing); nil: none.
	fencing func(vaName string) bool
	// recordPreviousNodeID is Attacher.RecordPreviousNodeID; nil: nothing
	// is recorded.
	recordPreviousNodeID func(context.Context, *storagev1.VolumeAttachment) (*storagev1.VolumeAttachment, error)
	// detachAhead is Attacher.detachAhead; nil: every detach is synced.
	detachAhead func(context.Context, *storagev1.VolumeAttachment) aheadOutcome
	clock       clock.PassiveClock

	mu sync.Mutex
	// attaching counts the syncs of each attach under way in a worker.
	attaching map[string]int
	// deferred is when each detach first gave way to attaches, since the
	// last time its sync ran.
	deferred map[string]time.Time
}

var _ controller.Handler = &Handler{}

// NewHandler wraps inner. vaInformer must be the informer the controller
// watches VolumeAttachments with; it must not have started yet (an index is
// added to it).
func NewHandler(inner controller.Handler, driverName string, vaInformer cache.SharedIndexInformer) (*Handler, error) {
	h := &Handler{Handler: inner, driverName: driverName, vas: vaInformer.GetIndexer(), clock: clock.RealClock{},
		attaching: map[string]int{}, deferred: map[string]time.Time{}}
	if err := vaInformer.AddIndexers(cache.Indexers{vaByNodeIndex: indexVAByNode, vaUnattachedIndex: h.indexUnattached}); err != nil {
		return nil, fmt.Errorf("indexing VolumeAttachments: %w", err)
	}
	if _, err := vaInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: h.vaDeleted}); err != nil {
		return nil, err
	}
	return h, nil
}

// Init implements controller.Handler.
func (h *Handler) Init(vaQueue, pvQueue workqueue.TypedRateLimitingInterface[string]) {
	h.vaQueue = vaQueue
	h.Handler.Init(vaQueue, pvQueue)
}

// Connect connects the handler to a, the Attacher of its inner handler:
// the previous node ID of an attach is recorded before its sync
// (Attacher.RecordPreviousNodeID); and to a's fence pool: the
// VolumeAttachment of a fence that is over is synced at once, none is
// synced while its fence is under way, and the fence workers give way to
// attaches waiting for a worker (fencePool.giveWay). Call it before the
// controller runs.
func (h *Handler) Connect(a *Attacher) {
	h.recordPreviousNodeID = a.RecordPreviousNodeID
	h.detachAhead = a.detachAhead
	h.fencing = a.Fencing
	a.OnFenceDone(h.Requeue)
	if a.fences != nil {
		a.fences.setAttachesWaiting(h.attachesWaiting)
	}
}

// attachesWaiting reports whether an attach of this driver waits for a
// worker (waitingAttach); the fence pool gives way to it.
func (h *Handler) attachesWaiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vaQueue != nil && h.waitingAttach() != ""
}

// SyncNewOrUpdatedVolumeAttachment implements controller.Handler.
func (h *Handler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	if va.DeletionTimestamp != nil && h.fencing != nil && h.fencing(va.Name) {
		// Left out of the queue (no Forget, no backoff): the end of the
		// fence adds it again.
		klog.FromContext(ctx).V(4).Info("Fence under way: the detach waits for it", "VolumeAttachment", va.Name)
		return
	}
	if va.DeletionTimestamp != nil {
		if h.deferDetach(ctx, va.Name) {
			return
		}
		if h.detachAhead != nil {
			switch h.detachAhead(ctx, va) {
			case aheadFenceQueued:
				// Not Forgotten, not in backoff: the end of the fence adds
				// it again, and a fence that failed then backs off as the
				// sync's failures do.
				return
			case aheadDetached:
				if h.vaQueue != nil {
					h.vaQueue.Forget(va.Name)
				}
				return
			}
		}
	} else {
		name := va.Name
		h.mu.Lock()
		h.attaching[name]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			if h.attaching[name]--; h.attaching[name] <= 0 {
				delete(h.attaching, name)
			}
			h.mu.Unlock()
		}()
		if h.recordPreviousNodeID != nil {
			var err error
			if va, err = h.recordPreviousNodeID(ctx, va); err != nil {
				// external-attacher's sync would write the new node ID
				// over the only name of the old one: it waits, with the
				// backoff of its own failures.
				klog.FromContext(ctx).V(2).Info("Error processing", "err", err)
				if h.vaQueue != nil {
					h.vaQueue.AddRateLimited(name)
				}
				return
			}
		}
	}
	h.Handler.SyncNewOrUpdatedVolumeAttachment(withVolumeAttachment(ctx, va), va)
}

// deferDetach puts the detach of vaName back in the queue, without syncing
// it, while an attach of this driver waits for a worker, and reports whether
// it did. external-attacher has one FIFO queue: each detach of a burst (a
// status patch, a detachError saying a fence is under way, a finalizer
// removal) would otherwise hold a worker and API requests ahead of every
// attach queued after it. Giving way costs no API request and no backoff:
// the detach is Added, not rate-limited, so it comes back behind the
// attaches queued now, its backoff untouched.
//
// An attach waits when its VolumeAttachment, in the informer's cache, is to
// be attached and is not being synced; one whose attach failed (attachError)
// is in backoff, not waiting, and one being synced does not need the worker
// the detach would take. A sync of a detach gives way for at most
// maxDetachDeferral from its first time, then runs whatever waits: nothing
// starves, and an attach that only looks waiting (the cache lags) holds it no
// longer than that. After its first time, a detach that gives way again
// comes back after detachRetryDelay, not at once. (A fenced detach is synced
// twice, to hand its fence to the pool and, once it is over, to end the
// detach: each sync may give way.)
//
// This does not slow a failover. A failover is a detach, then an attach of
// the same volume, and the attach/detach controller creates the
// replacement's VolumeAttachment of a ReadWriteOnce volume only once the old
// one's detach is over: the attaches that go first never wait on a detach
// they delay; they are unrelated, or failovers whose detach is done, which
// now end sooner. (One that did wait on it would be refused by Attacher's
// single-node check, get an attachError and stop waiting.) The work is the
// same, only reordered, so a burst of detaches is over about when it was,
// and no sync of a detach is later by more than the bound. The fences run
// in Attacher's pool, on workers of their own, untouched: a detach that
// gives way hands its fence over later, but no fence under way waits for an
// attach. And since a detach is only delayed, never skipped, and every
// publish is decided on the same checks as before, no volume gets attached
// to two nodes (S1).
func (h *Handler) deferDetach(ctx context.Context, vaName string) bool {
	if h.vaQueue == nil {
		return false // not Init'ed: nowhere to put it back
	}
	logger := klog.FromContext(ctx)
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	first, before := h.deferred[vaName]
	waiting := h.waitingAttach()
	if waiting == "" || (before && now.Sub(first) >= maxDetachDeferral) {
		if before {
			logger.V(4).Info("Detach no longer gives way to attaches", "deferredFor", now.Sub(first), "waitingAttach", waiting)
		}
		delete(h.deferred, vaName)
		return false
	}
	if !before {
		h.deferred[vaName] = now
		logger.V(4).Info("Attach waiting: the detach goes behind it", "waitingAttach", waiting)
		h.vaQueue.Add(vaName)
		return true
	}
	logger.V(5).Info("Attach still waiting: the detach goes behind it again", "waitingAttach", waiting, "deferredFor", now.Sub(first))
	h.vaQueue.AddAfter(vaName, detachRetryDelay)
	return true
}

// waitingAttach returns an attach of this driver that waits for a worker, or
// "" if none does. h.mu must be held.
func (h *Handler) waitingAttach() string {
	names, err := h.vas.IndexKeys(vaUnattachedIndex, vaUnattached)
	if err != nil {
		return ""
	}
	for _, name := range names {
		if h.attaching[name] == 0 {
			return name
		}
	}
	return ""
}

// indexUnattached indexes the VolumeAttachments of this driver that are to
// be attached and have not failed to be.
func (h *Handler) indexUnattached(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Attacher != h.driverName || va.DeletionTimestamp != nil || va.Status.Attached || va.Status.AttachError != nil {
		return nil, nil
	}
	return []string{vaUnattached}, nil
}

// Requeue syncs the VolumeAttachment again at once, e.g. when its fence is
// over (Attacher.OnFenceDone). A VolumeAttachment in backoff is synced now;
// its backoff stays as external-attacher left it.
func (h *Handler) Requeue(vaName string) {
	if h.vaQueue != nil {
		h.vaQueue.Add(vaName)
	}
}

// WatchNodes requeues a node's VolumeAttachments when its health changes.
func (h *Handler) WatchNodes(nodeInformer cache.SharedIndexInformer) error {
	_, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.nodeAddedOrDeleted,
		UpdateFunc: h.nodeUpdated,
		DeleteFunc: h.nodeAddedOrDeleted,
	})
	return err
}

// WatchFencingRequests requeues a node's VolumeAttachments when what
// Attacher reads from its FencingRequest changes.
func (h *Handler) WatchFencingRequests(frInformer cache.SharedIndexInformer) error {
	_, err := frInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    h.fencingRequestAddedOrDeleted,
		UpdateFunc: h.fencingRequestUpdated,
		DeleteFunc: h.fencingRequestAddedOrDeleted,
	})
	return err
}

func indexVAByNode(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// vaDeleted forgets that the VolumeAttachment gave way to attaches, and
// requeues the other attachments of its PV that wait to be published: the
// single-node check may have refused them while this one was there, and
// their backoff would add seconds to every failover.
func (h *Handler) vaDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok {
		return
	}
	h.mu.Lock()
	delete(h.deferred, va.Name)
	h.mu.Unlock()
	if pvName(va) == "" {
		return
	}
	for _, o := range h.vas.List() {
		other, ok := o.(*storagev1.VolumeAttachment)
		if ok && other.Name != va.Name && other.Spec.Attacher == h.driverName && pvName(other) == pvName(va) &&
			other.DeletionTimestamp == nil && !other.Status.Attached {
			h.vaQueue.Add(other.Name)
		}
	}
}

// nodeHealth is what DecideFence and QuarantineRefusal read from a Node.
type nodeHealth struct {
	ready, quarantined, outOfService bool
}

func healthOf(n *v1.Node) nodeHealth {
	return nodeHealth{
		ready:        isReady(n),
		quarantined:  hasTaint(n, contract.QuarantineTaintKey),
		outOfService: hasTaint(n, contract.OutOfServiceTaintKey),
	}
}

func (h *Handler) nodeAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*v1.Node); ok {
		h.enqueueVAsOnNode(n.Name)
	}
}

// nodeUpdated ignores the heartbeats: only a change of health matters, and
// a volume of this driver the kubelet no longer uses (a detach may wait for
// it to unmount the volume, see Attacher.Detach).
func (h *Handler) nodeUpdated(oldObj, newObj any) {
	o, ok1 := oldObj.(*v1.Node)
	n, ok2 := newObj.(*v1.Node)
	if ok1 && ok2 && (healthOf(o) != healthOf(n) || h.noLongerInUse(o, n)) {
		h.enqueueVAsOnNode(n.Name)
	}
}

// noLongerInUse reports whether a volume of this driver left the node's
// status.volumesInUse between o and n.
func (h *Handler) noLongerInUse(o, n *v1.Node) bool {
	prefix := string(kubeletlayout.UniqueVolumeName(h.driverName, ""))
	for _, u := range o.Status.VolumesInUse {
		if strings.HasPrefix(string(u), prefix) && !slices.Contains(n.Status.VolumesInUse, u) {
			return true
		}
	}
	return false
}

func (h *Handler) fencingRequestAddedOrDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if fr, err := fencingv1alpha1.FromUnstructured(obj); err == nil {
		h.enqueueVAsOnNode(fr.Name)
	}
}

// fencingRequestUpdated requeues the node's VolumeAttachments when what
// DecideFence reads from the request changed: whether it is an active manual
// one, and which of this driver's volumes may be quarantined there.
func (h *Handler) fencingRequestUpdated(oldObj, newObj any) {
	o, err1 := fencingv1alpha1.FromUnstructured(oldObj)
	n, err2 := fencingv1alpha1.FromUnstructured(newObj)
	if err1 != nil || err2 != nil {
		return
	}
	if o.ManualActive() != n.ManualActive() || !slices.Equal(h.quarantinedHandles(o), h.quarantinedHandles(n)) {
		h.enqueueVAsOnNode(n.Name)
	}
}

func (h *Handler) quarantinedHandles(fr *fencingv1alpha1.FencingRequest) []string {
	var out []string
	for _, v := range fr.Status.Volumes {
		if v.Driver == h.driverName && v.CleanedTime == nil {
			out = append(out, v.VolumeHandle)
		}
	}
	slices.Sort(out)
	return out
}

func (h *Handler) enqueueVAsOnNode(nodeName string) {
	objs, err := h.vas.ByIndex(vaByNodeIndex, nodeName)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && va.Spec.Attacher == h.driverName {
			h.vaQueue.Add(va.Name)
		}
	}
}

type vaKey struct{}

// withVolumeAttachment returns ctx carrying va: external-attacher's handler
// passes its context on to the Attacher's calls it makes for va.
func withVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) context.Context {
	return context.WithValue(ctx, vaKey{}, va)
}

// volumeAttachmentFrom returns the VolumeAttachment ctx carries, or nil.
func volumeAttachmentFrom(ctx context.Context) *storagev1.VolumeAttachment {
	va, _ := ctx.Value(vaKey{}).(*storagev1.VolumeAttachment)
	return va
}
