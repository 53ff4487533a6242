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

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// The machine backend (pkg/machinefence): a node a Cluster API Machine owns
// is fenced by the Machine's remediation, deleting it, and is confirmed
// fenced only once the infrastructure provider reports its instance gone
// (the InfraMachine deleted). Unlike a power fence, that takes many passes:
// the intent is recorded once (write-ahead, S8), the node is found down by
// a live read (S4) just before the one request that deletes the Machine,
// and each later pass only reads where the deletion is, and records it, so
// that a provider that is slow or refuses leaves its reason in the record
// (status.nodeFence.output, .error) and moves nothing. The Machine informer
// of the sidecar brings the node back as soon as its Machine changes.

// MachineFencer is the machine backend as the failover uses it.
type MachineFencer interface {
	// Locate reads the node's Machine live and checks that it is the
	// node's (machinefence.Backend.Locate).
	Locate(ctx context.Context, node *v1.Node) (fencingv1alpha1.MachineTarget, error)
	// Remediate asks for the Machine's deletion, unless it is being
	// deleted already, and says who started it.
	Remediate(ctx context.Context, t fencingv1alpha1.MachineTarget) (string, error)
	// Check reads whether the infrastructure reports the instance gone.
	Check(ctx context.Context, t fencingv1alpha1.MachineTarget) (machinefence.Progress, error)
	// Requested reads whether the Machine carries this system's request
	// to MachineHealthCheck, not acted on yet.
	Requested(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error)
	// Withdraw removes this system's request to MachineHealthCheck from
	// the Machine, if MHC has not acted on it, and reports whether it did.
	Withdraw(ctx context.Context, t fencingv1alpha1.MachineTarget) (bool, error)
}

// machineConfigured reports whether the node can be fenced through a
// Machine: the backend is on and the node names one (read again, live,
// before anything is asked).
func (c *Controller) machineConfigured(node *v1.Node) bool {
	if c.machine == nil || !c.backendEnabled(fencingv1alpha1.BackendMachine) {
		return false
	}
	_, _, ok := machinefence.MachineOf(node)
	return ok
}

// machineFence is one pass of the machine backend over a dead node,
// quarantined and admitted by the storm guard. It returns the record read
// back, and an error while the fence is not confirmed (the node's sync is
// retried with its backoff; the Machine's changes bring it back sooner).
func (c *Controller) machineFence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	// The record as it is now, not as a cache lagging the last pass's
	// writes shows it: a deletion asked must not be asked again.
	fr, err := c.readRecord(ctx, node.Name, fr, nil)
	if err != nil && !apierrors.IsNotFound(err) {
		return fr, err
	}
	t := fencerecord.MachineIntentRecorded(fr)
	if t == nil || fr.Status.NodeFence.ConfirmedTime != nil {
		located, err := c.machine.Locate(ctx, node)
		if err != nil {
			// Nothing asked, nothing recorded: a node that cannot be tied
			// to its Machine for sure is never fenced through one.
			backendFailures.WithLabelValues(fencingv1alpha1.BackendMachine).Inc()
			c.recorder.Eventf(node, v1.EventTypeWarning, "MachineFenceFailed", "Node %s cannot be fenced through its Cluster API Machine: %v", node.Name, err)
			return fr, fmt.Errorf("machine fence of node %s: %w", node.Name, err)
		}
		if err := fencerecord.RecordMachineFenceIntent(ctx, c.frClient, node.Name, "NodeUnreachable", located); err != nil {
			return fr, fmt.Errorf("recording the machine fence intent: %w", err)
		}
		if fr, err = c.readRecord(ctx, node.Name, fr, nil); err != nil {
			return fr, err
		}
		if t = fencerecord.MachineIntentRecorded(fr); t == nil {
			return fr, fmt.Errorf("the machine fence intent of node %s is not in the record read back", node.Name)
		}
		if located.DeletionStartedBy == machinefence.StartedByOther {
			// Recorded with the intent: nothing is asked of it.
			c.recorder.Eventf(node, v1.EventTypeNormal, "MachineDeletionFollowed", "Node %s: Machine %s/%s is being deleted by someone else already; not asking again, waiting for the infrastructure provider to report the instance gone", node.Name, t.Namespace, t.Name)
		}
	}
	if t.DeletionStartedBy == "" {
		if err := c.askMachine(ctx, node, t); err != nil {
			return c.readRecord(ctx, node.Name, fr, err)
		}
	}
	var said string
	if fr != nil && fr.Status.NodeFence != nil {
		said = fr.Status.NodeFence.Output
	}
	got, err := c.followMachine(ctx, node, *t, said)
	if got == nil {
		// The record could not be read back: the pass goes on with the
		// one it had.
		got = fr
	}
	return got, err
}

// askMachine asks for the Machine's deletion once the intent is recorded
// and the node is down by a live read now, not a cache (S4), and records
// who started it. A Machine already being deleted by someone else is
// followed, not deleted again: one remediation, whoever started it.
func (c *Controller) askMachine(ctx context.Context, node *v1.Node, t *fencingv1alpha1.MachineTarget) error {
	logger := klog.FromContext(ctx)
	const backend = fencingv1alpha1.BackendMachine
	if err := c.down(ctx, node.Name); err != nil {
		_ = fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, "not asked: "+err.Error(), "")
		return fmt.Errorf("not deleting the Machine of node %s: %w", node.Name, err)
	}
	backendAttempts.WithLabelValues(backend).Inc()
	startedBy, err := c.machine.Remediate(ctx, *t)
	if err != nil {
		backendFailures.WithLabelValues(backend).Inc()
		_ = fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, err.Error(), "")
		logger.Error(err, "Machine fence failed", "machine", klog.KRef(t.Namespace, t.Name))
		c.recorder.Eventf(node, v1.EventTypeWarning, "MachineFenceFailed", "Asking for the deletion of Machine %s/%s of node %s failed; nothing moves until a fence is confirmed: %v", t.Namespace, t.Name, node.Name, err)
		return err
	}
	if err := fencerecord.RecordMachineDeletion(ctx, c.frClient, node.Name, string(t.UID), startedBy); err != nil {
		return fmt.Errorf("recording the Machine's deletion: %w", err)
	}
	t.DeletionStartedBy = startedBy
	switch startedBy {
	case machinefence.StartedByUs:
		logger.Info("Deleted the node's Machine", "machine", klog.KRef(t.Namespace, t.Name))
		c.recorder.Eventf(node, v1.EventTypeWarning, "MachineDeleted", "Node %s: its Machine %s/%s is deleted; the node counts as fenced once the infrastructure provider reports the instance gone (%s %s deleted)", node.Name, t.Namespace, t.Name, t.Infrastructure.Kind, t.Infrastructure.Name)
	case machinefence.StartedByMHC:
		logger.Info("Asked MachineHealthCheck to remediate the node's Machine", "machine", klog.KRef(t.Namespace, t.Name))
		c.recorder.Eventf(node, v1.EventTypeWarning, "MachineRemediationRequested", "Node %s: Machine %s/%s annotated %s for MachineHealthCheck to remediate; the node counts as fenced once the infrastructure provider reports the instance gone", node.Name, t.Namespace, t.Name, machinefence.RemediateMachineAnnotation)
	default:
		logger.Info("The node's Machine is being deleted already: following that deletion", "machine", klog.KRef(t.Namespace, t.Name))
		c.recorder.Eventf(node, v1.EventTypeNormal, "MachineDeletionFollowed", "Node %s: Machine %s/%s is being deleted by someone else already; not asking again, waiting for the infrastructure provider to report the instance gone", node.Name, t.Namespace, t.Name)
	}
	return nil
}

// followMachine reads where the Machine's deletion is: confirmed (the
// InfraMachine gone), the outcome is recorded as a power off's is, and the
// node is marked out of service; otherwise what it waits for is recorded
// and returned as the error, and said in a MachineFencePending Event when
// it differs from what the record said already (said), so that a provider
// refusing or slow is seen where people look, not only in the record.
func (c *Controller) followMachine(ctx context.Context, node *v1.Node, t fencingv1alpha1.MachineTarget, said string) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	const backend = fencingv1alpha1.BackendMachine
	p, err := c.checkMachine(ctx, node.Name, t)
	if err != nil {
		_ = fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, err.Error(), "")
		return c.readRecord(ctx, node.Name, nil, fmt.Errorf("machine fence of node %s: %w", node.Name, err))
	}
	if !p.Confirmed {
		if err := fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, "", p.Waiting); err != nil {
			return c.readRecord(ctx, node.Name, nil, err)
		}
		switch {
		case p.Waiting == said:
		case p.Unconfirmable:
			backendFailures.WithLabelValues(backend).Inc()
			c.recorder.Eventf(node, v1.EventTypeWarning, "MachineFenceUnconfirmable", "Node %s is not fenced and nothing moves: %s", node.Name, p.Waiting)
		default:
			c.recorder.Eventf(node, v1.EventTypeWarning, "MachineFencePending", "Node %s is not fenced yet and nothing moves: %s", node.Name, p.Waiting)
		}
		logger.V(2).Info("Machine fence not confirmed yet", "machine", klog.KRef(t.Namespace, t.Name), "waiting", p.Waiting)
		return c.readRecord(ctx, node.Name, nil, fmt.Errorf("machine fence of node %s not confirmed: %s", node.Name, p.Waiting))
	}
	// The not-Ready episode the instance's deletion ends: a Node of the
	// same name that is Ready since is another instance, not fenced. A
	// confirmation recorded without it would never count (NodeFenced), so
	// none is recorded until the node is read: the next pass confirms
	// again (the deletion seen stays recorded), or the deleted-Node path
	// does if Cluster API deleted the Node meanwhile.
	live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return c.readRecord(ctx, node.Name, nil, fmt.Errorf("machine fence of node %s: the instance is gone, but reading the node to record the confirmation failed: %w", node.Name, err))
	}
	notReadySince := fencerecord.ReadyTransition(live)
	out := fmt.Sprintf("%s %s deleted: the infrastructure provider reports the instance gone (Machine deletion started by %s)", t.Infrastructure.Kind, t.Infrastructure.Name, t.DeletionStartedBy)
	if err := fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, node.Name, backend, true, "", out, notReadySince); err != nil {
		return nil, fmt.Errorf("recording the machine fence outcome: %w", err)
	}
	fr, err := c.readRecord(ctx, node.Name, nil, nil)
	if err != nil {
		return fr, err
	}
	if nf := fr.Status.NodeFence; nf != nil && nf.StartedTime != nil && nf.ConfirmedTime != nil {
		backendDuration.WithLabelValues(backend).Observe(nf.ConfirmedTime.Sub(nf.StartedTime.Time).Seconds())
	}
	logger.Info("Node fenced: its instance is deleted", "machine", klog.KRef(t.Namespace, t.Name), "infrastructure", t.Infrastructure.Kind+"/"+t.Infrastructure.Name)
	c.recorder.Eventf(node, v1.EventTypeWarning, "NodeInstanceDeleted", "Node %s fenced: Machine %s/%s deleted and %s %s gone, the infrastructure provider's report that the instance is deleted", node.Name, t.Namespace, t.Name, t.Infrastructure.Kind, t.Infrastructure.Name)
	return fr, c.addOutOfServiceTaint(ctx, node)
}

// followStartedMachineFence follows the machine fence of a node that is
// not to be fenced automatically any more because it is under maintenance,
// when its Machine's deletion was asked or found already: Cluster API
// cordons and drains the node of a Machine being deleted, and only a pass
// that reads the InfraMachine being deleted lets its disappearance confirm
// the fence (machinefence.Check). Nothing new is asked; the instance is
// being deleted anyway, and its confirmation is what the failover of the
// node's pods waits for.
func (c *Controller) followStartedMachineFence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if t := fencerecord.MachineIntentRecorded(fr); t == nil || t.DeletionStartedBy == "" || fr.Status.NodeFence.ConfirmedTime != nil || c.machine == nil {
		return nil
	}
	// The record as it is now, not as the cache shows it.
	fr, err := c.frClient.Get(ctx, node.Name)
	if err != nil {
		return fmt.Errorf("following the machine fence of node %s: %w", node.Name, err)
	}
	t := fencerecord.MachineIntentRecorded(fr)
	if t == nil || t.DeletionStartedBy == "" || fr.Status.NodeFence.ConfirmedTime != nil {
		return nil
	}
	_, err = c.followMachine(ctx, node, *t, fr.Status.NodeFence.Output)
	return err
}

// checkMachine reads where the machine fence t of node is
// (MachineFencer.Check) and records what the read saw of the InfraMachine's
// deletion when that differs from the record: its disappearance confirms
// the fence only after a recorded read saw it being deleted through its
// provider.
func (c *Controller) checkMachine(ctx context.Context, node string, t fencingv1alpha1.MachineTarget) (machinefence.Progress, error) {
	p, err := c.machine.Check(ctx, t)
	if err != nil || !p.Read || p.DeletionSeen == (t.Infrastructure.DeletionSeenTime != nil) {
		return p, err
	}
	if err := fencerecord.RecordInfrastructureDeletionSeen(ctx, c.frClient, node, t.Infrastructure.UID, p.DeletionSeen); err != nil {
		return p, fmt.Errorf("recording what was read of the deletion of %s %s: %w", t.Infrastructure.Kind, t.Infrastructure.Name, err)
	}
	return p, nil
}

// withdrawRemediation is the release's step for a node that is back while
// its record holds a machine fence this system asked MachineHealthCheck
// for and nothing confirmed: the request (cluster.x-k8s.io/remediate-
// machine) is removed from the Machine if MHC has not acted on it yet, or
// MHC would remediate the healthy node later, whenever its limits let it
// (S6). Only this system's own request goes (machinefence.Withdraw); one
// MHC acted on already (the Machine being deleted) is followed no more
// here: the node is back, and its instance's deletion is Cluster API's.
func (c *Controller) withdrawRemediation(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	t := fencerecord.MachineIntentRecorded(fr)
	if t == nil || t.DeletionStartedBy != machinefence.StartedByMHC || fr.Status.NodeFence.ConfirmedTime != nil || c.machine == nil {
		return nil
	}
	// Write-ahead: the record says the request is being withdrawn before
	// it is, so that a pass that withdrew it and then failed to record it
	// leaves the next pass (which finds nothing left to withdraw) what to
	// finish: the record's outcome and the Event. That intent is read from
	// the record live: the cache may not show it yet.
	live, err := c.frClient.Get(ctx, node.Name)
	if err != nil {
		return fmt.Errorf("node %s is back: reading its record: %w", node.Name, err)
	}
	if t = fencerecord.MachineIntentRecorded(live); t == nil || t.DeletionStartedBy != machinefence.StartedByMHC || live.Status.NodeFence.ConfirmedTime != nil {
		return nil
	}
	withdrawing := fmt.Sprintf("node back before MachineHealthCheck acted: withdrawing the request to remediate Machine %s/%s (%s)", t.Namespace, t.Name, machinefence.RemediateMachineAnnotation)
	intent := live.Status.NodeFence.Output == withdrawing
	if !intent {
		requested, err := c.machine.Requested(ctx, *t)
		if err != nil {
			return fmt.Errorf("node %s is back: %w", node.Name, err)
		}
		if requested {
			if err := fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, "", withdrawing); err != nil {
				return err
			}
			intent = true
		}
	}
	// Also without a request: this system's mark alone goes too.
	if _, err := c.machine.Withdraw(ctx, *t); err != nil {
		return fmt.Errorf("node %s is back: %w", node.Name, err)
	}
	if !intent {
		return nil
	}
	msg := fmt.Sprintf("node back before MachineHealthCheck acted: the request to remediate Machine %s/%s (%s) withdrawn", t.Namespace, t.Name, machinefence.RemediateMachineAnnotation)
	if err := fencerecord.RecordMachineProgress(ctx, c.frClient, node.Name, "", msg); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Node back: withdrew the request to MachineHealthCheck", "machine", klog.KRef(t.Namespace, t.Name))
	c.recorder.Eventf(node, v1.EventTypeNormal, "MachineRemediationWithdrawn", "Node %s is back before MachineHealthCheck remediated Machine %s/%s: this system's request (%s) removed", node.Name, t.Namespace, t.Name, machinefence.RemediateMachineAnnotation)
	return nil
}

// machineFenced reports whether fr records a confirmed machine fence: the
// node's instance is deleted, whatever became of its Node object.
func machineFenced(fr *fencingv1alpha1.FencingRequest) bool {
	if fr == nil || fr.Status.Phase == fencingv1alpha1.PhaseComplete {
		return false
	}
	nf := fr.Status.NodeFence
	return nf != nil && nf.Backend == fencingv1alpha1.BackendMachine && nf.ConfirmedTime != nil
}

// releaseAttachmentsOfDeletedInstance is the owner's step for a Node that
// is gone after a confirmed machine fence (Cluster API deletes a Machine's
// Node right after its instance): no status is left to clear volumesInUse
// from nor to carry the out-of-service taint, so every VolumeAttachment to
// the node, of every driver, that no pod on the node uses any more is
// deleted; the attach/detach controller forgets it at its next sync and
// the volume attaches elsewhere. The instance is deleted: nothing can
// reach a volume from it (S1). It reports whether attachments remain, to
// keep the record until none does.
func (c *Controller) releaseAttachmentsOfDeletedInstance(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest) (bool, error) {
	vas, err := c.vasOn(nodeName)
	if err != nil {
		return true, err
	}
	if t := fencerecord.MachineIntentRecorded(fr); t != nil && fr.Status.NodeFence.ConfirmedTime == nil && c.machine != nil {
		// The usual order: Cluster API deletes the Node as soon as it sees
		// the instance gone, before a pass here saw it. The confirmation
		// is read here as well, or the record would be dropped with the
		// Node and the attachments left to the 6-minute wait. From the
		// record as it is now: a cache that lags the last pass's read of
		// the InfraMachine being deleted would not confirm its absence.
		live, err := c.frClient.Get(ctx, nodeName)
		if err != nil {
			return len(vas) > 0, fmt.Errorf("machine fence of deleted node %s: reading its record: %w", nodeName, err)
		}
		fr = live
	}
	if t := fencerecord.MachineIntentRecorded(fr); t != nil && fr.Status.NodeFence.ConfirmedTime == nil && c.machine != nil {
		p, err := c.checkMachine(ctx, nodeName, *t)
		gone := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
		switch {
		case err != nil:
			_ = fencerecord.RecordMachineProgress(ctx, c.frClient, nodeName, err.Error(), "")
			return len(vas) > 0, fmt.Errorf("machine fence of deleted node %s: %w", nodeName, err)
		case !p.Confirmed:
			if p.Unconfirmable && p.Waiting != fr.Status.NodeFence.Output {
				backendFailures.WithLabelValues(fencingv1alpha1.BackendMachine).Inc()
				c.recorder.Eventf(gone, v1.EventTypeWarning, "MachineFenceUnconfirmable", "Deleted node %s is not fenced and its attachments stay: %s", nodeName, p.Waiting)
			}
			_ = fencerecord.RecordMachineProgress(ctx, c.frClient, nodeName, "", p.Waiting)
			return len(vas) > 0, nil
		}
		out := fmt.Sprintf("%s %s deleted: the infrastructure provider reports the instance gone (Machine deletion started by %s; Node deleted since)", t.Infrastructure.Kind, t.Infrastructure.Name, t.DeletionStartedBy)
		if err := fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, nodeName, fencingv1alpha1.BackendMachine, true, "", out, nil); err != nil {
			return true, err
		}
		if fr, err = c.readRecord(ctx, nodeName, fr, nil); err != nil {
			return true, err
		}
		c.recorder.Eventf(gone, v1.EventTypeWarning, "NodeInstanceDeleted", "Node %s fenced: Machine %s/%s deleted and %s %s gone, the infrastructure provider's report that the instance is deleted", nodeName, t.Namespace, t.Name, t.Infrastructure.Kind, t.Infrastructure.Name)
	}
	if !machineFenced(fr) {
		return false, nil
	}
	pods, err := c.podsOn(nodeName)
	if err != nil {
		return true, err
	}
	used := map[string]bool{}
	for _, p := range pods {
		for _, vol := range p.Spec.Volumes {
			if claim, ok := podgc.ClaimName(p, vol); ok {
				if pv, err := c.pvOf(p.Namespace, claim); err == nil {
					used[pv.Name] = true
				}
			}
		}
	}
	var errs error
	for _, va := range vas {
		pv := va.Spec.Source.PersistentVolumeName
		if pv == nil || used[*pv] || va.DeletionTimestamp != nil {
			continue
		}
		uid := va.UID
		err := c.client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = errors.Join(errs, fmt.Errorf("deleting VolumeAttachment %s of deleted instance %s: %w", va.Name, nodeName, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Released the attachment of a deleted instance", "VolumeAttachment", va.Name)
		c.recorder.Eventf(va, v1.EventTypeNormal, "AttachmentReleased",
			"Node %s is deleted and its instance confirmed deleted by its infrastructure provider: VolumeAttachment deleted so that the volume may attach elsewhere at once", nodeName)
	}
	return len(vas) > 0, errs
}

// MachineChanged queues the node a Machine names (its status.nodeRef) when
// the Machine changes: its deletion's progress is news for a machine fence
// waiting on it, sooner than the node's backoff.
func (c *Controller) MachineChanged(node string) {
	if node != "" {
		c.queue.Add(node)
	}
}

// machineBackend deletes the node's Cluster API Machine (machinefence.go):
// asked once, then followed pass by pass until the infrastructure
// confirms; while it waits, no later backend acts on the node.
type machineBackend struct{ c *Controller }

func (b machineBackend) configured(node *v1.Node) bool { return b.c.machineConfigured(node) }

func (b machineBackend) fence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, why string) (*fencingv1alpha1.FencingRequest, bool, error) {
	if fencerecord.MachineIntentRecorded(fr) == nil {
		klog.FromContext(ctx).V(2).Info("Escalating to a machine fence", "why", why)
		b.c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; deleting its Cluster API Machine", node.Name, why)
	}
	fr, err := b.c.machineFence(ctx, node, fr)
	return fr, err == nil || fencerecord.MachineIntentRecorded(fr) != nil, err
}
