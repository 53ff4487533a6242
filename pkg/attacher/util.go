package attacher

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// markAsAttached records a successful publish in the VA status.
func markAsAttached(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, metadata map[string]string) (*storagev1.VolumeAttachment, error) {
	return patchVAStatus(ctx, client, va.Name, map[string]interface{}{
		"attached":           true,
		"attachmentMetadata": metadata,
		"attachError":        nil,
	})
}

// markAsDetached ends a detach: the finalizer goes first, so that a crash
// between the two steps cannot make us unpublish the volume a second time
// (external-attacher#587), then the status is cleared (the VA may be gone).
func markAsDetached(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, finalizer string) error {
	if err := removeFinalizer(ctx, client.StorageV1().VolumeAttachments(), va.Name, va.Finalizers, finalizer); err != nil {
		return err
	}
	_, err := patchVAStatus(ctx, client, va.Name, map[string]interface{}{
		"attached":           false,
		"detachError":        nil,
		"attachmentMetadata": nil,
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// saveAttachError records err in status.attachError, with the gRPC code.
func saveAttachError(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, err error) error {
	_, perr := patchVAStatus(ctx, client, va.Name, map[string]interface{}{"attachError": volumeError(err)})
	return perr
}

// saveDetachError records err in status.detachError, with the gRPC code.
func saveDetachError(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, err error) error {
	_, perr := patchVAStatus(ctx, client, va.Name, map[string]interface{}{"detachError": volumeError(err)})
	if apierrors.IsNotFound(perr) {
		return nil
	}
	return perr
}

func volumeError(err error) *storagev1.VolumeError {
	ve := &storagev1.VolumeError{Time: metav1.Now(), Message: err.Error()}
	// Only errors that came from the driver carry a gRPC code; status.FromError
	// reports plain errors as Unknown, which would be a lie here.
	if st, ok := status.FromError(err); ok {
		code := int32(st.Code())
		ve.ErrorCode = &code
	}
	return ve
}

func patchVAStatus(ctx context.Context, client kubernetes.Interface, name string, fields map[string]interface{}) (*storagev1.VolumeAttachment, error) {
	patch, err := json.Marshal(map[string]interface{}{"status": fields})
	if err != nil {
		return nil, err
	}
	return client.StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
}

type jsonPatchOp struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

// addFinalizerPatch adds finalizer with an RFC 6902 patch, which appends
// without racing other writers of the list (external-provisioner#1217).
func addFinalizerPatch(existing []string, finalizer string) ([]byte, error) {
	if len(existing) == 0 {
		return json.Marshal([]jsonPatchOp{{Op: "add", Path: "/metadata/finalizers", Value: []string{finalizer}}})
	}
	return json.Marshal([]jsonPatchOp{{Op: "add", Path: "/metadata/finalizers/-", Value: finalizer}})
}

// removeFinalizerPatch removes finalizer by index, guarded by a test of that
// index, so a concurrent change of the list fails the patch instead of
// removing someone else's finalizer.
func removeFinalizerPatch(existing []string, finalizer string) ([]byte, bool, error) {
	for i, f := range existing {
		if f == finalizer {
			path := fmt.Sprintf("/metadata/finalizers/%d", i)
			b, err := json.Marshal([]jsonPatchOp{{Op: "test", Path: path, Value: finalizer}, {Op: "remove", Path: path}})
			return b, true, err
		}
	}
	return nil, false, nil
}

type finalizerPatcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

func removeFinalizer[T any](ctx context.Context, c finalizerPatcher[T], name string, existing []string, finalizer string) error {
	patch, found, err := removeFinalizerPatch(existing, finalizer)
	if err != nil || !found {
		return err
	}
	_, err = c.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func addFinalizer[T any](ctx context.Context, c finalizerPatcher[T], name string, existing []string, finalizer string) error {
	if hasString(existing, finalizer) {
		return nil
	}
	patch, err := addFinalizerPatch(existing, finalizer)
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

func hasString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// volumeCapability builds the CSI capability of a PV: block or mount (with
// fsType, falling back to defaultFSType, and mount options) and the access
// mode derived from the PV's access modes.
func volumeCapability(pv *v1.PersistentVolume, defaultFSType string, supportsSingleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(pv.Spec.AccessModes, supportsSingleNodeMultiWriter)
	if err != nil {
		return nil, fmt.Errorf("PV %s: %w", pv.Name, err)
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		return capability, nil
	}
	fsType := pv.Spec.CSI.FSType
	if fsType == "" {
		fsType = defaultFSType
	}
	capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
		FsType:     fsType,
		MountFlags: pv.Spec.MountOptions,
	}}
	return capability, nil
}

// isSingleNode reports whether the PV may be used by one node at a time.
func isSingleNode(pv *v1.PersistentVolume) bool {
	for _, m := range pv.Spec.AccessModes {
		if m == v1.ReadWriteMany || m == v1.ReadOnlyMany {
			return false
		}
	}
	return true
}
