package sidecar

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"k8s.io/component-base/featuregate"
)

func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o := &Options{}
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o, o.Validate()
}

func TestOptionDefaultsAreExternalAttachers(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Timeout: 15 * time.Second, RetryIntervalStart: time.Second, RetryIntervalMax: 5 * time.Minute,
		WorkerThreads: 10, MaxEntries: 0, ReconcileSync: time.Minute, Resync: 10 * time.Minute,
		DefaultFSType: "", MaxGRPCLogLength: -1, Role: RoleController,
	}
	if *o != want {
		t.Errorf("defaults %+v, want %+v", *o, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--timeout=5s", "--worker-threads=1", "--max-entries=100", "--role=node", "--resync=0"}, ""},
		{[]string{"--retry-interval-start=10s", "--retry-interval-max=1s"}, ""}, // capped by max, as in external-attacher
		{[]string{"--worker-threads=0"}, "--worker-threads"},
		{[]string{"--timeout=0"}, "--timeout"},
		{[]string{"--timeout=-1s"}, "--timeout"},
		{[]string{"--retry-interval-start=0"}, "--retry-interval-start"},
		{[]string{"--max-entries=-1"}, "--max-entries"},
		{[]string{"--max-entries=4294967296"}, "--max-entries"},
		{[]string{"--reconcile-sync=0"}, "--reconcile-sync"},
		{[]string{"--resync=-1s"}, "--resync"},
		{[]string{"--role=Controller"}, "--role"},
		{[]string{"--worker-threads=0", "--timeout=0"}, "--timeout"}, // every problem is reported
	}
	for _, tc := range tests {
		_, err := parse(t, tc.args...)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

func TestFeatureGate(t *testing.T) {
	fg, err := NewFeatureGate()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []featuregate.Feature{ReleaseLeaderElectionOnExit, featuregate.Feature(contract.NonGracefulFailoverGate)} {
		if fg.Enabled(f) {
			t.Errorf("%s is on by default", f)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	AddFeatureGatesFlag(fs, fg)
	if err := fs.Parse([]string{"--feature-gates=ReleaseLeaderElectionOnExit=true,NonGracefulFailover=true"}); err != nil {
		t.Fatal(err)
	}
	if !fg.Enabled(ReleaseLeaderElectionOnExit) || !fg.Enabled(featuregate.Feature(contract.NonGracefulFailoverGate)) {
		t.Error("gates not set")
	}
	fs = flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	AddFeatureGatesFlag(fs, fg)
	if err := fs.Parse([]string{"--feature-gates=Bogus=true"}); err == nil {
		t.Error("an unknown gate was accepted")
	}
}

func TestHTTPAddress(t *testing.T) {
	tests := []struct {
		http, metrics, want string
		wantErr             bool
	}{
		{"", "", "", false},
		{":8080", "", ":8080", false},
		{"", ":9090", ":9090", false},
		{":8080", ":9090", "", true},
	}
	for _, tc := range tests {
		got, err := HTTPAddress(standardflags.SidecarConfiguration{HttpEndpoint: tc.http, MetricsAddress: tc.metrics})
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%+v: %q, %v", tc, got, err)
		}
	}
}
