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
	"context"
	"flag"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
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

// Issue 19 (liveness): a standby watches the kubelets' heartbeat Leases from
// the moment it is built, before it leads, so that it can judge a silent
// node down as soon as it takes over. Without it a new leader waited a whole
// lease duration (18.7-19.5 s failovers in the rolling-update trials).
func TestNewFailoverWatchesHeartbeatsBeforeItRuns(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList"})
	opts, _ := parse(t)
	fo := &FailoverOptions{}
	fo.AddFlags(flag.NewFlagSet("test", flag.ContinueOnError))
	if _, err := NewFailover(ctx, FailoverDeps{
		DriverName: drv, CanFence: true, NonGracefulFailover: true, Options: opts, Failover: fo,
		Client: client, Dynamic: dyn, ElectionClient: fake.NewClientset(), CSI: fenceDriver{&fakeDriver{}},
	}); err != nil {
		t.Fatal(err)
	}
	// The returned function is never called: this replica does not lead.
	watching := func(ctx context.Context) (bool, error) {
		for _, a := range client.Actions() {
			if a.GetVerb() == "watch" && a.GetResource().Resource == "leases" && a.GetNamespace() == nodehealth.LeaseNamespace {
				return true, nil
			}
		}
		return false, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, watching); err != nil {
		t.Fatalf("a replica that does not lead is not watching the heartbeat Leases in %s: %v", nodehealth.LeaseNamespace, err)
	}
}
