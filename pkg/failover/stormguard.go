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
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// stormGuardAnnotation lists, comma-separated and sorted, the nodes admitted
// to fencing and not released yet.
const stormGuardAnnotation = contract.Prefix + "/fencing-nodes"

// stormGuardQuarantinedAnnotation lists, the same way, the admitted nodes
// whose quarantine taint is on (confirm).
const stormGuardQuarantinedAnnotation = contract.Prefix + "/fencing-nodes-quarantined"

// PausedAnnotation on the storm guard's Lease is the pause switch: while it
// is set (its value says why), no new node is admitted to fencing, by any
// driver or backend; nodes under fencing already go on to the end.
//
//	kubectl annotate lease csi-fence-storm-guard csi-fence.io/paused="storage maintenance"
const PausedAnnotation = contract.Prefix + "/paused"

// stormGuard is the storm guard's admission (S5): before a node is
// quarantined it is added to the list of nodes under fencing on one shared
// Lease, by an update that carries the Lease's resourceVersion. Two workers,
// replicas or drivers admitting nodes at the same moment conflict, and the
// loser re-reads the list: no check-then-act on a cache can let two nodes
// past a limit of one. Every sidecar that points at the same Lease counts
// against the same limit, whatever its driver.
type stormGuard struct {
	client    kubernetes.Interface
	namespace string
}

// admissions is the storm guard's Lease as read: the nodes admitted to
// fencing, those of them whose quarantine is confirmed on, and why fencing
// is paused ("" if it is not).
type admissions struct {
	nodes, quarantined []string
	paused             string
}

// admit adds node to the list unless limit refuses one more; a node listed
// already, or force (a node quarantined already, whose fencing only
// continues), is admitted whatever the count. It reports whether the
// node's quarantine is confirmed already (confirm).
//
// Before it refuses, it drops the admissions that stale (live reads) says
// have nothing left to do: an admission whose release never came (a crash
// or a failed Node patch between the admission and the quarantine, a Node
// deleted with nothing pending) must not hold a slot forever. The list it
// writes back is the pruned one, in the same update.
func (g *stormGuard) admit(ctx context.Context, node string, force bool, limit func(admitted int) (bool, string), stale func(ctx context.Context, node string) (bool, error)) (confirmed bool, err error) {
	err = g.update(ctx, func(a *admissions) error {
		confirmed = slices.Contains(a.quarantined, node)
		if slices.Contains(a.nodes, node) {
			return nil
		}
		if a.paused != "" && !force {
			return fmt.Errorf("fencing is paused (%s=%q on Lease %s)", PausedAnnotation, a.paused, contract.StormGuardLeaseName)
		}
		return g.add(ctx, a, node, force, limit, stale)
	})
	return confirmed, err
}

// add adds node to a's admissions, under limit unless force, pruning the
// stale ones first when the limit refuses (admit).
func (g *stormGuard) add(ctx context.Context, a *admissions, node string, force bool, limit func(admitted int) (bool, string), stale func(ctx context.Context, node string) (bool, error)) error {
	if ok, _ := limit(len(a.nodes)); !force && !ok {
		if err := g.prune(ctx, a, stale); err != nil {
			return err
		}
		if ok, why := limit(len(a.nodes)); !ok {
			return fmt.Errorf("storm guard: %s (fencing: %s)", why, strings.Join(a.nodes, ", "))
		}
	}
	a.nodes = append(a.nodes, node)
	return nil
}

// confirm records, once the node's quarantine taint is on, that its
// admission is in use. Between its admission and its taint a node may be
// Ready for a moment and look stale to another worker's prune, which then
// admits a node in its place: confirm finds the admission gone and admits
// the node again under the limit, or fails (the caller takes its taint
// back and fences nothing). Its write also makes any prune that read the
// Lease before it conflict and read the node again, tainted now (S5).
func (g *stormGuard) confirm(ctx context.Context, node string, limit func(admitted int) (bool, string), stale func(ctx context.Context, node string) (bool, error)) error {
	return g.update(ctx, func(a *admissions) error {
		if !slices.Contains(a.nodes, node) {
			if err := g.add(ctx, a, node, false, limit, stale); err != nil {
				return fmt.Errorf("the admission of node %s was dropped before its quarantine: %w", node, err)
			}
		}
		if !slices.Contains(a.quarantined, node) {
			a.quarantined = append(a.quarantined, node)
		}
		return nil
	})
}

// prune drops the nodes that stale says hold their admission for nothing.
func (g *stormGuard) prune(ctx context.Context, a *admissions, stale func(ctx context.Context, node string) (bool, error)) error {
	var kept []string
	for _, n := range a.nodes {
		drop, err := stale(ctx, n)
		if err != nil {
			return fmt.Errorf("storm guard: checking the admission of node %s: %w", n, err)
		}
		if !drop {
			kept = append(kept, n)
		}
	}
	a.nodes = kept
	a.quarantined = slices.DeleteFunc(a.quarantined, func(n string) bool { return !slices.Contains(kept, n) })
	return nil
}

// pausedBy reads the storm guard's Lease live and returns why fencing is
// paused ("" if it is not, or the Lease does not exist yet).
func (g *stormGuard) pausedBy(ctx context.Context) (string, error) {
	lease, err := g.client.CoordinationV1().Leases(g.namespace).Get(ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the storm guard's Lease %s: %w", contract.StormGuardLeaseName, err)
	}
	return lease.Annotations[PausedAnnotation], nil
}

// release removes node from the list: its fencing is over.
func (g *stormGuard) release(ctx context.Context, node string) error {
	return g.update(ctx, func(a *admissions) error {
		this := func(n string) bool { return n == node }
		a.nodes = slices.DeleteFunc(a.nodes, this)
		a.quarantined = slices.DeleteFunc(a.quarantined, this)
		return nil
	})
}

// update applies change to the admissions on a fresh read of the Lease
// (created if missing) and writes them back with optimistic concurrency.
func (g *stormGuard) update(ctx context.Context, change func(*admissions) error) error {
	leases := g.client.CoordinationV1().Leases(g.namespace)
	return retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		lease, err := leases.Get(ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName, Namespace: g.namespace}}, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		a := &admissions{
			nodes:       nodeList(lease.Annotations[stormGuardAnnotation]),
			quarantined: nodeList(lease.Annotations[stormGuardQuarantinedAnnotation]),
			paused:      lease.Annotations[PausedAnnotation],
		}
		if err := change(a); err != nil {
			return err
		}
		want := map[string]string{
			stormGuardAnnotation:            joinNodes(a.nodes),
			stormGuardQuarantinedAnnotation: joinNodes(a.quarantined),
		}
		changed := false
		for k, v := range want {
			changed = changed || lease.Annotations[k] != v
		}
		if !changed {
			return nil
		}
		lease = lease.DeepCopy()
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		for k, v := range want {
			if v == "" && k == stormGuardQuarantinedAnnotation {
				delete(lease.Annotations, k)
				continue
			}
			lease.Annotations[k] = v
		}
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
}

// nodeList parses a comma-separated list of nodes.
func nodeList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// joinNodes writes nodes as a sorted, comma-separated list.
func joinNodes(nodes []string) string {
	nodes = slices.Clone(nodes)
	slices.Sort(nodes)
	return strings.Join(nodes, ",")
}
