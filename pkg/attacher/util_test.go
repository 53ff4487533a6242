package attacher

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

func TestFinalizerPatches(t *testing.T) {
	tests := []struct {
		name     string
		existing []string
		want     string
	}{
		{"no list", nil, `[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["f"]}]`},
		{"empty list", []string{}, `[{"op":"test","path":"/metadata/finalizers","value":[]},{"op":"replace","path":"/metadata/finalizers","value":["f"]}]`},
		{"other finalizers", []string{"a"}, `[{"op":"add","path":"/metadata/finalizers/-","value":"f"}]`},
	}
	for _, tc := range tests {
		b, err := addFinalizerPatch(tc.existing, "f")
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: add patch %s, %v; want %s", tc.name, b, err, tc.want)
		}
	}
	b, err := removeFinalizerPatch([]string{"a", "f", "b"}, "f")
	if want := `[{"op":"test","path":"/metadata/finalizers/1","value":"f"},{"op":"remove","path":"/metadata/finalizers/1","value":null}]`; err != nil || string(b) != want {
		t.Errorf("remove patch %s, %v; want %s", b, err, want)
	}
	if _, err := removeFinalizerPatch([]string{"a"}, "f"); err == nil {
		t.Error("removing a missing finalizer: no error")
	}
}

// The patches applied by a real JSON patch implementation (the fake
// clientset's, the same library as the API server's) do what they say,
// and a concurrent change of the list makes them fail instead of clobbering.
func TestVAPatchesApplied(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		name            string
		va              *storagev1.VolumeAttachment
		concurrent      func(*storagev1.VolumeAttachment) // change made after our read
		wantFinalizers  []string
		wantAnnotations map[string]string
		wantFail        bool
	}{
		{name: "bare VA", va: va("va1", "pv1", "node-1"), wantFinalizers: []string{fin}, wantAnnotations: map[string]string{contract.NodeIDAnnotation: "id"}},
		{name: "other finalizers and annotations kept", va: va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) {
			v.Finalizers = []string{"x"}
			v.Annotations = map[string]string{"a": "b"}
		}), wantFinalizers: []string{"x", fin}, wantAnnotations: map[string]string{"a": "b", contract.NodeIDAnnotation: "id"}},
		{name: "stale annotation replaced", va: va("va1", "pv1", "node-1", withFinalizer, withNodeIDAnnotation("old")), wantFinalizers: []string{fin}, wantAnnotations: map[string]string{contract.NodeIDAnnotation: "id"}},
		{name: "someone added a finalizer meanwhile: the patch fails rather than drop it", va: va("va1", "pv1", "node-1"),
			concurrent: func(v *storagev1.VolumeAttachment) { v.Finalizers = []string{"theirs"} }, wantFail: true},
		{name: "someone added annotations meanwhile: the patch fails rather than drop them", va: va("va1", "pv1", "node-1", withFinalizer),
			concurrent: func(v *storagev1.VolumeAttachment) { v.Annotations = map[string]string{"theirs": "x"} }, wantFail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewSimpleClientset(tc.va)
			patch, err := addVAFinalizerAndNodeIDPatch(tc.va, fin, "id")
			if err != nil {
				t.Fatal(err)
			}
			if tc.concurrent != nil {
				cur := tc.va.DeepCopy()
				tc.concurrent(cur)
				if _, err := client.StorageV1().VolumeAttachments().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			_, err = client.StorageV1().VolumeAttachments().Patch(ctx, "va1", types.JSONPatchType, patch, metav1.PatchOptions{})
			if tc.wantFail {
				if err == nil {
					t.Fatal("patch applied over a concurrent change")
				}
				return
			}
			if err != nil {
				t.Fatalf("patch %s: %v", patch, err)
			}
			got, _ := client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
			if !slices.Equal(got.Finalizers, tc.wantFinalizers) || fmt.Sprint(got.Annotations) != fmt.Sprint(tc.wantAnnotations) {
				t.Errorf("finalizers %v annotations %v", got.Finalizers, got.Annotations)
			}
		})
	}
	if p, err := addVAFinalizerAndNodeIDPatch(va("va1", "pv1", "n", withFinalizer, withNodeIDAnnotation("id")), fin, "id"); p != nil || err != nil {
		t.Errorf("nothing to do, got patch %s, %v", p, err)
	}
}

func TestRemoveFinalizerRace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	v := va("va1", "pv1", "node-1", func(v *storagev1.VolumeAttachment) { v.Finalizers = []string{"a", fin} })
	client := fake.NewSimpleClientset(v)
	// Someone removes "a" after our read: index 1 is now out of range.
	cur := v.DeepCopy()
	cur.Finalizers = []string{fin}
	if _, err := client.StorageV1().VolumeAttachments().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := removeFinalizer(ctx, client.StorageV1().VolumeAttachments(), "va1", v.Finalizers, fin); err == nil {
		t.Fatal("removed by a stale index")
	}
	// With a fresh read it works; a VA that is gone is fine.
	if err := removeFinalizer(ctx, client.StorageV1().VolumeAttachments(), "va1", cur.Finalizers, fin); err != nil {
		t.Fatal(err)
	}
	if err := removeFinalizer(ctx, client.StorageV1().VolumeAttachments(), "gone", cur.Finalizers, fin); err != nil {
		t.Fatalf("gone VA: %v", err)
	}
}

func TestEscapeJSONPointer(t *testing.T) {
	if got := escapeJSONPointer("csi.alpha.kubernetes.io/node-id~x"); got != "csi.alpha.kubernetes.io~1node-id~0x" {
		t.Errorf("got %q", got)
	}
}

func TestVolumeError(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode *codes.Code
	}{
		{"gRPC error", status.Error(codes.FailedPrecondition, "no"), ptr(codes.FailedPrecondition)},
		{"wrapped gRPC error", fmt.Errorf("context: %w", status.Error(codes.NotFound, "no")), ptr(codes.NotFound)},
		{"our own error", errors.New("PV not found"), nil},
	}
	for _, tc := range tests {
		ve := volumeError(tc.err)
		switch {
		case tc.wantCode == nil && ve.ErrorCode != nil:
			t.Errorf("%s: code %v, want none", tc.name, *ve.ErrorCode)
		case tc.wantCode != nil && (ve.ErrorCode == nil || codes.Code(*ve.ErrorCode) != *tc.wantCode):
			t.Errorf("%s: code %v, want %v", tc.name, ve.ErrorCode, *tc.wantCode)
		}
		if ve.Message != tc.err.Error() || ve.Time.IsZero() {
			t.Errorf("%s: %+v", tc.name, ve)
		}
	}
}

func ptr[T any](v T) *T { return &v }
