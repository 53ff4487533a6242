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
