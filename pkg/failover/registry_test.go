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
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// writeRegistration writes g's registration Lease as its driver's
// controller would, renewTime at (on the registering machine's clock).
func writeRegistration(ctx context.Context, t *testing.T, client kubernetes.Interface, g registration, at time.Time) {
	t.Helper()
	leases := client.CoordinationV1().Leases("kube-system")
	name := contract.RegistrationLeaseName(g.driver)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	create := apierrors.IsNotFound(err)
	if create {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system",
			Labels: map[string]string{registrationLabel: contract.SanitizeDriverName(g.driver)}}}
	} else if err != nil {
		t.Fatal(err)
	}
	l.Annotations = g.annotations()
	l.Spec.HolderIdentity = ptr.To(g.identity)
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at))
	if create {
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitObserved waits until r's informer has handed it driver's
// registration renewed at at.
func waitObserved(ctx context.Context, t *testing.T, r *registry, driver string, at time.Time) {
	t.Helper()
	if err := waitUntil(ctx, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		cur, ok := r.renewed[contract.RegistrationLeaseName(driver)]
		return ok && cur.value.Equal(metav1.NewMicroTime(at).Time)
	}); err != nil {
		t.Fatalf("the registration of %s renewed at %s never reached the controller: %v", driver, at, err)
	}
}

// S9, S1: a registration counts as "can fence" only once this process has
// seen it renewed. One left by a driver whose sidecar was uninstalled (or
// rolled back to external-attacher) is found at every start as if new: it
// must not let the owner quarantine the node and fail that driver's pods
// over (nor add the out-of-service taint for it: the same storageFences),
// whatever renewTime it carries, across any number of restarts. A live
// driver counts again after its next renewal, also after a restart.
func TestStaleRegistrationDoesNotCountAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// written: the stale registration's renewTime, on the owner's
		// clock (its writer's skew unknown).
		written time.Duration
	}{
		{name: "renewed an hour ago", written: -time.Hour},
		{name: "renewed a second ago by its clock", written: -time.Second},
		{name: "renewed an hour ahead by a clock that was ahead", written: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			// Only the other driver's pod web-0 is Terminating; the other
			// driver's registration is in the cluster before this process.
			e := newEnv(t, twoDrivers(objects(v1.ConditionUnknown, false)), true)
			g := registration{driver: otherDriver, identity: "other-0", canFence: true}
			written := time.Now().Add(tc.written)
			writeRegistration(ctx, t, e.client, g, written)
			clk := testingclock.NewFakeClock(time.Now())
			e.tweaks = append(e.tweaks, func(o *Options) { o.Clock = clk })
			for restart := 0; restart < 2; restart++ {
				e.restart(t)
				waitObserved(ctx, t, e.c.registry, otherDriver, written)
				if e.c.registry.canFence(otherDriver) {
					t.Fatalf("start %d: a registration never seen renewed counts as able to fence", restart)
				}
				if err := e.sync(t); err != nil {
					t.Fatal(err)
				}
				if e.steps.index("quarantine") >= 0 || e.steps.index("delete web-0") >= 0 {
					t.Fatalf("start %d: the owner acted for a driver whose registration is stale: %v", restart, e.steps.log)
				}
			}

			// The driver is live after all: its next renewal counts.
			written = written.Add(registrationRenewal)
			writeRegistration(ctx, t, e.client, g, written)
			waitObserved(ctx, t, e.c.registry, otherDriver, written)
			if !e.c.registry.canFence(otherDriver) {
				t.Fatal("a registration seen renewed does not count")
			}
			if err := e.sync(t); err != nil {
				t.Fatal(err)
			}
			if e.steps.index("quarantine") < 0 {
				t.Errorf("the owner does not act for a driver seen renewing its registration: %v", e.steps.log)
			}
			// Not renewed since, for registrationTTL on this process's
			// clock: no longer counted.
			clk.Step(registrationTTL + time.Second)
			if e.c.registry.canFence(otherDriver) {
				t.Error("a registration not renewed for registrationTTL still counts")
			}
		})
	}
}

// The storm guard limits of a registration are honoured from its first
// sight: they only make the guard stricter, and a registration not yet
// seen renewed may well be live.
func TestRegistrationLimitsFromFirstSight(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	r := newRegistry(nil, "kube-system", clk)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.RegistrationLeaseName(otherDriver)},
		Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))}}
	if r.renewedWithinTTL(l) {
		t.Error("a registration seen once counts as renewed")
	}
	if !r.notStale(l) {
		t.Error("the limits of a registration seen once are not honoured")
	}
	back := l.DeepCopy()
	back.Spec.RenewTime = ptr.To(metav1.NewMicroTime(l.Spec.RenewTime.Add(-time.Minute)))
	if r.renewedWithinTTL(back) {
		t.Error("a renewTime moved back counts as a renewal")
	}
	clk.Step(registrationTTL)
	if r.notStale(back) {
		t.Error("a registration unchanged for registrationTTL is not stale")
	}
}
