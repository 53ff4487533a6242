package failover

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

const driver = "fence.csi-fence.io"

func fr(vols ...fencingv1alpha1.FencedVolume) *fencingv1alpha1.FencingRequest {
	return &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{Volumes: vols}}
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
	withdrawn := func(fr *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
		fr.DeletionTimestamp = &now
		return fr
	}
	tests := []struct {
		name        string
		fr          *fencingv1alpha1.FencingRequest
		quarantined bool
		vas         []*storagev1.VolumeAttachment
		want        bool
	}{
		{"nothing fenced", nil, false, nil, true},
		{"quarantined with no record: never means nothing to clean", nil, true, nil, false},
		{"fence intended, outcome unknown (S8)", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", StartedTime: &now}), true, nil, false},
		{"fence refused: may still have been applied", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", StartedTime: &now, FenceError: "refused"}), true, nil, false},
		{"fenced, not cleaned: never by time", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now}), true, nil, false},
		{"cleanup failed", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanupError: "plugin down"}), true, nil, false},
		{"cleaned", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), true, nil, true},
		{"cleaned but its VA is still on the node", fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now}), true, []*storagev1.VolumeAttachment{va}, false},
		{"withdrawn, cleaned, its VA still there (a manual request on a live node)",
			withdrawn(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now, CleanedTime: &now})), true, []*storagev1.VolumeAttachment{va}, true},
		{"withdrawn, not cleaned: deleting a record never skips the cleanup",
			withdrawn(fr(fencingv1alpha1.FencedVolume{Driver: driver, VolumeHandle: "h1", FencedTime: &now})), true, nil, false},
	}
	for _, tc := range tests {
		got, why := Release(tc.fr, tc.quarantined, tc.vas, handle)
		if got != tc.want {
			t.Errorf("%s: Release = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

func pvcVol(claim string) v1.Volume {
	return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestMaintenance(t *testing.T) {
	for _, tc := range []struct {
		name string
		node v1.Node
		want bool
	}{
		{name: "in service"},
		{name: "drain in progress", want: true, node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "DrainInProgress", Status: v1.ConditionTrue}}}}},
		{name: "maintenance over", node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "MaintenanceInProgress", Status: v1.ConditionFalse}}}}},
		{name: "graceful shutdown", want: true, node: v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: "GracefulNodeShutdownInProgress", Status: v1.ConditionTrue}}}}},
		{name: "cordoned", want: true, node: v1.Node{Spec: v1.NodeSpec{Unschedulable: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Maintenance(&tc.node) != ""; got != tc.want {
				t.Errorf("Maintenance = %q, want in maintenance: %v", Maintenance(&tc.node), tc.want)
			}
		})
	}
}
