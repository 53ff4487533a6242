package attacher

import (
	"context"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// trivialHandler serves drivers without PUBLISH_UNPUBLISH_VOLUME: a VA is
// attached by saying so, with no CSI call and no finalizer.
type trivialHandler struct {
	client  kubernetes.Interface
	vaQueue Queue
	pvQueue Queue
}

// NewTrivialHandler returns the handler for drivers that need no publish.
func NewTrivialHandler(client kubernetes.Interface) Handler {
	return &trivialHandler{client: client}
}

func (h *trivialHandler) Init(vaQueue, pvQueue Queue) { h.vaQueue, h.pvQueue = vaQueue, pvQueue }

func (h *trivialHandler) SyncNewOrUpdatedVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment) {
	logger := klog.FromContext(ctx)
	if va.DeletionTimestamp != nil || va.Status.Attached {
		h.vaQueue.Forget(va.Name)
		return
	}
	if _, err := markAsAttached(ctx, h.client, va, nil); err != nil {
		logger.Error(err, "Failed to mark VolumeAttachment as attached", "VolumeAttachment", va.Name)
		h.vaQueue.AddRateLimited(va.Name)
		return
	}
	logger.V(2).Info("Marked VolumeAttachment as attached", "VolumeAttachment", va.Name)
	h.vaQueue.Forget(va.Name)
}

func (h *trivialHandler) SyncNewOrUpdatedPersistentVolume(ctx context.Context, pv *v1.PersistentVolume) {
	h.pvQueue.Forget(pv.Name)
}

func (h *trivialHandler) ReconcileVA(ctx context.Context) error { return nil }
