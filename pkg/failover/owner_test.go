package failover

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The node-fencing Lease is released when the election's context ends, and
// Ended is called only after that: whoever exits next waits for Ended, so
// the next owner finds the Lease free instead of waiting for it to expire.
func TestElectionReleasesBeforeEnded(t *testing.T) {
	client := fake.NewClientset()
	ended := make(chan struct{})
	owned := make(chan struct{}, 1)
	o := &leaseOwner{}
	cfg := ElectionConfig{Client: client, Namespace: "kube-system", Identity: "replica-a_driver",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Ended: func() { close(ended) }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.runElection(ctx, cfg, func() {
		if o.IsOwner() {
			select {
			case owned <- struct{}{}:
			default:
			}
		}
	})
	select {
	case <-owned:
	case <-time.After(10 * time.Second):
		t.Fatal("never took the free Lease")
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Ended not called after the context ended")
	}
	if o.IsOwner() {
		t.Error("still the owner after the election ended")
	}
	lease, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), NodeFencingLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease still held by %q when Ended was called", *h)
	}
}
