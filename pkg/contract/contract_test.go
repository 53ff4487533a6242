package contract

import "testing"

func TestAttacherFinalizer(t *testing.T) {
	tests := []struct{ driver, want string }{
		{"csi-test", "external-attacher/csi-test"},
		{"fence.csi-fence.io", "external-attacher/fence-csi-fence-io"},
		{"odd_name/with:chars", "external-attacher/odd-name-with-chars"},
		{"ends.with.", "external-attacher/ends-with-X"},
	}
	for _, tc := range tests {
		if got := AttacherFinalizer(tc.driver); got != tc.want {
			t.Errorf("AttacherFinalizer(%q) = %q, want %q", tc.driver, got, tc.want)
		}
	}
	if got := AttacherLeaseName("a.b"); got != "external-attacher-leader-a-b" {
		t.Errorf("lease = %q", got)
	}
}
