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
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// phase is where a node is in its failover, as one pass sees it. Each phase
// has a fixed list of steps (syncOwner, syncDriver).
type phase int

const (
	// phaseGone: the Node object is deleted. Its fenced attachments are
	// let go; its record and quarantine state are cleared (nodegone.go).
	phaseGone phase = iota
	// phaseBack: the node is Ready and nobody asked to fence it: it is
	// released once its node agent has cleaned every fenced volume.
	phaseBack
	// phaseOff: the NonGracefulFailover gate is off: nothing that changes
	// what happens to pods is done, as with external-attacher alone.
	phaseOff
	// phaseHeld: a control-plane node or one under maintenance, not
	// Ready, is not fenced or signalled automatically; a machine fence
	// already started is followed still.
	phaseHeld
	// phaseIdle: not Ready, with nothing to fail over now and no fence
	// left unsettled: the node is only signalled.
	phaseIdle
	// phaseFailing: not Ready, with pods to fail over or fences to settle.
	phaseFailing
	// phaseRequested: an admin's FencingRequest asks to fence the node,
	// Ready or not: the failing steps without the live read finding it
	// down.
	phaseRequested
)

func (p phase) String() string {
	return [...]string{"gone", "back", "off", "held", "idle", "failing", "requested"}[p]
}

// observation is what one pass knows of a node before it acts, from the
// caches (an admin's request on a Ready node is read live, S4). It decides
// which steps to take; each step that deletes, fences or releases reads what
// it depends on live again.
type observation struct {
	name string
	// node is nil when the Node object is gone.
	node *v1.Node
	fr   *fencingv1alpha1.FencingRequest
	// gate is the NonGracefulFailover feature gate.
	gate   bool
	ready  bool
	manual bool
	// controlPlane and maintenance keep the node from automatic fencing
	// (IsControlPlane, Maintenance).
	controlPlane bool
	maintenance  string
	// pods and triage are read only for a node that may fail over: gate
	// on, and not Ready or asked for.
	pods   []*v1.Pod
	triage triage
}

// decide is the phase of an observed node. The order of the cases is the
// precedence: a gone node is released whatever else holds, a node back is
// released whatever the gate says, an admin's request overrides maintenance
// and an empty triage.
func decide(o observation) phase {
	switch {
	case o.node == nil:
		return phaseGone
	case o.ready && !o.manual:
		return phaseBack
	case !o.gate:
		return phaseOff
	case o.manual:
		return phaseRequested
	case !o.ready && o.controlPlane, o.maintenance != "":
		return phaseHeld
	case len(o.triage.candidates) == 0 && !unsettled(o.fr, ""):
		return phaseIdle
	default:
		return phaseFailing
	}
}

func (c *Controller) worker(ctx context.Context) {
	for {
		node, quit := c.queue.Get()
		if quit {
			return
		}
		err := c.sync(klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "node", node)), node)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Failover sync failed, will retry", "node", node, "err", err)
			c.queue.AddRateLimited(node)
		} else {
			c.queue.Forget(node)
		}
		c.queue.Done(node)
	}
}

// sync is one pass over one node: observe, decide the phase, take its
// steps. Every step is derived from the API state (node, record, pods,
// attachments), not from what a previous pass did, so a restart between
// any two steps resumes where the last one stopped. Node-level steps are
// taken only by the owner of node-level state (owner.go); every driver's
// controller fences its own driver's attachments once the owner has
// quarantined the node.
func (c *Controller) sync(ctx context.Context, nodeName string) error {
	owner := c.owner.IsOwner()
	o, err := c.observe(ctx, nodeName)
	if err != nil {
		return err
	}
	ph := decide(o)
	klog.FromContext(ctx).V(5).Info("Failover pass", "phase", ph, "owner", owner)
	if owner {
		return c.syncOwner(ctx, o, ph)
	}
	return c.syncDriver(ctx, o, ph)
}

// observe reads what decide needs.
func (c *Controller) observe(ctx context.Context, nodeName string) (observation, error) {
	o := observation{name: nodeName, gate: c.opts.NonGracefulFailover}
	var err error
	if o.fr, err = c.frs.Get(nodeName); err != nil {
		return o, err
	}
	node, err := c.nodes.Get(nodeName)
	if apierrors.IsNotFound(err) {
		return o, nil
	}
	if err != nil {
		return o, err
	}
	o.node = node
	o.ready = nodestate.Ready(node)
	if o.manual, err = c.manualRequest(ctx, nodeName, o.fr, o.ready); err != nil {
		return o, err
	}
	o.controlPlane, o.maintenance = IsControlPlane(node), Maintenance(node)
	if !o.gate || (o.ready && !o.manual) {
		return o, nil
	}
	if o.pods, err = c.podsOn(nodeName); err != nil {
		return o, err
	}
	o.triage = c.sort(node, o.pods)
	return o, nil
}

// syncOwner takes the steps of phase ph as the owner of node-level state.
// The flow of one failover, in order: others' signals honoured, storm
// guard admission and quarantine, this driver's storage fence (write-ahead),
// the node-level fence when storage cannot free the pods, volumesInUse
// released, the pod GC, the Node Fencing signals; later, the release.
func (c *Controller) syncOwner(ctx context.Context, o observation, ph phase) error {
	switch ph {
	case phaseGone:
		fr := o.fr
		if o.gate {
			var err error
			if fr, err = c.releaseAttachmentsOfGoneNode(ctx, o.name, fr); err != nil {
				return err
			}
		}
		return c.nodeGone(ctx, o.name, fr)
	case phaseBack:
		return c.release(ctx, o.node, o.fr)
	case phaseOff:
		return nil
	}
	node := o.node
	var honourErr error
	if !o.ready {
		// Whatever this pass decides, what others signalled is
		// honoured first, on the signals as they are now.
		var err error
		if node, err = c.takeBackFencingComplete(ctx, node, o.fr); err != nil {
			return err
		}
		honourErr = c.honourSignals(ctx, node, o.pods)
		c.takeOverLostEvictions(ctx, node, o.pods)
	}
	switch ph {
	case phaseHeld:
		c.sayHeld(ctx, o, true)
		// Cluster API cordons the node of a Machine being deleted: a
		// machine fence already started is followed still.
		return errors.Join(honourErr, c.followStartedMachineFence(ctx, node, o.fr))
	case phaseIdle:
		c.sayTriage(ctx, node, o.triage)
		return errors.Join(honourErr, c.signalIdle(ctx, node, o.fr))
	}
	c.sayTriage(ctx, node, o.triage)
	return errors.Join(honourErr, c.failOver(ctx, node, o))
}

// syncDriver takes the steps of phase ph of a controller that does not own
// node-level state: it lets go of its driver's attachments to a gone node,
// and fences its driver's attachments on a node the owner quarantined.
func (c *Controller) syncDriver(ctx context.Context, o observation, ph phase) error {
	switch ph {
	case phaseGone:
		if !o.gate {
			return nil
		}
		_, err := c.releaseAttachmentsOfGoneNode(ctx, o.name, o.fr)
		return err
	case phaseHeld:
		c.sayHeld(ctx, o, false)
		return nil
	case phaseIdle:
		c.sayTriage(ctx, o.node, o.triage)
		return nil
	case phaseFailing, phaseRequested:
		c.sayTriage(ctx, o.node, o.triage)
		aliveChecked, down, err := c.confirmDown(ctx, o)
		if err != nil || !down {
			return err
		}
		quarantined := nodestate.Taint(o.node, contract.QuarantineTaintKey) != nil
		_, err = c.fenceStorage(ctx, o.node, o.fr, o.triage, o.manual, quarantined, aliveChecked)
		return err
	}
	return nil
}

// failOver is the owner's steps of a failing node (or one an admin asked
// for), in the flow's order. Each returns the record read back where it
// wrote it; an error of one step does not stop the next, which decides on
// the record as it is.
func (c *Controller) failOver(ctx context.Context, node *v1.Node, o observation) error {
	aliveChecked, down, err := c.confirmDown(ctx, o)
	if err != nil || !down {
		return err
	}
	// 1. Admission by the storm guard, then quarantine.
	if err := c.quarantine(ctx, node); err != nil {
		return err
	}
	// 2. Fence this driver's attachments, write-ahead.
	fr, fenceErr := c.fenceStorage(ctx, node, o.fr, o.triage, o.manual, true, aliveChecked)
	if !o.ready {
		// 3. A node that storage fencing cannot free is fenced as a
		//    whole by the next backend (nodefence.go).
		var err error
		if fr, err = c.fenceNodeLevel(ctx, node, fr, o.triage.candidates); err != nil {
			fenceErr = errors.Join(fenceErr, err)
		}
		// A power or machine fence may have outlasted this pass's
		// ownership: what follows is the owner's.
		if err := c.stillOwner(); err != nil {
			return errors.Join(fenceErr, err)
		}
		// 4. The attach/detach controller may detach the fenced volumes
		//    as soon as their pods are gone: each one as its pod goes,
		//    not once the node's last pod has.
		if err := c.releaseVolumesInUse(ctx, node.Name, fr); err != nil {
			fenceErr = errors.Join(fenceErr, err)
		}
		// 5. The pod GC: the pods whose storage is fenced go. Each
		//    pod's fenced attachments go as the pod goes.
		if err := c.deleteFenced(ctx, node, fr, o.triage.candidates, o.pods); err != nil {
			fenceErr = errors.Join(fenceErr, err)
		}
	}
	if !o.manual && time.Since(aliveChecked) > c.liveReadValidity {
		// The fence was slow: the node may be back (the pod GC read it
		// live for each pod already). A node that is alive gets no
		// fencing signal; its next pass releases it.
		h, err := c.nodeHealth(ctx, node.Name)
		if err != nil {
			return errors.Join(fenceErr, fmt.Errorf("cannot tell whether the node is still down after the fence: %w", err))
		}
		if !h.Down() {
			klog.FromContext(ctx).V(2).Info("The node came back during the fence", "why", h.Alive)
			return fenceErr
		}
	}
	// 6. The Node Fencing KEP's signals, off the failover's critical path:
	//    FencingRequired, and FencingComplete once the whole node is.
	if err := c.signalFencing(ctx, node, fr); err != nil {
		return err
	}
	return fenceErr
}

// confirmDown reads the node's health live before a pass fences a node
// nobody asked for: the cache is not enough (S4). It returns when the node
// was found down, and down false (with no error) when it is alive: nothing
// is fenced. An admin's request needs no such read.
func (c *Controller) confirmDown(ctx context.Context, o observation) (time.Time, bool, error) {
	if o.manual {
		return time.Time{}, true, nil
	}
	h, err := c.nodeHealth(ctx, o.name)
	if err != nil {
		// The read failed: nothing is known, retried with backoff.
		return time.Time{}, false, fmt.Errorf("not fencing: cannot tell whether the node is down: %w", err)
	}
	if !h.Down() {
		klog.FromContext(ctx).V(2).Info("Not fencing: the node is alive", "why", h.Alive)
		return time.Time{}, false, nil
	}
	return time.Now(), true, nil
}

// nodeHealth reads the node and its heartbeat Lease live (pkg/nodehealth). A
// node found alive only because its Lease changed too recently is looked
// at again once it would have expired: no event announces a silence.
func (c *Controller) nodeHealth(ctx context.Context, node string) (nodehealth.Health, error) {
	h, err := c.pgc.NodeHealth(ctx, node)
	if err == nil && h.RecheckAfter > 0 {
		c.queue.AddAfter(node, h.RecheckAfter)
	}
	return h, err
}

// down is the refusal form of nodeHealth, for a step that acts only on a node
// that is down: nil when it is, else the read's error or one that says why
// the node is alive (nodehealth.ErrNodeAlive).
func (c *Controller) down(ctx context.Context, node string) error {
	h, err := c.nodeHealth(ctx, node)
	if err != nil {
		return err
	}
	return h.Err()
}

// sayHeld logs, and as the owner says in an Event, why a node under
// maintenance is not fenced automatically (a control-plane node goes
// without saying).
func (c *Controller) sayHeld(ctx context.Context, o observation, owner bool) {
	if o.controlPlane {
		return
	}
	// Someone is working on the node: nothing is fenced or signalled
	// automatically (an admin's FencingRequest still fences it).
	klog.FromContext(ctx).V(2).Info("Not fencing: the node is under maintenance", "why", o.maintenance)
	if owner {
		c.recorder.Eventf(o.node, v1.EventTypeNormal, "FencingSkipped", "Not fencing node %s automatically: %s", o.name, o.maintenance)
	}
}

// manualRequest reports whether an explicit (Manual) FencingRequest asks to
// fence the node. Fencing a Ready node needs the request to exist now, not
// just in a cache that may lag its withdrawal (S4).
func (c *Controller) manualRequest(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest, ready bool) (bool, error) {
	if !fr.ManualActive() || !ready {
		return fr.ManualActive(), nil
	}
	live, err := c.frClient.Get(ctx, nodeName)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return live.ManualActive(), nil
}

func (c *Controller) podsOn(node string) ([]*v1.Pod, error) {
	return onNode[*v1.Pod](c.factory.Core().V1().Pods().Informer(), node)
}

// onNode returns the objects of informer, indexed byNode, on node.
func onNode[T any](informer cache.SharedIndexInformer, node string) ([]T, error) {
	objs, err := informer.GetIndexer().ByIndex(byNode, node)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(T))
	}
	return out, nil
}
