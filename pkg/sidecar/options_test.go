/*
Copyright 2026 The fence-attacher Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package sidecar

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"

	"github.com/kubernetes-csi/external-attacher/v4/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"

	"github.com/csi-fence/fence-attacher/pkg/contract"
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

// Validate rejects only what external-attacher rejects (and an unknown
// --role); the odd values it accepts are accepted, with a warning.
func TestValidate(t *testing.T) {
	tests := []struct {
		args     []string
		wantErr  string
		warnings int
	}{
		{args: []string{"--timeout=5s", "--worker-threads=1", "--max-entries=100", "--role=node", "--resync=0"}},
		{args: []string{"--retry-interval-start=10s", "--retry-interval-max=1s"}}, // capped by max, as in external-attacher
		{args: []string{"--timeout=0"}, warnings: 1},
		{args: []string{"--timeout=-1s"}, warnings: 1},
		{args: []string{"--retry-interval-start=0"}, warnings: 1},
		{args: []string{"--retry-interval-max=0"}},
		{args: []string{"--max-entries=-1"}, warnings: 1},
		{args: []string{"--max-entries=4294967296"}, warnings: 1},
		{args: []string{"--reconcile-sync=0"}, warnings: 1},
		{args: []string{"--resync=-1s"}},
		{args: []string{"--worker-threads=0"}, wantErr: "--worker-threads"},
		{args: []string{"--role=Controller"}, wantErr: "--role"},
		{args: []string{"--worker-threads=0", "--role=x"}, wantErr: "--role"}, // every problem is reported
	}
	for _, tc := range tests {
		o, err := parse(t, tc.args...)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.wantErr)
		}
		if w := o.Warnings(); len(w) != tc.warnings {
			t.Errorf("%v: warnings %q, want %d", tc.args, w, tc.warnings)
		}
	}
}

// The gates are the process-wide ones external-attacher's controller reads:
// what --feature-gates sets there is what it sees.
func TestFeatureGate(t *testing.T) {
	fg, err := NewFeatureGate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFeatureGate(); err != nil {
		t.Fatalf("a second call: %v", err)
	}
	if fg.Enabled(featuregate.Feature(contract.NonGracefulFailoverGate)) {
		t.Errorf("%s is on by default", contract.NonGracefulFailoverGate)
	}
	// Our default, not external-attacher's: a replica that is terminated
	// hands its Leases over instead of leaving them to expire. The
	// process-wide gate says so too, so that external-attacher's controller
	// waits for its workers before the Lease is released.
	if !fg.Enabled(features.ReleaseLeaderElectionOnExit) || !utilfeature.DefaultFeatureGate.Enabled(features.ReleaseLeaderElectionOnExit) {
		t.Errorf("%s is off by default", features.ReleaseLeaderElectionOnExit)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	AddFeatureGatesFlag(fs, fg)
	t.Cleanup(func() {
		if err := fg.Set("ReleaseLeaderElectionOnExit=true,NonGracefulFailover=false"); err != nil {
			t.Error(err)
		}
	})
	if err := fs.Parse([]string{"--feature-gates=ReleaseLeaderElectionOnExit=false,NonGracefulFailover=true"}); err != nil {
		t.Fatal(err)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.ReleaseLeaderElectionOnExit) || !fg.Enabled(featuregate.Feature(contract.NonGracefulFailoverGate)) {
		t.Error("gates not set")
	}
	// An unknown gate is rejected by cmd/csi-fence-attacher's tests, in a
	// process of its own: the gate keeps a rejected value.
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
