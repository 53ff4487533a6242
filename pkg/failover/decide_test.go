package failover

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

const driver = "fence.csi-fence.io"

func pod(volumes ...v1.Volume) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns"}, Spec: v1.PodSpec{Volumes: volumes}}
}

func pvcVol(claim string) v1.Volume {
	return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestSafeDetachEligible(t *testing.T) {
	vols := map[string]*PodVolume{
		"rwo":        {Driver: driver, VolumeHandle: "h1", PVName: "pv1"},
		"rwx":        {Driver: driver, VolumeHandle: "h2", PVName: "pv2", RWX: true},
		"other":      {Driver: "other.example.com", VolumeHandle: "h3", PVName: "pv3"},
		"other-safe": {Driver: "safe.example.com", VolumeHandle: "h4", PVName: "pv4"},
	}
	resolve := func(claim string) (*PodVolume, error) {
		if v, ok := vols[claim]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("claim %s not found", claim)
	}
	safe := func(d string) bool { return d == driver || d == "safe.example.com" }
	emptyDir := v1.Volume{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
	tests := []struct {
		name     string
		pod      *v1.Pod
		canFence bool
		want     bool
	}{
		{"RWO volume of a SafeDetach fencing driver", pod(pvcVol("rwo"), emptyDir), true, true},
		{"no volumes at all", pod(emptyDir), true, true},
		{"RWX volume never", pod(pvcVol("rwo"), pvcVol("rwx")), true, false},
		{"a non-SafeDetach driver's volume never", pod(pvcVol("rwo"), pvcVol("other")), true, false},
		{"another SafeDetach driver's volume is fine (it fences its own)", pod(pvcVol("rwo"), pvcVol("other-safe")), true, true},
		{"our driver cannot fence", pod(pvcVol("rwo")), false, false},
		{"missing claim", pod(pvcVol("missing")), true, false},
		{"inline CSI volume", pod(v1.Volume{Name: "x", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driver}}}), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := SafeDetachEligible(tc.pod, resolve, safe, driver, tc.canFence)
			if got.SafeDetach != tc.want {
				t.Errorf("SafeDetach = %v (%s), want %v", got.SafeDetach, got.Reason, tc.want)
			}
			if !got.SafeDetach && got.Reason == "" {
				t.Errorf("a refusal must say why")
			}
		})
	}
}

func fr(vols ...fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{Volumes: vols}}
}

func TestAllFenced(t *testing.T) {
	now := metav1.Now()
	vols := []PodVolume{{Driver: driver, VolumeHandle: "a"}, {Driver: "other", VolumeHandle: "b"}}
	tests := []struct {
		name string
		fr   *fencingv1alpha1.FencingRequest
		want bool
	}{
		{"no record", nil, false},
		{"one of two fenced", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "a", FencedTime: &now}), false},
		{"both fenced, by two drivers", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "a", FencedTime: &now}, fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "b", FencedTime: &now}), true},
		{"fence refused (error, no time)", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "a", FenceError: "refused"}, fencingv1alpha1.FencedVolume{Driver: "other", VolumeHandle: "b", FencedTime: &now}), false},
	}
	for _, tc := range tests {
		if got := AllFenced(tc.fr, vols); got != tc.want {
			t.Errorf("%s: AllFenced = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTolerates(t *testing.T) {
	taint := v1.Taint{Key: "node.kubernetes.io/out-of-service", Effect: v1.TaintEffectNoExecute}
	forever := v1.Toleration{Operator: v1.TolerationOpExists}
	bounded := v1.Toleration{Key: taint.Key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(5))}
	if !Tolerates(&v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{forever}}}, taint) {
		t.Error("a pod tolerating everything forever must be left alone")
	}
	if Tolerates(&v1.Pod{Spec: v1.PodSpec{Tolerations: []v1.Toleration{bounded}}}, taint) {
		t.Error("a bounded toleration ends")
	}
	if Tolerates(&v1.Pod{}, taint) {
		t.Error("no toleration tolerates nothing")
	}
}

func TestStormGuard(t *testing.T) {
	tests := []struct {
		name                         string
		quarantined, total, max, pct int
		already, want                bool
	}{
		{"first of ten, 50%", 0, 10, 0, 50, false, true},
		{"sixth of ten, 50%", 5, 10, 0, 50, false, false},
		{"absolute limit reached", 2, 100, 2, 0, false, false},
		{"below absolute limit", 1, 100, 2, 0, false, true},
		{"continuing a node already fenced", 5, 10, 1, 10, true, true},
		{"no limits", 99, 100, 0, 0, false, true},
		{"half of two nodes", 0, 2, 0, 50, false, true},
		{"all of one node", 0, 1, 0, 50, false, false},
	}
	for _, tc := range tests {
		got, why := StormGuard(tc.quarantined, tc.total, tc.max, tc.pct, tc.already)
		if got != tc.want {
			t.Errorf("%s: StormGuard = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

func TestRelease(t *testing.T) {
	now := metav1.Now()
	pvName := "pv1"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va1"}, Spec: storagev1.VolumeAttachmentSpec{Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}}
	handle := func(string) (string, string) { return driver, "h1" }
	tests := []struct {
		name string
		fr   *fencingv1alpha1.FencingRequest
		vas  []*storagev1.VolumeAttachment
		want bool
	}{
		{"nothing fenced", nil, nil, true},
		{"fenced, not cleaned: never by time", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now}), nil, false},
		{"cleanup failed", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanupError: "plugin down"}), nil, false},
		{"cleaned", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), nil, true},
		{"cleaned but its VA is still on the node", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), []*storagev1.VolumeAttachment{va}, false},
	}
	for _, tc := range tests {
		got, why := Release(tc.fr, tc.vas, handle)
		if got != tc.want {
			t.Errorf("%s: Release = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}
