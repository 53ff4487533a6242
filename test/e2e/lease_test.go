//go:build e2e

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

package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/pkg/contract"
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
	driver := product.Driver.Name
	attacherLease := contract.AttacherLeaseName(driver)
	namespaces := map[string]string{attacherLease: "default", contract.NodeFencingLeaseName: nodeFencingNamespace}
	// The identities a replica holds them with: csi-lib-utils' (its
	// hostname) and the failover's (the hostname and the driver).
	identities := func(host string) map[string]string {
		return map[string]string{attacherLease: host, contract.NodeFencingLeaseName: host + "_" + contract.SanitizeDriverName(driver)}
	}
	get := func(ctx context.Context, lease string) (holder string, renewed time.Time, err error) {
		l, err := cluster.Client.CoordinationV1().Leases(namespaces[lease]).Get(ctx, lease, metav1.GetOptions{})
		if errors.IsNotFound(err) {
			return "", time.Time{}, nil
		}
		if err != nil {
			return "", time.Time{}, err
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.RenewTime != nil {
			renewed = l.Spec.RenewTime.Time
		}
		return holder, renewed, nil
	}
	holds := func(ids map[string]string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			for lease, id := range ids {
				if h, _, err := get(ctx, lease); err != nil || h != id {
					return false, err
				}
			}
			return true, nil
		}
	}

	// The product's attacher (the machine's hostname, or a standby an
	// earlier test promoted) is the only replica: the leader is whoever
	// renews the attacher Lease, and it must own node-level state too (a
	// Lease a replica killed earlier left behind expires first).
	var host string
	var firstRenew time.Time
	if err := framework.WaitFor(ctx, 60*time.Second, "the product's attacher renewing both Leases", func(ctx context.Context) (bool, error) {
		h, renewed, err := get(ctx, attacherLease)
		if err != nil || h == "" {
			return false, err
		}
		if h != host {
			host, firstRenew = h, renewed
			return false, nil
		}
		if !renewed.After(firstRenew) {
			return false, nil
		}
		return holds(identities(host))(ctx)
	}); err != nil {
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
	t.Logf("the leader %s exited %.1fs after SIGTERM", host, time.Since(stopped).Seconds())
	exited := time.Now()
	// The process is gone: a Lease it released is empty, or the standby's
	// already; one it left to expire still names it.
	for lease, old := range identities(host) {
		h, _, err := get(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if h == old {
			t.Errorf("Lease %s/%s still names the terminated replica %q: not released on SIGTERM, the standby waits for it to expire", namespaces[lease], lease, h)
		}
	}
	product.Attacher, product.AttacherHTTP = standby, standbyAddr
	if err := framework.WaitFor(ctx, 60*time.Second, "the standby holding both Leases", holds(identities(standby.Name))); err != nil {
		t.Fatal(err)
	}
	t.Logf("the standby %s holds both Leases %.1fs after the leader exited", standby.Name, time.Since(exited).Seconds())
}
