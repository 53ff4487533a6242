//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// nodeFencingNamespace is where every driver's sidecar holds the
// cluster-wide Leases (node-fencing owner, storm guard, registrations).
const nodeFencingNamespace = sidecar.DefaultStormGuardNamespace

// A rolling update of the controller role, as deployed (no feature gate on
// the command line): the leader is terminated (SIGTERM, as the kubelet does)
// beside a standby. It releases both of its Leases, the driver's attacher
// Lease and the cluster-wide node-fencing Lease, before it exits: right
// after its exit neither names it any more (a Lease left to expire would
// still name it for up to --leader-election-lease-duration), and the standby
// takes both without waiting for an expiry.
func TestTerminatedLeaderReleasesItsLeases(t *testing.T) {
	ctx := context.Background()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	driver := product.Driver.Name
	attacherLease := contract.AttacherLeaseName(driver)
	// The identities csi-lib-utils (the hostname) and the failover (the
	// hostname and the driver) give a replica; the standby has a hostname
	// of its own (StartStandbyAttacher).
	const standbyHost = "csi-fence-attacher-standby"
	leader := map[string]string{attacherLease: host, failover.NodeFencingLeaseName: host + "_" + contract.SanitizeDriverName(driver)}
	standbyID := map[string]string{attacherLease: standbyHost, failover.NodeFencingLeaseName: standbyHost + "_" + contract.SanitizeDriverName(driver)}
	namespaces := map[string]string{attacherLease: "default", failover.NodeFencingLeaseName: nodeFencingNamespace}
	holder := func(ctx context.Context, lease string) (string, error) {
		l, err := cluster.Client.CoordinationV1().Leases(namespaces[lease]).Get(ctx, lease, metav1.GetOptions{})
		if errors.IsNotFound(err) {
			return "", nil
		}
		if err != nil || l.Spec.HolderIdentity == nil {
			return "", err
		}
		return *l.Spec.HolderIdentity, nil
	}
	holds := func(ids map[string]string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			for lease, id := range ids {
				if h, err := holder(ctx, lease); err != nil || h != id {
					return false, err
				}
			}
			return true, nil
		}
	}
	// A Lease another test's replica left behind expires first.
	if err := framework.WaitFor(ctx, 60*time.Second, "the product's attacher holding both Leases", holds(leader)); err != nil {
		t.Fatal(err)
	}
	standby, standbyAddr, err := product.StartStandbyAttacher(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if product.Attacher != standby {
			standby.Stop(10 * time.Second)
		}
	}()
	if leading, err := framework.Leading(ctx, standbyAddr); err != nil || leading {
		t.Fatalf("the standby replica leads beside the leader: %v, %v", leading, err)
	}

	stopped := time.Now()
	product.Attacher.Stop(30 * time.Second)
	t.Logf("the leader exited %.1fs after SIGTERM", time.Since(stopped).Seconds())
	exited := time.Now()
	// The process is gone: a Lease it released is empty, or the standby's
	// already; one it left to expire still names it.
	for lease, old := range leader {
		h, err := holder(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if h == old {
			t.Errorf("Lease %s/%s still names the terminated replica %q: not released on SIGTERM, the standby waits for it to expire", namespaces[lease], lease, h)
		}
	}
	product.Attacher, product.AttacherHTTP = standby, standbyAddr
	if err := framework.WaitFor(ctx, 60*time.Second, "the standby holding both Leases", holds(standbyID)); err != nil {
		t.Fatal(err)
	}
	t.Logf("the standby holds both Leases %.1fs after the leader exited", time.Since(exited).Seconds())
}
