package sidecar

import (
	"flag"
	"testing"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
)

// The Leases that must be one per cluster (node-fencing owner, storm guard,
// registrations) are in one namespace whatever the driver's own namespace:
// drivers installed in namespaces of their own (the usual chart layout)
// must still find one owner and one storm guard.
func TestStormGuardNamespace(t *testing.T) {
	tests := []struct {
		name                    string
		args                    []string
		leaderElectionNamespace string
		want                    string
	}{
		{name: "default", want: "kube-system"},
		{name: "not the driver's leader-election namespace", leaderElectionNamespace: "driver-a", want: "kube-system"},
		{name: "flag", args: []string{"--storm-guard-namespace=fencing"}, leaderElectionNamespace: "driver-a", want: "fencing"},
		{name: "empty flag", args: []string{"--storm-guard-namespace="}, want: "kube-system"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saved := standardflags.Configuration.LeaderElectionNamespace
			t.Cleanup(func() { standardflags.Configuration.LeaderElectionNamespace = saved })
			standardflags.Configuration.LeaderElectionNamespace = tc.leaderElectionNamespace
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			o := &FailoverOptions{}
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if got := StormGuardNamespace(o.StormGuardNamespace); got != tc.want {
				t.Errorf("StormGuardNamespace = %q, want %q", got, tc.want)
			}
		})
	}
}
