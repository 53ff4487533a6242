// Package attacher is the VolumeAttachment controller of csi-fence-attacher:
// a drop-in for external-attacher's controller that also fences the volume
// when it is detached from a node that is not healthy.
//
// The Controller owns the informers, the queues and the workers and knows
// nothing of CSI; it hands every object to a Handler.
package attacher

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// Queue is the rate-limited work queue of VolumeAttachment or PV names.
type Queue = workqueue.TypedRateLimitingInterface[string]

// Handler syncs VolumeAttachments and PersistentVolumes.
//
// The handler owns the backoff: after processing an item it must call either
// Forget (success: reset the item's backoff) or AddRateLimited (failure: retry
// it later with exponential backoff) on the queue it came from. The
// controller only calls Done.
type Handler interface {
	// Init gives the handler the queues it must Forget/AddRateLimited on.
	Init(vaQueue, pvQueue Queue)
	// SyncNewOrUpdatedVolumeAttachment attaches, or detaches a VA that is
	// being deleted.
	SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment)
	// SyncNewOrUpdatedPersistentVolume releases the PV finalizer of a deleted
	// PV that no VA uses any more.
	SyncNewOrUpdatedPersistentVolume(ctx context.Context, pv *v1.PersistentVolume)
	// ReconcileVA compares the VAs with what the driver reports published and
	// requeues the ones that differ.
	ReconcileVA(ctx context.Context) error
}

// NewFencingRequestLister adapts the lister of a dynamic FencingRequest
// informer.
func NewFencingRequestLister(l cache.GenericLister) FencingRequestLister {
	return frLister{l}
}

type frLister struct{ l cache.GenericLister }

func (f frLister) Get(nodeName string) (*fencingv1alpha1.FencingRequest, error) {
	obj, err := f.l.Get(nodeName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return fencingv1alpha1.FromUnstructured(obj)
}
