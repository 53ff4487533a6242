package attacher

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// trivialHandler serves drivers without PUBLISH_UNPUBLISH_VOLUME: there is
// nothing to publish, so a VA is attached by saying so. It adds no
// finalizer, so a VA's deletion completes at once, and there is nothing to
// fence: a volume that was never published to a node cannot be cut off it.
type trivialHandler struct {
	client           kubernetes.Interface
	vaQueue, pvQueue Queue
}

var _ Handler = &trivialHandler{}

// NewTrivialHandler returns the handler for drivers that need no publish.
func NewTrivialHandler(client kubernetes.Interface) Handler {
	return &trivialHandler{client: client}
}

func (h *trivialHandler) Init(vaQueue, pvQueue Queue) { h.vaQueue, h.pvQueue = vaQueue, pvQueue }

func (h *trivialHandler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	logger := klog.FromContext(ctx)
	if va.DeletionTimestamp == nil && !va.Status.Attached {
		if err := markAsAttached(ctx, h.client, va, nil); err != nil {
			logger.Error(err, "Failed to mark the VolumeAttachment as attached, will retry with backoff")
			h.vaQueue.AddRateLimited(va.Name)
			return
		}
		logger.V(2).Info("Marked the VolumeAttachment as attached")
	}
	h.vaQueue.Forget(va.Name)
}

func (h *trivialHandler) SyncNewOrUpdatedPersistentVolume(_ context.Context, pv *v1.PersistentVolume) {
	h.pvQueue.Forget(pv.Name)
}

func (h *trivialHandler) ReconcileVA(context.Context) error { return nil }
