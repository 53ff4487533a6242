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

package failover

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
)

// The node-fencing Lease is released when the election's context ends, and
// runElection returns only after that: Run waits for it, so the next owner
// finds the Lease free instead of waiting for it to expire.
func TestElectionReleasesBeforeReturning(t *testing.T) {
	client := fake.NewClientset()
	ended := make(chan struct{})
	owned := make(chan struct{}, 1)
	o := &leaseOwner{}
	cfg := ElectionConfig{Client: client, Namespace: "kube-system", Identity: "replica-a_driver",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer close(ended)
		o.runElection(ctx, cfg, func() {
			if o.IsOwner() {
				select {
				case owned <- struct{}{}:
				default:
				}
			}
		})
	}()
	select {
	case <-owned:
	case <-time.After(10 * time.Second):
		t.Fatal("never took the free Lease")
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("runElection did not return after the context ended")
	}
	if o.IsOwner() {
		t.Error("still the owner after the election ended")
	}
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), contract.NodeFencingLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease still held by %q when runElection returned", *h)
	}
}

// Issue 19 hole 4: on SIGTERM the node-fencing Lease is released only once
// every worker has returned, so that no sync of the old owner runs beside
// the new one, and Run returns only once it is released, so that the
// process never exits before the release.
func TestRunReleasesTheLeaseAfterItsWorkers(t *testing.T) {
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	inFence, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.csi.before = func() {
		once.Do(func() { close(inFence) })
		<-unblock
	}
	const identity = "replica-a_" + driver
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := e.start(ctx, t, true, func(o *Options) {
		o.Election = ElectionConfig{Client: e.client, Namespace: "kube-system", Identity: identity,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}
	})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		c.Run(ctx, 2)
	}()
	select {
	case <-inFence: // only the owner quarantines, so it owns the Lease
	case <-time.After(30 * time.Second):
		t.Fatal("the owner never fenced")
	}
	cancel()
	holder := func() string {
		l, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), contract.NodeFencingLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	// The worker is still inside its fence: for as long as it is, Run does
	// not return and the Lease stays held (watched for a second: the old
	// order released it within milliseconds of the cancel).
	watch, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	for watch.Err() == nil {
		select {
		case <-returned:
			t.Fatal("Run returned while a worker was still fencing")
		case <-time.After(10 * time.Millisecond):
		}
		if h := holder(); h != identity {
			t.Fatalf("node-fencing Lease held by %q while a worker of %q is still fencing", h, identity)
		}
	}
	close(unblock)
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its workers")
	}
	if h := holder(); h != "" {
		t.Errorf("Run returned with the node-fencing Lease still held by %q", h)
	}
}

// A replica that watched the heartbeats while standing by finds a node whose
// Lease has been silent for a lease duration down the moment it takes over;
// one that starts watching only then must wait the whole duration again,
// however long the node has been silent. ObserveHeartbeats is the first;
// so is a controller built at takeover (as csi-fence-attacher builds it, on
// the permissions granted then) on a watch started before (issue 38 item 6).
func TestStandbyTimesHeartbeatsBeforeItTakesOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		// when the heartbeats are first watched: "standby" (the
		// controller built at start, ObserveHeartbeats), "before build"
		// (a watch of its own started at start, the controller built at
		// takeover on it), "takeover".
		watched  string
		wantDown bool
	}{
		{name: "watched while standing by", watched: "standby", wantDown: true},
		{name: "built at takeover on an earlier watch", watched: "before build", wantDown: true},
		{name: "watched only from takeover", watched: "takeover", wantDown: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			renewed := metav1.NewMicroTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: nodehealth.LeaseNamespace},
				Spec: coordinationv1.LeaseSpec{RenewTime: &renewed, LeaseDurationSeconds: ptr.To[int32](40)}}
			e := newEnv(t, append(objects(v1.ConditionUnknown, true), lease), true)
			clk := testingclock.NewFakeClock(time.Now())
			build := func(hb *nodehealth.Heartbeats) *Controller {
				c, err := New(Options{DriverName: driver, CanFence: true, NonGracefulFailover: true, Timeout: time.Second,
					StormGuardNamespace: "kube-system", RetryIntervalStart: time.Millisecond, RetryIntervalMax: time.Second,
					Resync: time.Hour, Clock: clk, Heartbeats: hb},
					e.client, informers.NewSharedInformerFactory(e.client, 0), dynamicinformer.NewDynamicSharedInformerFactory(e.dyn, 0),
					e.fr, e.csi, record.NewFakeRecorder(100))
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			synced := func(hasSynced cache.InformerSynced) {
				wait, stop := context.WithTimeout(ctx, 10*time.Second)
				defer stop()
				if !cache.WaitForCacheSync(wait.Done(), hasSynced) {
					t.Fatal("heartbeat informer did not sync")
				}
			}
			var c *Controller
			switch tc.watched {
			case "standby":
				c = build(nil)
				c.ObserveHeartbeats(ctx)
				synced(c.heartbeats.HasSynced)
			case "before build":
				hb, err := nodehealth.NewHeartbeats(e.client, 0, clk)
				if err != nil {
					t.Fatal(err)
				}
				hb.Start(ctx.Done())
				synced(hb.HasSynced)
				// The kubelet stays silent for a lease duration and
				// more before this replica takes over and builds its
				// controller.
				clk.Step(41 * time.Second)
				c = build(hb)
			case "takeover":
				c = build(nil)
			}
			if tc.watched != "before build" {
				clk.Step(41 * time.Second)
			}
			if !c.startInformers(ctx) {
				t.Fatal("caches did not sync")
			}
			err := c.down(ctx, "n1")
			if got := err == nil; got != tc.wantDown {
				t.Errorf("down after takeover = %v (err %v), want %v", got, err, tc.wantDown)
			}
		})
	}
}
