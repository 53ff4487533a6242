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
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// The driver registry tells the owner of node-level state what each driver
// can do: its controller, when it leads, writes a Lease of its own (one
// writer per object) with the capabilities the driver advertised. The owner
// counts a pod as one that can fail over only if every driver of its volumes
// registered UNPUBLISH_FENCE: a driver with no sidecar of this project, or
// one that cannot fence, never has its volumes' pods force-deleted.
const (
	registrationLabel          = protection.RegistrationLabel
	canFenceAnnotation         = protection.CanFenceAnnotation
	fenceModeAnnotation        = protection.FenceModeAnnotation
	maxFencedNodesAnnotation   = protection.MaxFencedNodesAnnotation
	maxFencedPercentAnnotation = protection.MaxFencedPercentAnnotation
)

// A registration is renewed every registrationRenewal by the driver's
// leading controller and trusted for registrationTTL after its last
// renewal: a driver whose sidecar is gone (uninstalled, or down for good)
// is not counted on to fence, and its pods then wait for another backend
// instead of for a fence nobody will send. "After its last renewal" is on
// this process's clock: the renewTime was written on another machine's,
// and is only compared with its own previous value (as pkg/nodehealth does
// with the kubelets' Leases), never with this clock, whose skew to the
// writer's is unknown.
//
// So a registration counts as "can fence" only once this process has seen
// its renewTime move forward while it watched: the value it first finds
// (at start, after every restart or hand-over) may have been written long
// ago by a sidecar since uninstalled or rolled back to external-attacher,
// and no comparison that trusts neither clock can tell. A live driver
// counts after its next renewal (registrationRenewal at most); until then
// its pods wait, the safe side. Its storm guard limits, which can only make
// the guard stricter, are honoured the other way round: from first sight
// until it is seen unchanged for registrationTTL.
const (
	registrationRenewal = 20 * time.Second
	registrationTTL     = 5 * time.Minute
)

// registry reads and writes driver registrations in one namespace.
type registry struct {
	client    kubernetes.Interface
	namespace string
	leases    coordinationlisters.LeaseNamespaceLister
	clock     clock.PassiveClock

	mu sync.Mutex
	// renewed: for each registration Lease, its renewTime as written, when
	// this process first saw that value, and whether that value replaced
	// an earlier one while it watched.
	renewed map[string]renewal
}

type renewal struct {
	value, seen time.Time
	renewed     bool
}

func newRegistry(client kubernetes.Interface, namespace string, c clock.PassiveClock) *registry {
	return &registry{client: client, namespace: namespace, clock: c, renewed: map[string]renewal{}}
}

// observe notes a registration Lease's renewTime on this process's clock
// (the informer's handler, and every read).
func (r *registry) observe(o interface{}) {
	if l, ok := o.(*coordinationv1.Lease); ok {
		r.observed(l)
	}
}

// observed notes lease's renewTime and returns what this process knows of
// it: renewed, the value replaced an earlier, older one while it watched;
// seen, when this process first saw the value. A first value, or one that
// moved back (a restore, an edit), is no renewal.
func (r *registry) observed(lease *coordinationv1.Lease) renewal {
	if lease.Spec.RenewTime == nil {
		return renewal{}
	}
	v := lease.Spec.RenewTime.Time
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.renewed[lease.Name]
	if !ok || !cur.value.Equal(v) {
		cur = renewal{value: v, seen: now, renewed: ok && v.After(cur.value)}
		r.renewed[lease.Name] = cur
	}
	return cur
}

// renewedWithinTTL reports whether this process saw lease renewed, its
// renewTime last move forward less than registrationTTL ago: what a
// driver's "can fence" needs.
func (r *registry) renewedWithinTTL(lease *coordinationv1.Lease) bool {
	cur := r.observed(lease)
	return cur.renewed && r.clock.Now().Sub(cur.seen) < registrationTTL
}

// notStale reports whether lease may still be renewed: not seen unchanged
// for registrationTTL. Enough for a limit that only makes the storm guard
// stricter.
func (r *registry) notStale(lease *coordinationv1.Lease) bool {
	cur := r.observed(lease)
	return !cur.seen.IsZero() && r.clock.Now().Sub(cur.seen) < registrationTTL
}

// newRegistryInformers is the informer factory of the registrations: the
// namespace's Leases that carry registrationLabel, nothing else.
func newRegistryInformers(client kubernetes.Interface, namespace string, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = registrationLabel }))
}

// registration is what a driver's controller says of itself.
type registration struct {
	driver, identity string
	canFence         bool
	// mode is how the driver is fenced ("" for a registration that does
	// not say).
	mode fencemode.Mode
	// limits are its storm guard flags: the owner of node-level state
	// admits nodes within the strictest of every driver's.
	limits guardLimits
	// config says the driver's failover configuration
	// (protection.ConfigAnnotations), for `kubectl fence explain`.
	config map[string]string
}

// annotations are the registration's annotations on its Lease.
func (g registration) annotations() map[string]string {
	a := map[string]string{
		registrationLabel:          g.driver,
		canFenceAnnotation:         strconv.FormatBool(g.canFence),
		maxFencedNodesAnnotation:   strconv.Itoa(g.limits.maxNodes),
		maxFencedPercentAnnotation: strconv.Itoa(g.limits.maxPercent),
	}
	if g.mode != "" {
		a[fenceModeAnnotation] = string(g.mode)
	}
	for k, v := range g.config {
		a[k] = v
	}
	return a
}

// register records what the driver can do, created or updated as needed.
func (r *registry) register(ctx context.Context, g registration) error {
	leases := r.client.CoordinationV1().Leases(r.namespace)
	name := contract.RegistrationLeaseName(g.driver)
	want := g.annotations()
	return retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		now := metav1.NewMicroTime(time.Now())
		identity := g.identity
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.namespace,
					Labels:      map[string]string{registrationLabel: contract.SanitizeDriverName(g.driver)},
					Annotations: want},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &identity, RenewTime: &now},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		same := lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == identity &&
			lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < registrationRenewal/2
		for k, v := range want {
			same = same && lease.Annotations[k] == v
		}
		if same {
			return nil
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		if lease.Labels == nil {
			lease.Labels = map[string]string{}
		}
		lease.Labels[registrationLabel] = contract.SanitizeDriverName(g.driver)
		for k, v := range want {
			lease.Annotations[k] = v
		}
		lease.Spec.HolderIdentity, lease.Spec.RenewTime = &identity, &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
}

// limits returns the strictest of own and the storm guard limits of every
// driver whose registration is not stale (notStale): with two drivers configured apart,
// whichever owns node-level state holds the cluster to the limit of the
// most careful one. A value that does not parse is left out, and said.
func (r *registry) limits(logger klog.Logger, own guardLimits) guardLimits {
	if r.leases == nil {
		return own
	}
	leases, err := r.leases.List(labels.Everything())
	if err != nil {
		return own
	}
	out := own
	for _, l := range leases {
		if l.Annotations[registrationLabel] == "" || !r.notStale(l) {
			continue
		}
		var theirs guardLimits
		for key, into := range map[string]*int{maxFencedNodesAnnotation: &theirs.maxNodes, maxFencedPercentAnnotation: &theirs.maxPercent} {
			v, ok := l.Annotations[key]
			if !ok {
				continue // registered by a version that did not say
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				logger.Error(err, "Ignoring a storm guard limit that does not parse in a driver's registration", "lease", l.Name, "annotation", key, "value", v)
				continue
			}
			*into = n
		}
		out = out.strictest(theirs)
	}
	return out
}

// guardLimits are the storm guard's limits (0: no limit of that kind).
type guardLimits struct{ maxNodes, maxPercent int }

// strictest returns, for each limit, the smaller of those set.
func (a guardLimits) strictest(b guardLimits) guardLimits {
	pick := func(x, y int) int {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return guardLimits{maxNodes: pick(a.maxNodes, b.maxNodes), maxPercent: pick(a.maxPercent, b.maxPercent)}
}

// canFence reports whether driver registered that it can fence (with
// UNPUBLISH_FENCE or by an unpublish that revokes access), and this
// process saw it renew its registration within registrationTTL (on its
// own clock).
func (r *registry) canFence(driver string) bool {
	lease, err := r.leases.Get(contract.RegistrationLeaseName(driver))
	return err == nil && lease.Annotations[registrationLabel] == driver && lease.Annotations[canFenceAnnotation] == "true" &&
		r.renewedWithinTTL(lease)
}
