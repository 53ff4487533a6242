// Package attacher is the VolumeAttachment controller of csi-fence-attacher:
// a drop-in for external-attacher's controller that also fences a volume when
// it is detached from a node that is not healthy.
//
// Reading order: Controller (informers, queues, workers; knows nothing of
// CSI) hands every object to a Handler. CSIHandler attaches and detaches
// through a csiclient.Attacher, deciding with DecideFence whether a detach
// must fence and refusing with PublishRefusal a publish that would break
// invariants S1/S2; the trivial handler serves drivers that need no publish.
package attacher

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/util/workqueue"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Queue is a rate-limited work queue of VolumeAttachment or PV names.
type Queue = workqueue.TypedRateLimitingInterface[string]

// Handler syncs VolumeAttachments and PersistentVolumes for the Controller.
//
// The handler owns the backoff policy. For every item it is given it must
// end with exactly one of:
//   - queue.Forget(name): the item is done (or needs nothing); its
//     exponential backoff is reset;
//   - queue.AddRateLimited(name): the item failed and is retried after the
//     item's next backoff interval (--retry-interval-start doubling up to
//     --retry-interval-max).
//
// The Controller calls Done on the queue after the sync returns, and itself
// Forgets items it drops before they reach the handler (objects that are gone
// or belong to another driver). ReconcileVA may Add items to the VA queue;
// that does not reset their backoff.
type Handler interface {
	// Init gives the handler the queues it must Forget or AddRateLimited on.
	// It is called once, before any sync.
	Init(vaQueue, pvQueue Queue)
	// SyncNewOrUpdatedVolumeAttachment attaches va, or detaches it when it
	// is being deleted. va is a copy the handler may modify.
	SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment)
	// SyncNewOrUpdatedPersistentVolume releases the PV finalizer of a PV that
	// is being deleted and that no VolumeAttachment uses any more. pv is a
	// copy the handler may modify.
	SyncNewOrUpdatedPersistentVolume(ctx context.Context, pv *v1.PersistentVolume)
	// ReconcileVA compares every VolumeAttachment with what the driver
	// reports published (ListVolumes) and requeues those that differ. The
	// Controller calls it every --reconcile-sync when the driver supports it.
	ReconcileVA(ctx context.Context) error
}

// FencingRequestLister reads the FencingRequest of a node; see
// fencingv1alpha1.NewLister.
type FencingRequestLister = fencingv1alpha1.Lister
