package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
)

// Node-level fencing: when fencing the storage of a dead node cannot free
// its pods (a driver without UNPUBLISH_FENCE, a driver refusing), the owner
// of node-level state escalates to the next backend the admin configured
// (--fencing-backends): a power fence through the node's fence agent. A
// node confirmed off is fenced as a whole (S9): FencingComplete, the
// out-of-service taint (KEP-2268) with its provenance, so that the pod GCs
// and the unmodified attach/detach controller move every driver's volumes.
// When the node is back (powered on by someone) and clean, the taint goes
// with the quarantine, never by time.

// PowerFencer is the power backend as the failover controller uses it.
type PowerFencer interface {
	// Config names the FenceAgentConfig listing the node and its agent,
	// from a cache (ok false: no config lists the node).
	Config(node string) (config, agent string, ok bool)
	// Fence powers the node off and confirms it (powerfence.Backend).
	Fence(ctx context.Context, node string) (powerfence.Result, error)
}

// backendEnabled reports whether the admin configured backend.
func (c *Controller) backendEnabled(backend string) bool {
	return slices.Contains(c.opts.Backends, backend)
}

// powerFirst reports whether the admin ordered the power fence before the
// storage fence: then a node with a power switch is powered off at once.
func (c *Controller) powerFirst() bool {
	p, s := slices.Index(c.opts.Backends, fencingv1alpha1.BackendPower), slices.Index(c.opts.Backends, fencingv1alpha1.BackendStorage)
	return p >= 0 && (s < 0 || p < s)
}

// powerConfigured reports whether the node can be power-fenced.
func (c *Controller) powerConfigured(node string) bool {
	if c.power == nil || !c.backendEnabled(fencingv1alpha1.BackendPower) {
		return false
	}
	_, _, ok := c.power.Config(node)
	return ok
}

// storageFences reports whether driver's volumes are fenced by storage
// fencing: the backend is on and the driver can fence.
func (c *Controller) storageFences(driver string) bool {
	if !c.backendEnabled(fencingv1alpha1.BackendStorage) {
		return false
	}
	if driver == c.opts.DriverName {
		return c.opts.CanFence
	}
	return c.registry.canFence(driver)
}

// needsNodeFence reports whether storage fencing alone cannot free the
// candidates: one of their volumes is of a driver that does not fence, or
// its fence failed. A candidate whose volumes are all fenced needs nothing.
func (c *Controller) needsNodeFence(fr *fencingv1alpha1.FencingRequest, candidates []candidate) (bool, string) {
	if c.powerFirst() && len(candidates) > 0 {
		return true, "the power fence comes first (--fencing-backends)"
	}
	for _, cand := range candidates {
		for _, v := range cand.vols {
			if !c.storageFences(v.Driver) {
				return true, fmt.Sprintf("driver %s of volume %s does not fence storage", v.Driver, v.PVName)
			}
			if e := fencerecord.Find(fr, v.Driver, v.VolumeHandle); e != nil && e.FencedTime == nil && e.CleanedTime == nil && e.FenceError != "" {
				return true, fmt.Sprintf("driver %s failed to fence volume %s: %s", v.Driver, v.PVName, e.FenceError)
			}
		}
	}
	return false, ""
}

// fenceNodeLevel is the owner's node-level step for a dead node, after the
// storage fences of this pass: it powers the node off when storage fencing
// cannot free its candidates, and marks a node confirmed off out of service.
// It returns the record read back.
func (c *Controller) fenceNodeLevel(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, candidates []candidate) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	if fencerecord.NodeFenced(fr, node) {
		return fr, c.addOutOfServiceTaint(ctx, node)
	}
	need, why := c.needsNodeFence(fr, candidates)
	if !need {
		return fr, nil
	}
	// The node-level backends in the admin's order; one that fails lets
	// the next one try.
	var errs error
	for _, b := range c.opts.Backends {
		switch {
		case b == fencingv1alpha1.BackendPower && c.powerConfigured(node.Name):
			logger.V(2).Info("Escalating to a power fence", "why", why)
			c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; powering it off", node.Name, why)
			var err error
			if fr, err = c.powerFence(ctx, node, fr); err == nil {
				return fr, nil
			}
			errs = errors.Join(errs, err)
		case b == fencingv1alpha1.BackendMachine && c.machineConfigured(node):
			// Asked once, then followed pass by pass until the
			// infrastructure confirms (machinefence.go); while it waits,
			// no later backend acts on the node.
			if fencerecord.MachineIntentRecorded(fr) == nil {
				logger.V(2).Info("Escalating to a machine fence", "why", why)
				c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; deleting its Cluster API Machine", node.Name, why)
			}
			var err error
			if fr, err = c.machineFence(ctx, node, fr); err == nil || fencerecord.MachineIntentRecorded(fr) != nil {
				return fr, errors.Join(errs, err)
			}
			errs = errors.Join(errs, err)
		case b == fencingv1alpha1.BackendOutOfService && c.outOfServiceFences(node.Name):
			if !fencerecord.OwnOutOfServiceTaint(fr, podgc.Taint(node, contract.OutOfServiceTaintKey)) && podgc.Taint(node, contract.OutOfServiceTaintKey) == nil {
				// The taint lets every pod GC delete the node's pods and the
				// attach/detach controller detach everything: like a power
				// off, only on a node down by a live read now, not as it was
				// before a storage fence that may have been slow (S3, S4).
				if err := c.down(ctx, node.Name); err != nil {
					return fr, errors.Join(errs, fmt.Errorf("not adding the out-of-service taint: %w", err))
				}
				logger.V(2).Info("Escalating to the out-of-service taint: the drivers fence on it", "why", why)
				c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; every attachment on it is of a driver that fences on the out-of-service taint or fences storage: adding the taint", node.Name, why)
				// The step in the record, before the taint: the fences
				// themselves are the attachers' entries, one per volume.
				if err := fencerecord.RecordNodeFenceIntent(ctx, c.frClient, node.Name, "NodeUnreachable", b, "", ""); err != nil {
					return fr, errors.Join(errs, fmt.Errorf("recording the out-of-service step: %w", err))
				}
			}
			backendAttempts.WithLabelValues(b).Inc()
			return fr, errors.Join(errs, c.addOutOfServiceTaint(ctx, node))
		}
	}
	if errs != nil {
		return fr, errs
	}
	logger.V(2).Info("Storage fencing cannot free the node's pods and no node-level backend can fence it", "why", why)
	c.recorder.Eventf(node, v1.EventTypeWarning, "NoFencingBackend", "Node %s: %s, and no other backend can fence it (--fencing-backends=%s: no FenceAgentConfig lists it, no Cluster API Machine owns it, or not every driver on it fences on the out-of-service taint)",
		node.Name, why, strings.Join(c.opts.Backends, ","))
	return fr, nil
}

// fencesOnOutOfService reports whether the out-of-service backend is on
// and driver's CSIDriver declares that it fences on the taint.
func (c *Controller) fencesOnOutOfService(driver string) bool {
	if !c.backendEnabled(fencingv1alpha1.BackendOutOfService) {
		return false
	}
	d, err := c.drivers.Get(driver)
	return err == nil && d.Annotations[contract.FencesOnOutOfServiceAnnotation] == "true"
}

// outOfServiceFences reports whether the out-of-service taint fences the
// node: every attachment on it is of a driver that fences on the taint or
// fences storage (the attach/detach controller detaches them all once the
// taint is there, and each detach is then a fence), and one at least is of
// the first kind. An attachment the record cannot name (an inline volume)
// is of no known driver: then it does not, and neither does a pod's storage
// that reaches the node without an attachment (UnattachedStorage): the
// taint would let the pod GCs delete its pod, and no detach would cut it.
func (c *Controller) outOfServiceFences(node string) bool {
	vas, err := c.vasOn(node)
	if err != nil || c.unattachedStorage(node, vas, nil) != "" {
		return false
	}
	some := false
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil {
			return false
		}
		d, _ := c.pvHandle(*va.Spec.Source.PersistentVolumeName)
		switch {
		case d == "":
			return false
		case c.fencesOnOutOfService(d):
			some = true
		case !c.storageFences(d):
			return false
		}
	}
	return some
}

// powerFence powers the node off through its fence agent, write-ahead: the
// intent is in the record before the agent runs (S8); a live read finds the
// node down just before (S4); the outcome, with the agent's redacted output
// (S7), after. It returns the record read back.
func (c *Controller) powerFence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	const backend = fencingv1alpha1.BackendPower
	config, agent, _ := c.power.Config(node.Name)
	if err := fencerecord.RecordNodeFenceIntent(ctx, c.frClient, node.Name, "NodeUnreachable", backend, config, agent); err != nil {
		return fr, fmt.Errorf("recording the power fence intent: %w", err)
	}
	// The intent is recorded: from here on the node may be off. It is
	// powered off only if it is down by a live read now, not a cache.
	if err := c.down(ctx, node.Name); err != nil {
		_ = fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, node.Name, backend, false, "not sent: "+err.Error(), "", nil)
		return c.readRecord(ctx, node.Name, fr, fmt.Errorf("not powering off node %s: %w", node.Name, err))
	}
	// The not-Ready episode the power off ends: its confirmation holds
	// only while the node's Ready condition has not transitioned since.
	var notReadySince *metav1.Time
	if live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		notReadySince = fencerecord.ReadyTransition(live)
	}
	backendAttempts.WithLabelValues(backend).Inc()
	start := time.Now()
	res, fenceErr := c.power.Fence(ctx, node.Name)
	backendDuration.WithLabelValues(backend).Observe(time.Since(start).Seconds())
	confirmed := fenceErr == nil && res.Confirmed
	msg := ""
	if !confirmed {
		backendFailures.WithLabelValues(backend).Inc()
		if fenceErr == nil {
			fenceErr = errors.New("the agent did not confirm the node off")
		}
		msg = fenceErr.Error()
	}
	if err := fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, node.Name, backend, confirmed, msg, stepsOutput(res), notReadySince); err != nil {
		return fr, fmt.Errorf("recording the power fence outcome: %w", err)
	}
	if !confirmed {
		logger.Error(fenceErr, "Power fence failed", "config", config, "agent", agent)
		c.recorder.Eventf(node, v1.EventTypeWarning, "PowerFenceFailed", "Powering off node %s (FenceAgentConfig %s, %s) failed; nothing moves until a fence is confirmed: %v", node.Name, config, agent, fenceErr)
		return c.readRecord(ctx, node.Name, fr, fmt.Errorf("power fence of node %s: %w", node.Name, fenceErr))
	}
	logger.Info("Node powered off", "config", config, "agent", agent, "duration", time.Since(start))
	c.recorder.Eventf(node, v1.EventTypeWarning, "NodePoweredOff", "Node %s powered off by %s (FenceAgentConfig %s), confirmed by its status", node.Name, agent, config)
	fr, err := c.readRecord(ctx, node.Name, fr, nil)
	if err != nil {
		return fr, err
	}
	return fr, c.addOutOfServiceTaint(ctx, node)
}

// readRecord reads the node's record back live after a write; it returns
// err (the step's own outcome) unless the read failed.
func (c *Controller) readRecord(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest, err error) (*fencingv1alpha1.FencingRequest, error) {
	got, gerr := c.frClient.Get(ctx, nodeName)
	if gerr != nil {
		return fr, errors.Join(err, gerr)
	}
	return got, err
}

// stepsOutput is what the record keeps of the agent's runs: one line per
// run, already redacted by powerfence, bounded.
func stepsOutput(res powerfence.Result) string {
	var b strings.Builder
	for _, s := range res.Steps {
		fmt.Fprintf(&b, "%s #%d exit %d", s.Action, s.Attempt, s.ExitCode)
		if s.Error != "" {
			fmt.Fprintf(&b, ": %s", s.Error)
		}
		if out := strings.TrimSpace(s.Output); out != "" {
			fmt.Fprintf(&b, ": %s", lastLine(out))
		}
		b.WriteByte('\n')
	}
	const max = 2048
	out := b.String()
	if len(out) > max {
		out = "..." + out[len(out)-max:]
	}
	return out
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// addOutOfServiceTaint adds KEP-2268's out-of-service taint to a node
// confirmed fenced as a whole. Whose taint it is lives in the record,
// written first (its timeAdded, fencerecord.RecordOutOfServiceTaint), so
// that release removes it and only it; the annotation in the same patch
// only tells a person. A taint someone else added is left as it is, and
// never taken for this system's.
func (c *Controller) addOutOfServiceTaint(ctx context.Context, node *v1.Node) error {
	if podgc.Taint(node, contract.OutOfServiceTaintKey) != nil {
		return nil
	}
	if err := c.stillOwner(); err != nil {
		return err
	}
	timeAdded, err := fencerecord.RecordOutOfServiceTaint(ctx, c.frClient, node.Name)
	if err != nil {
		return fmt.Errorf("recording the out-of-service taint: %w", err)
	}
	added := false
	err = c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		if podgc.Taint(n, contract.OutOfServiceTaintKey) != nil {
			return false
		}
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.OutOfServiceTaintKey, Value: contract.OutOfServiceTaintValue,
			Effect: v1.TaintEffectNoExecute, TimeAdded: &timeAdded})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[contract.OutOfServiceProvenanceAnnotation] = c.opts.DriverName
		added = true
		return true
	})
	if err != nil {
		return fmt.Errorf("adding the out-of-service taint: %w", err)
	}
	if added {
		klog.FromContext(ctx).V(2).Info("Node out of service", "taint", contract.OutOfServiceTaintKey)
		c.recorder.Eventf(node, v1.EventTypeWarning, "OutOfServiceTaintAdded",
			"Node %s is confirmed fenced as a whole: out-of-service taint added, removed once the node is back and clean", node.Name)
	}
	return nil
}

// withoutOwnOutOfServiceTaint removes from n the out-of-service taint that
// this system added for the fence fr records (its timeAdded), and the
// annotation that tells a person so. Any other out-of-service taint is
// someone else's and stays, whatever annotation the Node carries.
func withoutOwnOutOfServiceTaint(n *v1.Node, fr *fencingv1alpha1.FencingRequest) bool {
	changed := false
	if _, ok := n.Annotations[contract.OutOfServiceProvenanceAnnotation]; ok {
		delete(n.Annotations, contract.OutOfServiceProvenanceAnnotation)
		changed = true
	}
	if fencerecord.OwnOutOfServiceTaint(fr, podgc.Taint(n, contract.OutOfServiceTaintKey)) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == contract.OutOfServiceTaintKey })
		changed = true
	}
	return changed
}
