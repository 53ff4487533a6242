package attacher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// maxVolumeErrorMessage is the API server's limit on VolumeError.message;
// a longer message (a driver returning an essay) would make the status patch
// itself fail and hide the error.
const maxVolumeErrorMessage = 1024

// markAsAttached records a successful publish in the VA status.
func markAsAttached(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, metadata map[string]string) error {
	klog.FromContext(ctx).V(4).Info("Marking as attached")
	return patchVAStatus(ctx, client, va.Name, map[string]any{
		"attached":           true,
		"attachmentMetadata": metadata,
		"attachError":        nil,
	})
}

// markAsDetached ends a detach. The finalizer goes first: a VA being
// deleted without our finalizer is detached whatever its status says, while
// the reverse order (status first) would make a crash in between look like
// an attachment that may still exist and cost a second ControllerUnpublish
// (external-attacher#587). The status is then cleared; the VA may already be
// gone, which is fine.
func markAsDetached(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, finalizer string) error {
	logger := klog.FromContext(ctx)
	if err := removeFinalizer(ctx, client.StorageV1().VolumeAttachments(), va.Name, va.Finalizers, finalizer); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	logger.V(4).Info("Finalizer removed")
	err := patchVAStatus(ctx, client, va.Name, map[string]any{
		"attached":           false,
		"detachError":        nil,
		"attachmentMetadata": nil,
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// saveAttachError records err in status.attachError.
func saveAttachError(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, err error) error {
	return patchVAStatus(ctx, client, va.Name, map[string]any{"attachError": volumeError(err)})
}

// saveDetachError records err in status.detachError. A VA that is gone needs
// no error.
func saveDetachError(ctx context.Context, client kubernetes.Interface, va *storagev1.VolumeAttachment, err error) error {
	perr := patchVAStatus(ctx, client, va.Name, map[string]any{"detachError": volumeError(err)})
	if apierrors.IsNotFound(perr) {
		return nil
	}
	return perr
}

// volumeError turns err into a VolumeError. Errors that carry a gRPC status
// (from the driver, possibly wrapped) get its code in errorCode; our own
// refusals carry none, as status.FromError would report them as Unknown.
func volumeError(err error) *storagev1.VolumeError {
	msg := err.Error()
	if len(msg) > maxVolumeErrorMessage {
		msg = msg[:maxVolumeErrorMessage-3] + "..."
	}
	ve := &storagev1.VolumeError{Time: metav1.Now(), Message: msg}
	if st, ok := status.FromError(err); ok && st != nil {
		code := int32(st.Code())
		ve.ErrorCode = &code
	}
	return ve
}

func patchVAStatus(ctx context.Context, client kubernetes.Interface, name string, fields map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": fields})
	if err != nil {
		return err
	}
	_, err = client.StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// jsonPatchOp is one RFC 6902 operation. Value is always encoded, as a
// "test" for null must say null.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// addFinalizerPatch appends finalizer with an RFC 6902 patch instead of a
// merge patch of the whole list, so that a stale cached list never puts back
// a finalizer someone else removed (external-provisioner#1217). An empty or
// missing list is tested first: if someone added a finalizer meanwhile the
// patch fails and is retried with a fresh list.
func addFinalizerPatch(existing []string, finalizer string) ([]byte, error) {
	var ops []jsonPatchOp
	switch {
	case existing == nil:
		ops = []jsonPatchOp{
			{Op: "test", Path: "/metadata/finalizers", Value: nil},
			{Op: "add", Path: "/metadata/finalizers", Value: []string{finalizer}},
		}
	case len(existing) == 0:
		ops = []jsonPatchOp{
			{Op: "test", Path: "/metadata/finalizers", Value: []string{}},
			{Op: "replace", Path: "/metadata/finalizers", Value: []string{finalizer}},
		}
	default:
		ops = []jsonPatchOp{{Op: "add", Path: "/metadata/finalizers/-", Value: finalizer}}
	}
	return json.Marshal(ops)
}

// removeFinalizerPatch removes finalizer by index, guarded by a test of that
// index, so that a concurrent change of the list fails the patch instead of
// removing someone else's finalizer.
func removeFinalizerPatch(existing []string, finalizer string) ([]byte, error) {
	i := slices.Index(existing, finalizer)
	if i < 0 {
		return nil, fmt.Errorf("finalizer %q not found", finalizer)
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	return json.Marshal([]jsonPatchOp{{Op: "test", Path: path, Value: finalizer}, {Op: "remove", Path: path}})
}

// patcher is the Patch method of typed clients (VolumeAttachments, PVs).
type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

func addFinalizer[T any](ctx context.Context, c patcher[T], name string, existing []string, finalizer string) error {
	if slices.Contains(existing, finalizer) {
		return nil
	}
	patch, err := addFinalizerPatch(existing, finalizer)
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// removeFinalizer removes finalizer if present; an object that is gone has
// no finalizer to remove.
func removeFinalizer[T any](ctx context.Context, c patcher[T], name string, existing []string, finalizer string) error {
	if !slices.Contains(existing, finalizer) {
		return nil
	}
	patch, err := removeFinalizerPatch(existing, finalizer)
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// addVAFinalizerAndNodeIDPatch returns one RFC 6902 patch that adds our
// finalizer and the node-ID annotation to va, or nil when both are there.
// One patch, so that a VA never carries one without the other.
func addVAFinalizerAndNodeIDPatch(va *storagev1.VolumeAttachment, finalizer, nodeID string) ([]byte, error) {
	var ops []jsonPatchOp
	if !slices.Contains(va.Finalizers, finalizer) {
		fp, err := addFinalizerPatch(va.Finalizers, finalizer)
		if err != nil {
			return nil, err
		}
		var fops []jsonPatchOp
		if err := json.Unmarshal(fp, &fops); err != nil {
			return nil, err
		}
		ops = append(ops, fops...)
	}
	if id, ok := va.Annotations[contract.NodeIDAnnotation]; !ok || id != nodeID {
		if va.Annotations == nil {
			ops = append(ops,
				jsonPatchOp{Op: "test", Path: "/metadata/annotations", Value: nil},
				jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{contract.NodeIDAnnotation: nodeID}})
		} else {
			// "add" of an existing member replaces it (RFC 6902 4.1).
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + escapeJSONPointer(contract.NodeIDAnnotation), Value: nodeID})
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// escapeJSONPointer escapes a key for a JSON pointer (RFC 6901).
func escapeJSONPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// volumeCapability builds the CSI capability of a PV spec: block or mount
// (fsType, falling back to defaultFSType, and the PV's mount options) and
// the access mode derived from the PV's access modes, using
// SINGLE_NODE_SINGLE_WRITER / SINGLE_NODE_MULTI_WRITER only when the driver
// advertises SINGLE_NODE_MULTI_WRITER.
func volumeCapability(spec *v1.PersistentVolumeSpec, defaultFSType string, supportsSingleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(spec.AccessModes, supportsSingleNodeMultiWriter)
	if err != nil {
		return nil, err
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if spec.VolumeMode != nil && *spec.VolumeMode == v1.PersistentVolumeBlock {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		return capability, nil
	}
	fsType := ""
	if spec.CSI != nil {
		fsType = spec.CSI.FSType
	}
	if fsType == "" {
		fsType = defaultFSType
	}
	capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
		FsType:     fsType,
		MountFlags: spec.MountOptions,
	}}
	return capability, nil
}

// readOnly says whether the volume is published read-only: the PV says so,
// or its only access mode is ReadOnlyMany. The CSI spec requires false when
// the driver lacks PUBLISH_READONLY.
func readOnly(spec *v1.PersistentVolumeSpec, supportsPublishReadOnly bool) bool {
	if !supportsPublishReadOnly || spec.CSI == nil {
		return false
	}
	return spec.CSI.ReadOnly || (len(spec.AccessModes) == 1 && spec.AccessModes[0] == v1.ReadOnlyMany)
}

// nodeIDFromCSINode returns the driver's ID of the node from its CSINode.
func nodeIDFromCSINode(csiNode *storagev1.CSINode, driver string) (string, bool) {
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == driver && d.NodeID != "" {
			return d.NodeID, true
		}
	}
	return "", false
}

func hasTaint(node *v1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// isReady reports the node's Ready condition; a node without one is not
// ready (the node lifecycle controller would say Unknown).
func isReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func pvName(va *storagev1.VolumeAttachment) string {
	if va.Spec.Source.PersistentVolumeName == nil {
		return ""
	}
	return *va.Spec.Source.PersistentVolumeName
}
