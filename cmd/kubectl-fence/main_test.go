package main

import (
	"strings"
	"testing"
)

// Arguments are refused before any API access (the kubeconfig here does not
// exist: reaching the API would fail differently).
func TestTerminateArguments(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"terminate", "--reason=x"}, "exactly one pod/NAME"},
		{[]string{"terminate", "db-0", "--reason=x"}, "not pod/NAME"},
		{[]string{"terminate", "deployment/web", "--reason=x"}, "only pods"},
		{[]string{"terminate", "pod/", "--reason=x"}, "not pod/NAME"},
		{[]string{"terminate", "pod/db-0"}, "--reason is required"},
		{[]string{"terminate", "pod/a", "pod/b", "--reason=x"}, "exactly one"},
		// Flags after the name, as kubectl takes them: parsed, then the
		// (missing) kubeconfig is the first thing that fails.
		{[]string{"terminate", "pod/db-0", "--reason=x", "-n", "ns", "--kubeconfig=/nonexistent/kubeconfig"}, "nonexistent"},
	} {
		err := dispatch(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

// The grace period as kubectl delete takes it: 0 alone becomes 1 (a
// graceful delete, so that a pod on a live node is not force-deleted by a
// slip), --force with 0 (or no grace period) is a force delete, with
// kubectl's warning, and --force with another grace period is ignored,
// with a warning.
func TestTerminateGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		wantGrace   int64
		wantForce   bool
		wantWarning string
	}{
		{args: nil, wantGrace: -1},
		{args: []string{"--grace-period=30"}, wantGrace: 30},
		{args: []string{"--grace-period=1"}, wantGrace: 1},
		{args: []string{"--grace-period=0"}, wantGrace: 1},
		{args: []string{"--grace-period=-1"}, wantGrace: -1},
		{args: []string{"--grace-period=0", "--force"}, wantGrace: 0, wantForce: true, wantWarning: "Immediate deletion does not wait"},
		{args: []string{"--force"}, wantGrace: 0, wantForce: true, wantWarning: "Immediate deletion does not wait"},
		{args: []string{"--force", "--grace-period=5"}, wantGrace: 5, wantWarning: "--force is ignored because --grace-period is not 0"},
		{args: []string{"--force=false", "--grace-period=0"}, wantGrace: 1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseTerminate(append([]string{"pod/db-0", "--reason=x"}, tc.args...))
			if err != nil {
				t.Fatal(err)
			}
			if o.grace != tc.wantGrace || o.force != tc.wantForce {
				t.Errorf("grace period %d, force %v; want %d, %v", o.grace, o.force, tc.wantGrace, tc.wantForce)
			}
			if (tc.wantWarning == "") != (o.warning == "") || !strings.Contains(o.warning, tc.wantWarning) {
				t.Errorf("warning %q, want %q", o.warning, tc.wantWarning)
			}
			done := o.done()
			if forced := strings.Contains(done, "force deleted"); forced != tc.wantForce {
				t.Errorf("output %q says force deleted: %v, want %v", done, forced, tc.wantForce)
			}
		})
	}
}
