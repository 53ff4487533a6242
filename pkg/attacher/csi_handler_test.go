package attacher

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

func objs(o ...runtime.Object) []runtime.Object { return o }

// healthy is a Ready node-1 with its CSINode.
func healthy(extra ...runtime.Object) []runtime.Object {
	return append([]runtime.Object{node("node-1"), csiNode("node-1")}, extra...)
}

func expectVA(name string, f func(t *testing.T, va *storagev1.VolumeAttachment)) func(*testing.T, *env) {
	return func(t *testing.T, e *env) { t.Helper(); f(t, e.getVA(name)) }
}

func isAttached(t *testing.T, v *storagev1.VolumeAttachment) {
	t.Helper()
	if !v.Status.Attached || v.Status.AttachError != nil {
		t.Errorf("VA status = %+v, want attached without error", v.Status)
	}
	if !slices.Contains(v.Finalizers, fin) || v.Annotations[contract.NodeIDAnnotation] != v.Spec.NodeName+"-id" {
		t.Errorf("VA finalizers %v annotations %v", v.Finalizers, v.Annotations)
	}
}

func keepsFinalizer(t *testing.T, v *storagev1.VolumeAttachment) {
	t.Helper()
	if !slices.Contains(v.Finalizers, fin) {
		t.Errorf("VA lost its finalizer: %v", v.Finalizers)
	}
	if v.Status.DetachError == nil {
		t.Error("no detachError")
	}
}

func isDetached(t *testing.T, v *storagev1.VolumeAttachment) {
	t.Helper()
	if slices.Contains(v.Finalizers, fin) || v.Status.Attached || v.Status.DetachError != nil || v.Status.AttachmentMetadata != nil {
		t.Errorf("VA not detached: finalizers %v status %+v", v.Finalizers, v.Status)
	}
}

func errorCode(want codes.Code, detach bool) func(*testing.T, *env) {
	return expectVA("va1", func(t *testing.T, v *storagev1.VolumeAttachment) {
		ve := v.Status.AttachError
		if detach {
			ve = v.Status.DetachError
		}
		if ve == nil || ve.ErrorCode == nil || codes.Code(*ve.ErrorCode) != want {
			t.Errorf("volume error %+v, want code %v", ve, want)
		}
	})
}

func hangs(c csiCall) csiCall { c.hang = true; return c }

func failOnce(verb, resource, subresource string, err error) reactor {
	done := false
	return reactor{verb: verb, resource: resource, fn: func(a clienttesting.Action) (bool, runtime.Object, error) {
		if done || a.GetSubresource() != subresource {
			return false, nil, nil
		}
		done = true
		return true, nil, err
	}}
}

func TestAttach(t *testing.T) {
	withSecretRef := func(p *v1.PersistentVolume) {
		p.Spec.CSI.ControllerPublishSecretRef = &v1.SecretReference{Namespace: "ns", Name: "publish"}
	}
	inline := func(v *storagev1.VolumeAttachment) {
		v.Spec.Source.PersistentVolumeName = nil
		v.Spec.Source.InlineVolumeSpec = &pv("", "inline-vol").Spec
	}
	runTests(t, []testCase{
		{
			name:      "attach: PV finalizer, VA finalizer and node ID, publish, status",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{{op: "attach", volume: "vol-1", nodeID: "node-1-id", capability: rwoCap, metadata: map[string]string{"lun": "7"}}}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			check: func(t *testing.T, e *env) {
				v := e.getVA("va1")
				isAttached(t, v)
				if v.Status.AttachmentMetadata["lun"] != "7" {
					t.Errorf("attachmentMetadata = %v", v.Status.AttachmentMetadata)
				}
				if p := e.getPV("pv1"); !slices.Equal(p.Finalizers, []string{fin}) {
					t.Errorf("PV finalizers %v", p.Finalizers)
				}
			},
		},
		{
			name: "attach keeps other finalizers and annotations",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", func(p *v1.PersistentVolume) { p.Finalizers = []string{"kubernetes.io/pv-protection"} }), va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) {
				v.Finalizers = []string{"other"}
				v.Annotations = map[string]string{"a": "b"}
			})), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:  "va1",
			actions: []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			check: func(t *testing.T, e *env) {
				v := e.getVA("va1")
				isAttached(t, v)
				if !slices.Equal(v.Finalizers, []string{"other", fin}) || v.Annotations["a"] != "b" {
					t.Errorf("VA finalizers %v annotations %v", v.Finalizers, v.Annotations)
				}
				if p := e.getPV("pv1"); !slices.Equal(p.Finalizers, []string{"kubernetes.io/pv-protection", fin}) {
					t.Errorf("PV finalizers %v", p.Finalizers)
				}
			},
		},
		{
			name:      "already attached: nothing to do",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer), attachedVA("va1", "pv1", "node-1"))},
			syncVA:    "va1",
		},
		{
			name:      "retry after a failed publish: finalizers and node ID are there already",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer), va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-id"))), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments/status va1"},
			check:     expectVA("va1", isAttached),
		},
		{
			name:      "a stale node ID annotation is replaced",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer), va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("old-id"))), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			check:     expectVA("va1", isAttached),
		},
		{
			name: "publish secrets are read directly from the API and passed to the driver",
			envConfig: envConfig{
				objects:  healthy(pv("pv1", "vol-1", withSecretRef), va("va1", "pv1", "node-1"), secret("ns", "publish", map[string]string{"user": "admin", "password": "s3cret"})),
				csiCalls: []csiCall{{op: "attach", volume: "vol-1", nodeID: "node-1-id", secrets: map[string]string{"user": "admin", "password": "s3cret"}}},
			},
			syncVA:  "va1",
			actions: []string{"patch persistentvolumes pv1", "get secrets ns/publish", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			check:   expectVA("va1", isAttached),
		},
		{
			name:        "missing publish secret: clear error, backoff, no publish",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1", withSecretRef), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch persistentvolumes pv1", "get secrets ns/publish", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"loading publish secret ns/publish", "not found"},
		},
		{
			name:        "missing PV: clear error, backoff, no publish, no crash",
			envConfig:   envConfig{objects: healthy(va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`PersistentVolume "pv1" of VolumeAttachment "va1" not found`},
			check: expectVA("va1", func(t *testing.T, v *storagev1.VolumeAttachment) {
				if v.Status.AttachError.ErrorCode != nil {
					t.Errorf("our own error got a gRPC code: %v", *v.Status.AttachError.ErrorCode)
				}
			}),
		},
		{
			name:        "PV being deleted: refused",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer, pvDeleted), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"being deleted"},
		},
		{
			name:        "PV of another driver: clear error",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1", func(p *v1.PersistentVolume) { p.Spec.CSI.Driver = "other.csi" }), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`belongs to CSI driver "other.csi"`},
		},
		{
			name: "PV that is not CSI: clear error",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", func(p *v1.PersistentVolume) {
				p.Spec.CSI = nil
				p.Spec.HostPath = &v1.HostPathVolumeSource{Path: "/x"}
			}), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"is not a CSI volume"},
		},
		{
			name:      "inline CSI volume: published without a PV finalizer",
			envConfig: envConfig{objects: healthy(va("va1", "", "node-1", inline)), csiCalls: []csiCall{attachCall("inline-vol", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			check:     expectVA("va1", isAttached),
		},
		{
			name:        "VA with both sources: clear error",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Source.InlineVolumeSpec = &pv("", "x").Spec }))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"both a PersistentVolume and an inline volume source"},
		},
		{
			name:        "missing CSINode: clear error, no publish",
			envConfig:   envConfig{objects: objs(node("node-1"), pv("pv1", "vol-1"), va("va1", "pv1", "node-1", withNodeIDAnnotation("node-1-id")))},
			syncVA:      "va1",
			actions:     []string{"patch persistentvolumes pv1", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`CSINode "node-1" not found`},
		},
		{
			name:        "CSINode without the driver: clear error, no publish",
			envConfig:   envConfig{objects: objs(node("node-1"), csiNode("node-1", "other.csi"), pv("pv1", "vol-1"), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch persistentvolumes pv1", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`has no node ID for driver "fence.csi.example.com"`},
		},
		{
			name:        "driver error: attachError with the gRPC code, backoff",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id").failing(status.Error(codes.ResourceExhausted, "too many attachments"))}},
			syncVA:      "va1",
			actions:     []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"too many attachments"},
			check: func(t *testing.T, e *env) {
				errorCode(codes.ResourceExhausted, false)(t, e)
				if v := e.getVA("va1"); v.Status.Attached || !slices.Contains(v.Finalizers, fin) {
					t.Errorf("VA %+v", v)
				}
			},
		},
		{
			name:        "driver hangs: cut off by --timeout, DeadlineExceeded saved, backoff",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{hangs(attachCall("vol-1", "node-1-id"))}},
			syncVA:      "va1",
			actions:     []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"DeadlineExceeded"},
			check:       errorCode(codes.DeadlineExceeded, false),
		},
		{
			name:      "driver returns an essay: the message is cut to what the API accepts",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id").failing(status.Error(codes.Internal, strings.Repeat("x", 5000)))}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			requeued:  true,
			check: expectVA("va1", func(t *testing.T, v *storagev1.VolumeAttachment) {
				if n := len(v.Status.AttachError.Message); n > 1024 || n < 1000 {
					t.Errorf("message length %d", n)
				}
			}),
		},
		{
			name:        "status patch fails: retried with backoff",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1", withPVFinalizer), va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-id"))), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}, reactors: []reactor{failOnce("patch", "volumeattachments", "status", errors.New("etcd is down"))}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: nil,
		},
	})
}

func TestAttachCapabilities(t *testing.T) {
	mode := func(modes ...v1.PersistentVolumeAccessMode) func(*v1.PersistentVolume) { return withModes(modes...) }
	noFS := func(p *v1.PersistentVolume) { p.Spec.CSI.FSType = "" }
	block := func(p *v1.PersistentVolume) { m := v1.PersistentVolumeBlock; p.Spec.VolumeMode = &m }
	ro := func(p *v1.PersistentVolume) { p.Spec.CSI.ReadOnly = true }
	ctxAttrs := func(p *v1.PersistentVolume) { p.Spec.CSI.VolumeAttributes = map[string]string{"pool": "gold"} }
	opts := func(p *v1.PersistentVolume) { p.Spec.MountOptions = []string{"noatime", "discard"} }
	attach := func(c *csi.VolumeCapability, readOnly bool, vctx map[string]string) []csiCall {
		return []csiCall{{op: "attach", volume: "vol-1", nodeID: "node-1-id", capability: c, readOnly: readOnly, volumeContext: vctx}}
	}
	done := []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"}
	tests := []struct {
		name    string
		pvMods  []func(*v1.PersistentVolume)
		caps    Capabilities
		fsType  string
		calls   []csiCall
		wantErr string
	}{
		{name: "RWO mount ext4", calls: attach(rwoCap, false, nil)},
		{name: "no fsType: --default-fstype", pvMods: []func(*v1.PersistentVolume){noFS}, fsType: "xfs", calls: attach(mountCap("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), false, nil)},
		{name: "no fsType, no default: empty", pvMods: []func(*v1.PersistentVolume){noFS}, calls: attach(mountCap("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), false, nil)},
		{name: "PV fsType wins over the default", fsType: "xfs", calls: attach(rwoCap, false, nil)},
		{name: "mount options", pvMods: []func(*v1.PersistentVolume){opts}, calls: attach(mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noatime", "discard"), false, nil)},
		{name: "block volume", pvMods: []func(*v1.PersistentVolume){block}, fsType: "xfs", calls: attach(blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), false, nil)},
		{name: "RWOP without SINGLE_NODE_MULTI_WRITER", pvMods: []func(*v1.PersistentVolume){mode(v1.ReadWriteOncePod)}, calls: attach(rwoCap, false, nil)},
		{name: "RWOP with SINGLE_NODE_MULTI_WRITER", pvMods: []func(*v1.PersistentVolume){mode(v1.ReadWriteOncePod)}, caps: Capabilities{SingleNodeMultiWriter: true}, calls: attach(mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), false, nil)},
		{name: "RWO with SINGLE_NODE_MULTI_WRITER", caps: Capabilities{SingleNodeMultiWriter: true}, calls: attach(mountCap("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER), false, nil)},
		{name: "RWX", pvMods: []func(*v1.PersistentVolume){mode(v1.ReadWriteMany)}, calls: attach(mountCap("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), false, nil)},
		{name: "read-only PV with PUBLISH_READONLY", pvMods: []func(*v1.PersistentVolume){ro}, caps: Capabilities{PublishReadOnly: true}, calls: attach(rwoCap, true, nil)},
		{name: "read-only PV without PUBLISH_READONLY: readonly must be false", pvMods: []func(*v1.PersistentVolume){ro}, calls: attach(rwoCap, false, nil)},
		{name: "ROX only with PUBLISH_READONLY: read-only", pvMods: []func(*v1.PersistentVolume){mode(v1.ReadOnlyMany)}, caps: Capabilities{PublishReadOnly: true}, calls: attach(mountCap("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY), true, nil)},
		{name: "volume context", pvMods: []func(*v1.PersistentVolume){ctxAttrs}, calls: attach(rwoCap, false, map[string]string{"pool": "gold"})},
		{name: "no access mode: clear error", pvMods: []func(*v1.PersistentVolume){mode()}, wantErr: "volume capability"},
		{name: "RWOP mixed with RWX: clear error", pvMods: []func(*v1.PersistentVolume){mode(v1.ReadWriteOncePod, v1.ReadWriteMany)}, wantErr: "volume capability"},
	}
	var cases []testCase
	for _, tc := range tests {
		c := testCase{
			name:      tc.name,
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", tc.pvMods...), va("va1", "pv1", "node-1")), caps: tc.caps, defaultFSType: tc.fsType, csiCalls: tc.calls},
			syncVA:    "va1",
			actions:   done,
		}
		if tc.wantErr != "" {
			c.actions = []string{"patch persistentvolumes pv1", "patch volumeattachments/status va1"}
			c.requeued = true
			c.errContains = []string{tc.wantErr}
		}
		cases = append(cases, c)
	}
	runTests(t, cases)
}

// S1 and S2: publishes that must not happen are refused with an attachError
// that says why, and retried with backoff; nothing reaches the driver.
func TestAttachRefusals(t *testing.T) {
	refusedActions := []string{"patch persistentvolumes pv1", "patch volumeattachments/status va1"}
	otherVA := func(mods ...func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		return va("va0", "pv1", "node-0", mods...)
	}
	runTests(t, []testCase{
		{
			name:        "S2: node carries the quarantine taint",
			envConfig:   envConfig{objects: objs(node("node-1", quarantineTaint), csiNode("node-1"), pv("pv1", "vol-1"), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     refusedActions,
			requeued:    true,
			errContains: []string{"node node-1 is quarantined", contract.QuarantineTaintKey},
			check: expectVA("va1", func(t *testing.T, v *storagev1.VolumeAttachment) {
				if slices.Contains(v.Finalizers, fin) {
					t.Error("a refused VA got our finalizer")
				}
			}),
		},
		{
			name:        "S2: the record says the volume is quarantined on the node",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseCleaning, fencedEntry("vol-1"))}},
			syncVA:      "va1",
			actions:     refusedActions,
			requeued:    true,
			errContains: []string{"volume vol-1 is quarantined on node node-1", "FencingRequest node-1"},
		},
		{
			name:      "S2: cleaned up: published again",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete, cleanedEntry("vol-1"))}, csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			check:     expectVA("va1", isAttached),
		},
		{
			name:      "S2: another volume quarantined on the node does not block this one",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-9"))}, csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
		},
		{
			name:        "S1: RWO volume still attached to another node is not published to a second one",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), otherVA(withFinalizer, attached), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     refusedActions,
			requeued:    true,
			errContains: []string{"single-node and still attached to node node-0", "VolumeAttachment va0"},
		},
		{
			name:        "S1: RWOP volume whose detach (or fence) from the other node has not succeeded yet",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1", withModes(v1.ReadWriteOncePod)), otherVA(withFinalizer, attached, deleted), va("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     refusedActions,
			requeued:    true,
			errContains: []string{"still attached to node node-0"},
		},
		{
			name:      "S1: the other attachment was detached (no finalizer): published",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), otherVA(deleted, func(v *storagev1.VolumeAttachment) { v.Finalizers = []string{"other"} }), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
		},
		{
			name:      "S1 does not apply to RWX volumes",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1", withModes(v1.ReadWriteMany)), otherVA(withFinalizer, attached), va("va1", "pv1", "node-1")), csiCalls: []csiCall{{op: "attach", volume: "vol-1", nodeID: "node-1-id"}}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
		},
		{
			name:      "S1 ignores the VolumeAttachments of other drivers",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), otherVA(withFinalizer, attached, func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other.csi" }), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			syncVA:    "va1",
			actions:   []string{"patch persistentvolumes pv1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
		},
	})
}

func TestDetach(t *testing.T) {
	withSecretRef := func(p *v1.PersistentVolume) {
		p.Spec.CSI.ControllerPublishSecretRef = &v1.SecretReference{Namespace: "ns", Name: "publish"}
	}
	detached := []string{"patch volumeattachments va1", "patch volumeattachments/status va1"}
	fenceCaps := Capabilities{Fence: true}
	runTests(t, []testCase{
		{
			name:      "graceful detach from a healthy node: plain unpublish, finalizer then status",
			envConfig: envConfig{caps: fenceCaps, objects: healthy(pv("pv1", "vol-1", withPVFinalizer), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false)}},
			syncVA:    "va1",
			actions:   detached,
			check:     expectVA("va1", isDetached),
		},
		{
			name:      "no finalizer: already detached, nothing to do",
			envConfig: envConfig{caps: fenceCaps, objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1", deleted))},
			syncVA:    "va1",
		},
		{
			name:        "driver error: detachError with the code, finalizer kept, backoff",
			envConfig:   envConfig{caps: fenceCaps, objects: healthy(pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false).failing(status.Error(codes.Internal, "array busy"))}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"array busy"},
			check: func(t *testing.T, e *env) {
				keepsFinalizer(t, e.getVA("va1"))
				errorCode(codes.Internal, true)(t, e)
			},
		},
		{
			name:        "driver hangs: cut off by --timeout, finalizer kept, backoff",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{hangs(detachCall("vol-1", "node-1-id", false))}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"DeadlineExceeded"},
			check:       expectVA("va1", keepsFinalizer),
		},
		{
			name:        "missing PV: clear error, finalizer kept, backoff",
			envConfig:   envConfig{objects: healthy(detachingVA("va1", "pv1", "node-1"))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`PersistentVolume "pv1" of VolumeAttachment "va1" not found`},
			check:       expectVA("va1", keepsFinalizer),
		},
		{
			name: "publish secrets are sent on unpublish too",
			envConfig: envConfig{
				objects:  healthy(pv("pv1", "vol-1", withSecretRef), detachingVA("va1", "pv1", "node-1"), secret("ns", "publish", map[string]string{"k": "v"})),
				csiCalls: []csiCall{{op: "detach", volume: "vol-1", nodeID: "node-1-id", secrets: map[string]string{"k": "v"}}},
			},
			syncVA:  "va1",
			actions: []string{"get secrets ns/publish", "patch volumeattachments va1", "patch volumeattachments/status va1"},
		},
		{
			name:      "CSINode gone: node ID from the VA annotation",
			envConfig: envConfig{objects: objs(node("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1", withNodeIDAnnotation("saved-id"))), csiCalls: []csiCall{detachCall("vol-1", "saved-id", false)}},
			syncVA:    "va1",
			actions:   detached,
		},
		{
			name:        "CSINode gone and no annotation: clear error",
			envConfig:   envConfig{objects: objs(node("node-1"), pv("pv1", "vol-1"), va("va1", "pv1", "node-1", withFinalizer, deleted))},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{`CSINode "node-1" not found`, "has no csi.alpha.kubernetes.io/node-id annotation"},
		},
		{
			name:      "VA gone while clearing the status: done",
			envConfig: envConfig{objects: healthy(pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false)}, reactors: []reactor{failOnce("patch", "volumeattachments", "status", apierrors.NewNotFound(storagev1.Resource("volumeattachments"), "va1"))}},
			syncVA:    "va1",
			actions:   detached,
		},
		{
			name:        "finalizer patch fails: retried with backoff",
			envConfig:   envConfig{objects: healthy(pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false)}, reactors: []reactor{failOnce("patch", "volumeattachments", "", errors.New("conflict"))}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			requeued:    true,
			errContains: []string{"removing finalizer"},
			check:       expectVA("va1", keepsFinalizer),
		},
	})
}

// Every reason for a non-graceful detach fences when the driver can, and
// records the fence before the finalizer goes; a graceful one never does.
func TestDetachFenceReasons(t *testing.T) {
	notReady := readyStatus(v1.ConditionFalse)
	unknown := readyStatus(v1.ConditionUnknown)
	manualFR := fencingRequest("node-1", fencingv1alpha1.OriginManual, fencingv1alpha1.PhasePending)
	autoFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFencing)
	doneFR := fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseComplete, cleanedEntry("vol-1"))
	tests := []struct {
		name   string
		node   *v1.Node // nil: deleted
		fr     *fencingv1alpha1.FencingRequest
		reason string // "": graceful
	}{
		{name: "healthy node", node: node("node-1")},
		{name: "healthy node with a completed FencingRequest", node: node("node-1"), fr: doneFR},
		{name: "healthy node with an unrelated NoSchedule taint", node: node("node-1", taint("example.com/maintenance", v1.TaintEffectNoSchedule))},
		{name: "node deleted", reason: FenceReasonNodeDeleted},
		{name: "Ready=False", node: node("node-1", notReady), reason: FenceReasonNodeNotReady},
		{name: "Ready=Unknown, unreachable", node: node("node-1", unknown, unreachableTaint), reason: FenceReasonNodeNotReady},
		{name: "no Ready condition", node: node("node-1", noConditions), reason: FenceReasonNodeNotReady},
		{name: "quarantine taint on a Ready node", node: node("node-1", quarantineTaint), reason: FenceReasonQuarantined},
		{name: "quarantined and NotReady", node: node("node-1", notReady, quarantineTaint), reason: FenceReasonQuarantined},
		{name: "out-of-service", node: node("node-1", notReady, outOfServiceTaint), reason: FenceReasonOutOfService},
		{name: "manual FencingRequest on a Ready node", node: node("node-1"), fr: manualFR, reason: FenceReasonFencingRequest},
		{name: "automatic FencingRequest", node: node("node-1"), fr: autoFR, reason: FenceReasonFencingRequest},
	}
	var cases []testCase
	for _, tc := range tests {
		objects := objs(pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1"))
		if tc.node != nil {
			objects = append(objects, tc.node, csiNode("node-1"))
		}
		var frs []*fencingv1alpha1.FencingRequest
		var frActions []string
		if tc.fr != nil {
			frs = append(frs, tc.fr)
		}
		c := testCase{
			name:      tc.name,
			envConfig: envConfig{caps: Capabilities{Fence: true}, objects: objects, frs: frs, csiCalls: []csiCall{detachCall("vol-1", "node-1-id", tc.reason != "")}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			check:     expectVA("va1", isDetached),
		}
		if tc.reason != "" {
			reason := tc.reason
			// Write-ahead: the intent (creating the request, or adding
			// the record finalizer to an admin's), then the outcome.
			frActions = []string{"get fencingrequests node-1"}
			if tc.fr == nil {
				frActions = append(frActions, "create fencingrequests node-1")
			} else {
				frActions = append(frActions, "update fencingrequests node-1")
			}
			c.frActions = append(frActions, "update fencingrequests/status node-1", "get fencingrequests node-1", "update fencingrequests/status node-1")
			c.events = []string{"Normal FencedUnpublish Volume vol-1 was fenced from node node-1 (" + reason + ")"}
			c.metricDeltas = map[string]float64{
				"fenced_unpublishes_total/" + reason:      1,
				"forced_detaches_total/" + reason:         1,
				"fenced_unpublish_errors_total/" + reason: 0,
			}
			c.check = func(t *testing.T, e *env) {
				isDetached(t, e.getVA("va1"))
				fr := e.getFR("node-1")
				if !fencerecord.IsFenced(fr, drv, "vol-1") {
					t.Fatalf("fence not recorded: %+v", fr)
				}
				if en := fencerecord.Find(fr, drv, "vol-1"); en.PersistentVolumeName != "pv1" || en.NodeID != "node-1-id" {
					t.Errorf("record entry %+v", en)
				}
				if fr.Spec.NodeName != "node-1" || (tc.fr == nil && (fr.Spec.Origin != fencingv1alpha1.OriginAutomatic || fr.Spec.Reason != reason)) {
					t.Errorf("FencingRequest spec %+v", fr.Spec)
				}
			}
		}
		cases = append(cases, c)
	}
	runTests(t, cases)
}

func TestDetachFenceFailures(t *testing.T) {
	notReady := node("node-1", readyStatus(v1.ConditionFalse))
	fenceCaps := Capabilities{Fence: true}
	refused := status.Error(codes.FailedPrecondition, "cannot prove node-1 stopped writing")
	runTests(t, []testCase{
		{
			name:      "driver without UNPUBLISH_FENCE: the field is never sent, even from a dead node",
			envConfig: envConfig{objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false)}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			check: func(t *testing.T, e *env) {
				if e.getFR("node-1") != nil {
					t.Error("an unfenced detach was recorded as a fence")
				}
			},
		},
		{
			name:        "refused fence: finalizer kept, detachError says refused and why, warning Event, record, backoff",
			envConfig:   envConfig{caps: fenceCaps, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", true).failing(refused)}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			frActions:   []string{"get fencingrequests node-1", "create fencingrequests node-1", "update fencingrequests/status node-1", "get fencingrequests node-1", "update fencingrequests/status node-1"},
			requeued:    true,
			events:      []string{"Warning FenceFailed the driver refused to fence volume vol-1 from node node-1 (node-not-ready)"},
			errContains: []string{"refused to fence", "node-not-ready", "cannot prove node-1 stopped writing", "stays attached"},
			metricDeltas: map[string]float64{
				"fenced_unpublish_errors_total/node-not-ready": 1,
				"fenced_unpublishes_total/node-not-ready":      0,
				"forced_detaches_total/node-not-ready":         0,
			},
			check: func(t *testing.T, e *env) {
				keepsFinalizer(t, e.getVA("va1"))
				errorCode(codes.FailedPrecondition, true)(t, e)
				fr := e.getFR("node-1")
				if !fencerecord.MayBeQuarantined(fr, drv, "vol-1") || fencerecord.IsFenced(fr, drv, "vol-1") || !strings.Contains(fencerecord.Find(fr, drv, "vol-1").FenceError, "cannot prove") {
					t.Errorf("record %+v", fr.Status)
				}
			},
		},
		{
			name:        "fence times out: failed, will retry, and the volume may be quarantined (S8)",
			envConfig:   envConfig{caps: fenceCaps, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{hangs(detachCall("vol-1", "node-1-id", true))}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			frActions:   []string{"get fencingrequests node-1", "create fencingrequests node-1", "update fencingrequests/status node-1", "get fencingrequests node-1", "update fencingrequests/status node-1"},
			requeued:    true,
			events:      []string{"Warning FenceFailed fencing volume vol-1 from node node-1 (node-not-ready) failed"},
			errContains: []string{"failed, will retry", "DeadlineExceeded"},
			check: func(t *testing.T, e *env) {
				keepsFinalizer(t, e.getVA("va1"))
				if fr := e.getFR("node-1"); !fencerecord.MayBeQuarantined(fr, drv, "vol-1") {
					t.Errorf("a timed-out fence was forgotten: %+v", fr.Status)
				}
			},
		},
		{
			name: "the intent cannot be recorded: nothing is fenced, finalizer kept, backoff",
			envConfig: envConfig{caps: fenceCaps, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")),
				frReactors: []reactor{{verb: "update", resource: "fencingrequests", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("apiserver unavailable")
				}}}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			frActions:   []string{"get fencingrequests node-1", "create fencingrequests node-1", "update fencingrequests/status node-1"},
			requeued:    true,
			errContains: []string{"not fenced from node node-1", "recording the intent"},
			check:       expectVA("va1", keepsFinalizer),
		},
		{
			name: "fenced but the outcome cannot be recorded (a crash right after the RPC): the intent says quarantined, finalizer kept",
			envConfig: envConfig{caps: fenceCaps, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", true)},
				frReactors: []reactor{{verb: "update", resource: "fencingrequests", fn: func() func(clienttesting.Action) (bool, runtime.Object, error) {
					n := 0
					return func(clienttesting.Action) (bool, runtime.Object, error) {
						if n++; n > 1 {
							return true, nil, errors.New("apiserver unavailable")
						}
						return false, nil, nil
					}
				}()}}},
			syncVA:      "va1",
			actions:     []string{"patch volumeattachments/status va1"},
			frActions:   []string{"get fencingrequests node-1", "create fencingrequests node-1", "update fencingrequests/status node-1", "get fencingrequests node-1", "update fencingrequests/status node-1"},
			requeued:    true,
			events:      []string{"Warning FenceFailed fencing volume vol-1 from node node-1 (node-not-ready) failed, will retry: volume vol-1 was fenced but the fence could not be recorded"},
			errContains: []string{"was fenced but the fence could not be recorded"},
			check: func(t *testing.T, e *env) {
				keepsFinalizer(t, e.getVA("va1"))
				if fr := e.getFR("node-1"); !fencerecord.MayBeQuarantined(fr, drv, "vol-1") || len(fr.Finalizers) == 0 {
					t.Errorf("the fence applied before the crash is not in the record: %+v", fr)
				}
			},
		},
		{
			name: "a crash between the record and the finalizer loses nothing: the retry fences again and finishes",
			envConfig: envConfig{caps: fenceCaps, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")),
				csiCalls: []csiCall{detachCall("vol-1", "node-1-id", true), detachCall("vol-1", "node-1-id", true)},
				reactors: []reactor{failOnce("patch", "volumeattachments", "", errors.New("connection reset"))}},
			steps:   []step{{syncVA: "va1"}, {syncVA: "va1"}},
			actions: []string{"patch volumeattachments va1", "patch volumeattachments/status va1", "patch volumeattachments va1", "patch volumeattachments/status va1"},
			frActions: []string{"get fencingrequests node-1", "create fencingrequests node-1", "update fencingrequests/status node-1", "get fencingrequests node-1", "update fencingrequests/status node-1",
				"get fencingrequests node-1", "get fencingrequests node-1"},
			events: []string{"Normal FencedUnpublish", "Normal FencedUnpublish"},
			metricDeltas: map[string]float64{
				"forced_detaches_total/node-not-ready": 1,
			},
			check: func(t *testing.T, e *env) {
				isDetached(t, e.getVA("va1"))
				if !fencerecord.IsFenced(e.getFR("node-1"), drv, "vol-1") {
					t.Error("record lost")
				}
			},
		},
		{
			name:      "FencingRequest API not installed: a fence nobody could lift is not sent; unpublished as external-attacher does, with a warning",
			envConfig: envConfig{caps: fenceCaps, noFencingAPI: true, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", false)}},
			syncVA:    "va1",
			actions:   []string{"patch volumeattachments va1", "patch volumeattachments/status va1"},
			events:    []string{"Warning FenceFailed Volume vol-1 detached from node node-1 (node-not-ready) without a fence"},
			metricDeltas: map[string]float64{
				"unfenced_detaches_total/node-not-ready":  1,
				"fenced_unpublishes_total/node-not-ready": 0,
			},
			check: expectVA("va1", isDetached),
		},
	})
}

func TestSyncPV(t *testing.T) {
	runTests(t, []testCase{
		{
			name: "deleted PV without VolumeAttachments: finalizer released",
			envConfig: envConfig{objects: objs(pv("pv1", "vol-1", withPVFinalizer, pvDeleted, func(p *v1.PersistentVolume) {
				p.Finalizers = append([]string{"kubernetes.io/pv-protection"}, p.Finalizers...)
			}))},
			syncPV:  "pv1",
			actions: []string{"patch persistentvolumes pv1"},
			check: func(t *testing.T, e *env) {
				if f := e.getPV("pv1").Finalizers; !slices.Equal(f, []string{"kubernetes.io/pv-protection"}) {
					t.Errorf("PV finalizers %v", f)
				}
			},
		},
		{
			name:      "deleted PV still used by a VolumeAttachment: kept",
			envConfig: envConfig{objects: objs(pv("pv1", "vol-1", withPVFinalizer, pvDeleted), detachingVA("va1", "pv1", "node-1"))},
			syncPV:    "pv1",
		},
		{
			name:      "PV not being deleted: kept",
			envConfig: envConfig{objects: objs(pv("pv1", "vol-1", withPVFinalizer))},
			syncPV:    "pv1",
		},
		{
			name:      "deleted PV without our finalizer: nothing",
			envConfig: envConfig{objects: objs(pv("pv1", "vol-1", pvDeleted, func(p *v1.PersistentVolume) { p.Finalizers = []string{"other"} }))},
			syncPV:    "pv1",
		},
		{
			name:      "PV gone: nothing",
			envConfig: envConfig{},
			syncPV:    "pv1",
		},
		{
			name:      "patch fails: retried with backoff",
			envConfig: envConfig{objects: objs(pv("pv1", "vol-1", withPVFinalizer, pvDeleted)), reactors: []reactor{failOnce("patch", "persistentvolumes", "", errors.New("conflict"))}},
			syncPV:    "pv1",
			actions:   []string{"patch persistentvolumes pv1"},
			requeued:  true,
		},
	})
}

// ReconcileVA re-syncs attachments the driver disagrees with, but never
// publishes again a volume that was fenced on its node.
func TestReconcileVA(t *testing.T) {
	pvOK := pv("pv1", "vol-1", withPVFinalizer)
	runTests(t, []testCase{
		{
			name:      "in step with the driver: nothing",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, attachedVA("va1", "pv1", "node-1"))},
			steps:     []step{{reconcile: map[string][]string{"vol-1": {"node-1-id"}}}},
		},
		{
			name:      "the driver lost an attachment: published again",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, attachedVA("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			steps:     []step{{reconcile: map[string][]string{"vol-1": {"other-node-id"}}}},
			actions:   []string{"patch volumeattachments/status va1"},
		},
		{
			name:      "the driver reports a publish the VA does not: synced again",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("node-1-id"))), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}},
			steps:     []step{{reconcile: map[string][]string{"vol-1": {"node-1-id"}}}},
			actions:   []string{"patch volumeattachments/status va1"},
		},
		{
			name: "fenced with the VA in place (record): not published again",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, attachedVA("va1", "pv1", "node-1")),
				frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))}},
			steps: []step{{reconcile: map[string][]string{"vol-1": nil}}},
		},
		{
			name:      "fenced on a quarantined node (taint): not published again",
			envConfig: envConfig{listVolumes: true, objects: objs(node("node-1", readyStatus(v1.ConditionFalse), quarantineTaint), csiNode("node-1"), pvOK, attachedVA("va1", "pv1", "node-1"))},
			steps:     []step{{reconcile: map[string][]string{}}},
		},
		{
			name: "even a sync forced some other way is refused on a quarantined volume",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, attachedVA("va1", "pv1", "node-1")),
				frs: []*fencingv1alpha1.FencingRequest{fencingRequest("node-1", fencingv1alpha1.OriginAutomatic, fencingv1alpha1.PhaseFenced, fencedEntry("vol-1"))}},
			steps: []step{{syncVA: "va1"}},
		},
		{
			name:      "VolumeAttachments of other drivers and of missing PVs are left alone",
			envConfig: envConfig{listVolumes: true, objects: healthy(pvOK, attachedVA("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Spec.Attacher = "other.csi" }), attachedVA("va2", "missing", "node-1"))},
			steps:     []step{{reconcile: map[string][]string{}}},
		},
	})
}

func TestReconcileVAListError(t *testing.T) {
	e := newEnv(t, envConfig{listVolumes: true, objects: healthy(pv("pv1", "vol-1"), attachedVA("va1", "pv1", "node-1"))})
	e.lister.err = status.Error(codes.Unavailable, "driver restarting")
	if err := e.handler.ReconcileVA(e.ctx); err == nil || !strings.Contains(err.Error(), "driver restarting") {
		t.Errorf("err = %v", err)
	}
	if e.ctrl.vaQueue.Len() != 0 {
		t.Error("a failed ListVolumes queued VolumeAttachments")
	}
}

// Without LIST_VOLUMES_PUBLISHED_NODES there is no lister and no reconcile.
func TestReconcileVADisabled(t *testing.T) {
	e := newEnv(t, envConfig{objects: healthy(pv("pv1", "vol-1"), attachedVA("va1", "pv1", "node-1"))})
	if err := e.handler.ReconcileVA(e.ctx); err != nil || e.ctrl.vaQueue.Len() != 0 {
		t.Errorf("err = %v, queued %d", err, e.ctrl.vaQueue.Len())
	}
}

func TestNewCSIHandlerRejectsIncompleteConfig(t *testing.T) {
	for name, cfg := range map[string]CSIHandlerConfig{
		"no driver":  {Timeout: timeout},
		"no timeout": {DriverName: drv},
		"no client":  {DriverName: drv, Timeout: timeout},
	} {
		if _, err := NewCSIHandler(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
