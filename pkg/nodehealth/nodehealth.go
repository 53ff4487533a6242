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

// Package nodehealth decides whether a node is down: the one test behind
// every automatic fence (S4) and every force-delete (S3).
//
// A node is down only when its kubelet has stopped talking: the node
// lifecycle controller has set its Ready condition Unknown, and its
// heartbeat Lease has not been renewed for a whole lease duration as this
// process saw it. A kubelet that talks is alive, whatever it says: Ready
// False is its own report (a runtime down, a node registering), and a Node
// with no Ready condition yet was registered by a kubelet a moment ago.
//
// Times written by other machines are never compared with each other or
// with this process's clock: the kubelet's renewTime is the kubelet's clock
// and the Ready transition the node lifecycle controller's, and a kubelet
// whose clock runs behind would look down while it renews. As the node
// lifecycle controller does, the Observer remembers when, on its own clock,
// it first saw each value of a Lease's renewTime; a Lease whose value has
// not changed for its lease duration since is expired. The Lease informer
// feeds it every renewal, and every decision reads the Node and the Lease
// live first.
package nodehealth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/csi-fence/fence-attacher/pkg/liveread"
)

// LeaseNamespace holds the kubelets' heartbeat Leases.
const LeaseNamespace = "kube-node-lease"

// DefaultLeaseDuration is the kubelet's default node lease duration, for a
// Lease that does not say its own.
const DefaultLeaseDuration = 40 * time.Second

// ErrNodeAlive is returned for a node whose kubelet talks.
var ErrNodeAlive = errors.New("the node is alive")

// Observer remembers, on this process's clock, when each node's heartbeat
// Lease was first seen with its current renewTime. It is safe for
// concurrent use; the zero value is not: use NewObserver.
type Observer struct {
	Client kubernetes.Interface
	clock  clock.PassiveClock

	// reads shares the live reads of a node among concurrent callers: the
	// pod GC force-deletes a failed node's pods in parallel, each delete
	// deciding on a read begun after it asked (pkg/liveread).
	reads liveread.Group[heartbeat]

	mu   sync.Mutex
	seen map[string]observation
}

// observation is a Lease's renewTime (as written, the kubelet's clock) and
// when this process first saw it (its own clock).
type observation struct {
	renew    time.Time
	duration time.Duration
	since    time.Time
}

// NewObserver returns an Observer whose live reads use client.
func NewObserver(client kubernetes.Interface) *Observer {
	return NewObserverWithClock(client, clock.RealClock{})
}

// NewObserverWithClock is NewObserver on another clock (tests).
func NewObserverWithClock(client kubernetes.Interface, c clock.PassiveClock) *Observer {
	return &Observer{Client: client, clock: c, seen: map[string]observation{}}
}

// Observe records a heartbeat Lease as seen now (the Lease informer's
// handler, and every live read). A Lease of another namespace is ignored.
func (o *Observer) Observe(l *coordinationv1.Lease) {
	if l == nil || l.Namespace != LeaseNamespace {
		return
	}
	o.observe(l)
}

func (o *Observer) observe(l *coordinationv1.Lease) observation {
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	d := DefaultLeaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, ok := o.seen[l.Name]
	if !ok || !cur.renew.Equal(renew) {
		cur = observation{renew: renew, since: o.clock.Now()}
	}
	cur.duration = d
	o.seen[l.Name] = cur
	return cur
}

// last returns what was last observed of a node's Lease, if anything.
func (o *Observer) last(node string) (observation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	obs, ok := o.seen[node]
	return obs, ok
}

// Forget drops a node's observation: its Lease is gone and has not been
// renewed for a lease duration.
func (o *Observer) Forget(node string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, node)
}

// Health is what live reads say of a node: down, or alive and why.
type Health struct {
	// Alive says why the node is alive; "" when it is down.
	Alive string
	// RecheckAfter is, for a node alive only because its heartbeat Lease
	// changed less than a lease duration ago as this process saw it, how
	// long until that duration has passed: a node that stays silent is
	// down then, which no event announces. 0 when only an event can
	// change the answer.
	RecheckAfter time.Duration
}

// Down reports whether the node is down: it may be fenced, its pods
// force-deleted, without an admin's request.
func (h Health) Down() bool { return h.Alive == "" }

// Err is nil for a node that is down, and otherwise an error wrapping
// ErrNodeAlive that says why: the refusal of a caller that acts only on a
// node that is down.
func (h Health) Err() error {
	if h.Down() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNodeAlive, h.Alive)
}

// Check reads the node and its heartbeat Lease live and says whether the
// node is down (see the package doc); the error is only that of a read.
//
// A Node that is gone is down unless its Lease is still renewed: no kubelet
// runs pods for a Node that does not exist, and a kubelet that is alive
// re-registers it. A Node whose Lease is missing is decided by its
// condition alone (a kubelet without Leases, or a Node deleted with them),
// once the last renewal this process saw of it, if any, is a lease
// duration old.
func (o *Observer) Check(ctx context.Context, nodeName string) (Health, error) {
	hb, err := o.reads.Do(ctx, nodeName, func(ctx context.Context) (heartbeat, error) {
		return o.readHeartbeat(ctx, nodeName)
	})
	if err != nil {
		return Health{}, err
	}
	if hb.alive != "" {
		return Health{Alive: hb.alive}, nil
	}
	if hb.lease == nil {
		// The last renewal this process saw still counts: a Node
		// deleted while its kubelet runs (kubectl delete node) takes
		// its Lease with it, and the kubelet registers both again a
		// few seconds later.
		if obs, ok := o.last(nodeName); ok {
			if unchanged := o.clock.Since(obs.since); unchanged < obs.duration {
				return leaseFresh(nodeName, unchanged, obs.duration), nil
			}
		}
		o.Forget(nodeName)
		return Health{}, nil
	}
	obs := o.observe(hb.lease)
	if unchanged := o.clock.Since(obs.since); unchanged < obs.duration {
		return leaseFresh(nodeName, unchanged, obs.duration), nil
	}
	return Health{}, nil
}

// leaseFresh is the health of a node whose heartbeat Lease changed less
// than a lease duration ago as this process saw it: the kubelet may be
// alive.
func leaseFresh(node string, unchanged, duration time.Duration) Health {
	return Health{
		Alive: fmt.Sprintf("the heartbeat Lease of node %s changed %s ago as this controller saw it (lease duration %s)",
			node, unchanged.Round(time.Millisecond), duration),
		RecheckAfter: duration - unchanged,
	}
}

// heartbeat is what one live read found: why the node reports itself
// alive, or else its Lease (nil when it has none).
type heartbeat struct {
	alive string
	lease *coordinationv1.Lease
}

// readHeartbeat reads a node and then its Lease live. A node that reports
// itself alive is alive (its Lease is not read then).
func (o *Observer) readHeartbeat(ctx context.Context, nodeName string) (heartbeat, error) {
	node, err := o.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return heartbeat{}, fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	if node != nil {
		if alive := reportedAlive(node); alive != "" {
			return heartbeat{alive: alive}, nil
		}
	}
	lease, err := o.Client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, nodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return heartbeat{}, nil
	case err != nil:
		return heartbeat{}, fmt.Errorf("reading the heartbeat Lease of node %s: %w", nodeName, err)
	}
	return heartbeat{lease: lease}, nil
}

// reportedAlive says why the node is alive by its own report, or "" when
// the node lifecycle controller has marked its Ready condition Unknown.
func reportedAlive(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != v1.NodeReady {
			continue
		}
		switch c.Status {
		case v1.ConditionUnknown:
			return ""
		case v1.ConditionTrue:
			return fmt.Sprintf("node %s is Ready", n.Name)
		default:
			return fmt.Sprintf("the kubelet of node %s reports it not Ready (%s) itself", n.Name, c.Reason)
		}
	}
	return fmt.Sprintf("node %s has no Ready condition yet (its kubelet registered it a moment ago)", n.Name)
}

// Unreachable reports whether the node's Ready condition is Unknown: the
// node lifecycle controller's verdict that the kubelet stopped reporting,
// the only state in which a node may be fenced without an admin's request.
// It reads what it is given (a cached Node decides what to look at; Check
// decides).
func Unreachable(n *v1.Node) bool {
	return reportedAlive(n) == ""
}
