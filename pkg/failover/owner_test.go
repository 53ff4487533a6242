package failover

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
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
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), NodeFencingLeaseName, metav1.GetOptions{})
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
		l, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), NodeFencingLeaseName, metav1.GetOptions{})
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
