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

// StormGuardLeaseName is the Lease that holds the storm guard's admissions.
const StormGuardLeaseName = "csi-fence-storm-guard"

// stormGuardAnnotation lists, comma-separated and sorted, the nodes admitted
// to fencing and not released yet.
const stormGuardAnnotation = contract.Prefix + "/fencing-nodes"

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

// admit adds node to the list unless limit refuses one more; a node listed
// already, or force (a node quarantined already, whose fencing only
// continues), is admitted whatever the count.
//
// Before it refuses, it drops the admissions that stale (live reads) says
// have nothing left to do: an admission whose release never came (a crash
// or a failed Node patch between the admission and the quarantine, a Node
// deleted with nothing pending) must not hold a slot forever. The list it
// writes back is the pruned one, in the same update.
func (g *stormGuard) admit(ctx context.Context, node string, force bool, limit func(admitted int) (bool, string), stale func(ctx context.Context, node string) (bool, error)) error {
	return g.update(ctx, func(nodes []string, paused string) ([]string, error) {
		if slices.Contains(nodes, node) {
			return nodes, nil
		}
		if paused != "" && !force {
			return nil, fmt.Errorf("fencing is paused (%s=%q on Lease %s)", PausedAnnotation, paused, StormGuardLeaseName)
		}
		if ok, _ := limit(len(nodes)); !force && !ok {
			var err error
			if nodes, err = g.prune(ctx, nodes, stale); err != nil {
				return nil, err
			}
			if ok, why := limit(len(nodes)); !ok {
				return nil, fmt.Errorf("storm guard: %s (fencing: %s)", why, strings.Join(nodes, ", "))
			}
		}
		return append(nodes, node), nil
	})
}

// prune drops the nodes that stale says hold their admission for nothing.
func (g *stormGuard) prune(ctx context.Context, nodes []string, stale func(ctx context.Context, node string) (bool, error)) ([]string, error) {
	var kept []string
	for _, n := range nodes {
		drop, err := stale(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("storm guard: checking the admission of node %s: %w", n, err)
		}
		if !drop {
			kept = append(kept, n)
		}
	}
	return kept, nil
}

// pausedBy reads the storm guard's Lease live and returns why fencing is
// paused ("" if it is not, or the Lease does not exist yet).
func (g *stormGuard) pausedBy(ctx context.Context) (string, error) {
	lease, err := g.client.CoordinationV1().Leases(g.namespace).Get(ctx, StormGuardLeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the storm guard's Lease %s: %w", StormGuardLeaseName, err)
	}
	return lease.Annotations[PausedAnnotation], nil
}

// release removes node from the list: its fencing is over.
func (g *stormGuard) release(ctx context.Context, node string) error {
	return g.update(ctx, func(nodes []string, _ string) ([]string, error) {
		return slices.DeleteFunc(nodes, func(n string) bool { return n == node }), nil
	})
}

// update applies change to the list on a fresh read of the Lease (created if
// missing), which also tells whether fencing is paused, and writes it back
// with optimistic concurrency.
func (g *stormGuard) update(ctx context.Context, change func(nodes []string, paused string) ([]string, error)) error {
	leases := g.client.CoordinationV1().Leases(g.namespace)
	return retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		lease, err := leases.Get(ctx, StormGuardLeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: StormGuardLeaseName, Namespace: g.namespace}}, metav1.CreateOptions{})
		}
		if err != nil {
			return err
		}
		var nodes []string
		if s := lease.Annotations[stormGuardAnnotation]; s != "" {
			nodes = strings.Split(s, ",")
		}
		before := strings.Join(nodes, ",")
		nodes, err = change(slices.Clone(nodes), lease.Annotations[PausedAnnotation])
		if err != nil {
			return err
		}
		slices.Sort(nodes)
		after := strings.Join(nodes, ",")
		if after == before {
			return nil
		}
		lease = lease.DeepCopy()
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[stormGuardAnnotation] = after
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
}
