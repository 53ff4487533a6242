package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// signalFencing sets the Node Fencing KEP's signals of a node under
// fencing: its optional taints, FencingTriaged and FencingRequired, and,
// when every attachment of every driver on it is recorded fenced (S9),
// FencingComplete and the request's phase Fenced. A FencingComplete of its
// own that is no longer true is taken back (takeBackFencingComplete).
func (c *Controller) signalFencing(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	if err := c.fencingTaints(ctx, node.Name, true); err != nil {
		return err
	}
	want := map[string]v1.ConditionStatus{
		contract.ConditionFencingTriaged:  v1.ConditionTrue,
		contract.ConditionFencingRequired: v1.ConditionTrue,
	}
	complete, reason, msg, err := c.wholeNode(node, fr)
	if err != nil {
		return err
	}
	switch {
	case complete:
		if err := c.markFenced(ctx, node.Name, true); err != nil {
			return err
		}
		want[contract.ConditionFencingComplete] = v1.ConditionTrue
	case ownFencingComplete(node):
		if err := c.markFenced(ctx, node.Name, false); err != nil {
			return err
		}
		want[contract.ConditionFencingComplete] = v1.ConditionFalse
	}
	return c.setConditions(ctx, node.Name, want, reason, msg)
}

// The reasons of the FencingComplete=True this system sets, each naming
// what fenced the whole node (S9). A FencingComplete with another reason is
// someone else's: honoured, never taken back.
const (
	reasonPoweredOff           = "PoweredOff"
	reasonInstanceDeleted      = "InstanceDeleted"
	reasonAllAttachmentsFenced = "AllAttachmentsFenced"
)

// ownFencingComplete reports whether the node has FencingComplete=True set
// by this system.
func ownFencingComplete(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if string(cond.Type) == contract.ConditionFencingComplete {
			return cond.Status == v1.ConditionTrue &&
				slices.Contains([]string{reasonPoweredOff, reasonInstanceDeleted, reasonAllAttachmentsFenced}, cond.Reason)
		}
	}
	return false
}

// wholeNode decides whether the node is fenced as a whole now (S9), from
// its record and the caches, and says why in a condition's reason and
// message either way.
func (c *Controller) wholeNode(node *v1.Node, fr *fencingv1alpha1.FencingRequest) (complete bool, reason, msg string, err error) {
	if fencerecord.NodeFenced(fr, node) {
		if fr.Status.NodeFence.Backend == fencingv1alpha1.BackendMachine {
			return true, reasonInstanceDeleted, "the node's Cluster API Machine is deleted and its infrastructure provider reports the instance gone", nil
		}
		return true, reasonPoweredOff, "the node is confirmed powered off by its fence agent", nil
	}
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return false, "", "", err
	}
	if fr == nil || !wholeNodeFenced(fr, vas, c.pvHandle) {
		return false, "NodeUnreachable", "the node is not Ready and has pods to fail over", nil
	}
	if why := c.unattachedStorage(node.Name, vas, fr); why != "" {
		// Every attachment is fenced, but storage that reaches the node
		// without one is not: only a power fence vouches for it.
		return false, "StorageWithoutAttachment", "every attachment on the node is fenced, but " + why, nil
	}
	return true, reasonAllAttachmentsFenced, "every attachment of every driver on the node is fenced", nil
}

// takeBackFencingComplete sets this system's FencingComplete on the node
// False when the node is not fenced as a whole any more: since it was set,
// the node came back and got storage no fence covers (a pod that tolerates
// the quarantine, or sets spec.nodeName), or a new fence is in flight. It
// runs before the signals are honoured, on the node read live, so that a
// FencingComplete of an earlier failure frees no pod of this one (S3, S9).
// It returns the node to honour the signals of.
func (c *Controller) takeBackFencingComplete(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*v1.Node, error) {
	if !ownFencingComplete(node) {
		// The signals are honoured from this cached node: without it,
		// its FencingComplete frees nothing.
		return node, nil
	}
	live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s before honouring its signals: %w", node.Name, err)
	}
	if !ownFencingComplete(live) {
		return live, nil
	}
	complete, reason, msg, err := c.wholeNode(live, fr)
	if err != nil || complete {
		return live, err
	}
	klog.FromContext(ctx).V(2).Info("Taking back FencingComplete: the node is not fenced as a whole any more", "why", msg)
	if err := c.markFenced(ctx, node.Name, false); err != nil {
		return nil, err
	}
	if err := c.patchConditions(ctx, node.Name, []v1.NodeCondition{{Type: contract.ConditionFencingComplete, Status: v1.ConditionFalse,
		Reason: reason, Message: msg, LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}}); err != nil {
		return nil, err
	}
	c.recorder.Eventf(live, v1.EventTypeWarning, "FencingCompleteTakenBack", "Node %s is not fenced as a whole any more: %s", node.Name, msg)
	return c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
}

// addQuarantineTaint adds the quarantine taint unless the node has it.
func (c *Controller) addQuarantineTaint(ctx context.Context, node *v1.Node) error {
	if podgc.Taint(node, contract.QuarantineTaintKey) != nil {
		return nil
	}
	if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		if podgc.Taint(n, contract.QuarantineTaintKey) != nil {
			return false
		}
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: contract.QuarantineTaintKey, Effect: v1.TaintEffectNoSchedule, TimeAdded: &now})
		return true
	}); err != nil {
		return fmt.Errorf("adding the quarantine taint: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Quarantined node", "taint", contract.QuarantineTaintKey)
	c.recorder.Eventf(node, v1.EventTypeWarning, "NodeQuarantined", "Node %s quarantined: volumes may be fenced on it until its node agent has cleaned them up", node.Name)
	return nil
}

// signalTriage marks a NotReady node FencingTriaged, and FencingRequired once it
// has been NotReady for FencingRequiredAfter.
func (c *Controller) signalTriage(ctx context.Context, node *v1.Node) error {
	want := map[string]v1.ConditionStatus{contract.ConditionFencingTriaged: v1.ConditionTrue}
	required := false
	if d := c.opts.FencingRequiredAfter; d > 0 {
		for _, cond := range node.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status != v1.ConditionTrue && time.Since(cond.LastTransitionTime.Time) >= d {
				want[contract.ConditionFencingRequired] = v1.ConditionTrue
				required = true
			}
		}
	}
	if podgc.ConditionTrue(node, contract.ConditionFencingTriaged) && (!required || podgc.ConditionTrue(node, contract.ConditionFencingRequired)) {
		return nil
	}
	if err := c.fencingTaints(ctx, node.Name, required); err != nil {
		return err
	}
	return c.setConditions(ctx, node.Name, want, "NodeNotReady", "the node is not Ready")
}

// fencingTaints adds the optional Node Fencing taints (when enabled):
// fencingtriaged always, fencingrequired when required.
func (c *Controller) fencingTaints(ctx context.Context, node string, required bool) error {
	if !c.opts.FencingTaints {
		return nil
	}
	return c.updateNode(ctx, node, func(n *v1.Node) bool {
		changed := false
		add := func(key string, effect v1.TaintEffect) {
			if podgc.Taint(n, key) == nil {
				now := metav1.Now()
				n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect, TimeAdded: &now})
				changed = true
			}
		}
		add(contract.FencingTriagedTaintKey, v1.TaintEffectPreferNoSchedule)
		if required {
			add(contract.FencingRequiredTaintKey, v1.TaintEffectNoSchedule)
		}
		return changed
	})
}

// admit is the storm guard (S5): fencing one more node must stay within
// --max-fenced-nodes and --max-fenced-node-percent, counted on the shared
// admission Lease (stormguard.go), not on a cache. A node quarantined already
// is continuing and never refused. It returns the limit it admitted under
// and whether the node's quarantine is confirmed already (confirmQuarantine).
func (c *Controller) admit(ctx context.Context, node *v1.Node) (limit func(int) (bool, string), confirmed bool, err error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, false, err
	}
	quarantined := podgc.Taint(node, contract.QuarantineTaintKey) != nil
	limits := c.registry.limits(klog.FromContext(ctx), guardLimits{maxNodes: c.opts.MaxFencedNodes, maxPercent: c.opts.MaxFencedNodePercent})
	limit = func(admitted int) (bool, string) {
		return StormGuard(admitted, len(all), limits.maxNodes, limits.maxPercent, false)
	}
	confirmed, err = c.guard.admit(ctx, node.Name, quarantined, limit, c.admissionStale)
	if err != nil {
		c.deferred(ctx, node, err)
	}
	return limit, confirmed, err
}

// deferred says why a node is not fenced now: the storm guard refused it.
func (c *Controller) deferred(ctx context.Context, node *v1.Node, err error) {
	stormGuardDeferrals.Inc()
	c.recorder.Eventf(node, v1.EventTypeWarning, "FencingDeferred", "Not fencing node %s: %v", node.Name, err)
	klog.FromContext(ctx).V(2).Info("Not fencing", "why", err)
}

// confirmQuarantine confirms the node's admission once its quarantine
// taint is on (stormGuard.confirm). When the admission was dropped
// meanwhile and the limit refuses it again, the taint this pass added is
// taken back and the node is not fenced now.
func (c *Controller) confirmQuarantine(ctx context.Context, node *v1.Node, limit func(int) (bool, string)) error {
	err := c.guard.confirm(ctx, node.Name, limit, c.admissionStale)
	if err == nil {
		return nil
	}
	c.deferred(ctx, node, err)
	if uerr := c.updateNodeLive(ctx, node.Name, func(n *v1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == contract.QuarantineTaintKey })
		return len(n.Spec.Taints) != before
	}); uerr != nil {
		return errors.Join(err, fmt.Errorf("taking back the quarantine of a node the storm guard refused: %w", uerr))
	}
	return err
}

// admissionStale reads a node and its record live and says whether its
// storm-guard admission holds a slot for nothing (AdmissionStale).
func (c *Controller) admissionStale(ctx context.Context, name string) (bool, error) {
	node, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return false, err
	}
	fr, err := c.frClient.Get(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		fr = nil
	case err != nil:
		return false, err
	}
	return AdmissionStale(node, fr), nil
}

// defaultLiveReadValidity is how long a live read finding the node down
// stands for the next step that needs it down (the next fence RPC of a
// batch, the signals after a slow fence): later steps read it again.
const defaultLiveReadValidity = time.Second

// fenceNode fences the attachments of our driver on the node, write-ahead
// through the record, except those of volumes a pod that stays on the node
// uses (unless an admin asked for the node). Unless the node was asked for,
// each RPC follows a live read finding it down (aliveChecked: the last one).
// It returns the record read back.
func (c *Controller) fenceNode(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, staying map[string]bool, manual bool, aliveChecked time.Time) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return fr, err
	}
	var todo []fencingv1alpha1.FencedVolume
	pvs := map[string]*v1.PersistentVolume{}
	var vaOf = map[string]*storagev1.VolumeAttachment{}
	var firstErr error
	for _, va := range vas {
		if va.Spec.Attacher != c.opts.DriverName || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := c.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		handle := pv.Spec.CSI.VolumeHandle
		if staying[c.opts.DriverName+"^"+handle] && !manual {
			continue
		}
		// Fenced once under this request is done, even once cleaned up: a
		// node the admin keeps fenced must not be fenced again after each
		// cleanup.
		if fencerecord.FencedUnderRequest(fr, c.opts.DriverName, handle) {
			continue
		}
		nodeID, err := c.nodeID(va, node.Name)
		if err != nil {
			c.recorder.Event(va, v1.EventTypeWarning, "FenceFailed", err.Error())
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		todo = append(todo, fencingv1alpha1.FencedVolume{Driver: c.opts.DriverName, VolumeHandle: handle, PersistentVolumeName: pv.Name, NodeID: nodeID})
		pvs[handle], vaOf[handle] = pv, va
	}
	if len(todo) > 0 {
		// The fences run concurrently (fencerecord.FenceConcurrency).
		var aliveMu sync.Mutex
		stillDown := func(ctx context.Context) error {
			aliveMu.Lock()
			defer aliveMu.Unlock()
			if manual || time.Since(aliveChecked) <= c.liveReadValidity {
				return nil
			}
			// A node not explicitly requested is fenced only while it is
			// down by a live read.
			if err := c.down(ctx, node.Name); err != nil {
				return err
			}
			aliveChecked = time.Now()
			return nil
		}
		errs, err := c.records.Fence(ctx, node.Name, "NodeUnreachable", todo, func(ctx context.Context, v fencingv1alpha1.FencedVolume) error {
			if err := stillDown(ctx); err != nil {
				return fmt.Errorf("%w: %w", fencerecord.ErrNotSent, err)
			}
			secrets, err := csiclient.PublishSecrets(ctx, c.client, pvs[v.VolumeHandle].Spec.CSI.ControllerPublishSecretRef)
			if err != nil {
				return err
			}
			cctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
			defer cancel()
			backendAttempts.WithLabelValues(fencingv1alpha1.BackendStorage).Inc()
			start := time.Now()
			err = c.fenceVolume(cctx, v, vaOf[v.VolumeHandle], secrets)
			backendDuration.WithLabelValues(fencingv1alpha1.BackendStorage).Observe(time.Since(start).Seconds())
			if err != nil {
				backendFailures.WithLabelValues(fencingv1alpha1.BackendStorage).Inc()
			}
			return err
		})
		if err != nil {
			return fr, err
		}
		for i, v := range todo {
			va := vaOf[v.VolumeHandle]
			if errs[i] != nil {
				fenceErrors.WithLabelValues(c.opts.DriverName).Inc()
				msg := fmt.Sprintf("fencing volume %s from node %s failed; nothing moves until the driver confirms the fence: %v", v.VolumeHandle, node.Name, errs[i])
				c.recorder.Event(va, v1.EventTypeWarning, "FenceFailed", msg)
				c.recorder.Event(node, v1.EventTypeWarning, "FenceFailed", msg)
				if firstErr == nil {
					firstErr = errors.New(msg)
				}
				continue
			}
			logger.V(2).Info("Fenced volume", "volume", v.VolumeHandle, "VolumeAttachment", va.Name, "nodeID", v.NodeID)
			c.recorder.Eventf(va, v1.EventTypeNormal, "FencedUnpublish", "Volume %s fenced from node %s before failover", v.VolumeHandle, node.Name)
		}
	}
	got, err := c.frClient.Get(ctx, node.Name)
	switch {
	case err == nil:
		fr = got
	case !apierrors.IsNotFound(err):
		return fr, err
	}
	return fr, firstErr
}

// fenceVolume fences v from its node ID and, first, from the previous one
// its VolumeAttachment still records (contract.PreviousNodeIDAnnotation):
// the attacher's unpublish of that one failed or never came (a crash), and
// the volume may still be published under it, out of reach of a fence of
// any other ID (S1). The record names v.NodeID, as the attacher's does.
func (c *Controller) fenceVolume(ctx context.Context, v fencingv1alpha1.FencedVolume, va *storagev1.VolumeAttachment, secrets map[string]string) error {
	if previous := va.Annotations[contract.PreviousNodeIDAnnotation]; previous != "" && previous != v.NodeID {
		if err := c.csi.Detach(ctx, v.VolumeHandle, previous, secrets, true); err != nil {
			return fmt.Errorf("fencing from the previous node ID %q: %w", previous, err)
		}
	}
	return c.csi.Detach(ctx, v.VolumeHandle, v.NodeID, secrets, true)
}

// nodeID is the CSI node ID the volume was published to: the one the
// attacher wrote on the VolumeAttachment, else the driver's entry in the
// node's CSINode. Never a guess: fencing another ID fences nothing.
func (c *Controller) nodeID(va *storagev1.VolumeAttachment, nodeName string) (string, error) {
	if id := va.Annotations[contract.NodeIDAnnotation]; id != "" {
		return id, nil
	}
	if cn, err := c.csinodes.Get(nodeName); err == nil {
		for _, d := range cn.Spec.Drivers {
			if d.Name == c.opts.DriverName && d.NodeID != "" {
				return d.NodeID, nil
			}
		}
	}
	return "", fmt.Errorf("cannot fence VolumeAttachment %s: no CSI node ID of driver %s for node %s (no %s annotation, no CSINode entry)",
		va.Name, c.opts.DriverName, nodeName, contract.NodeIDAnnotation)
}

// wholeNodeFenced reports whether every attachment on the node, of every
// driver, is recorded fenced: what FencingComplete means (S9). Attachments
// detached since their fence count as fenced (they are in the record). An
// attachment the record cannot name (an inline volume) is not fenced, and
// neither is a node with a fence intended and not confirmed.
func wholeNodeFenced(fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment, pvHandle func(pv string) (driver, handle string)) bool {
	if len(vas) == 0 && len(fr.Status.Volumes) == 0 {
		return false // nothing was attached, nothing fenced
	}
	for _, v := range fr.Status.Volumes {
		if v.CleanedTime == nil && v.FencedTime == nil {
			return false // a fence intended, by any driver, not confirmed
		}
	}
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil {
			return false
		}
		// Cleaned up since its fence or not: the node is quarantined
		// (its callers quarantine it first), so the volume is not
		// published to it again (fencerecord.FencedUnderRequest).
		d, h := pvHandle(*va.Spec.Source.PersistentVolumeName)
		if d == "" || !fencerecord.FencedUnderRequest(fr, d, h) {
			return false
		}
	}
	return true
}

// unattachedStorage is UnattachedStorage for the pods on the node, from the
// caches: it decides what to signal, never what to delete. A volume fr
// records fenced there is covered whether its attachment is still there or
// not: the pod GC deletes a fenced attachment right after the pod that used
// it, and the caches, one watch each, may show the attachment gone before
// the pod (fr nil: only the attachments cover).
func (c *Controller) unattachedStorage(node string, vas []*storagev1.VolumeAttachment, fr *fencingv1alpha1.FencingRequest) string {
	pods, err := c.podsOn(node)
	if err != nil {
		return err.Error()
	}
	attached := map[string]bool{}
	for _, va := range vas {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			attached[*pv] = true
		}
	}
	return UnattachedStorage(pods, c.pvOf, func(pv string) bool {
		if attached[pv] {
			return true
		}
		d, h := c.pvHandle(pv)
		return d != "" && fencerecord.FencedUnderRequest(fr, d, h)
	})
}

// pvOf resolves a claim to its bound PersistentVolume, from the caches.
func (c *Controller) pvOf(namespace, claim string) (*v1.PersistentVolume, error) {
	pvc, err := c.pvcs.PersistentVolumeClaims(namespace).Get(claim)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("claim %s/%s is not bound", namespace, claim)
	}
	pv, err := c.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", pvc.Spec.VolumeName, err)
	}
	return pv, nil
}

// markFenced sets the request's phase Fenced and its Fenced condition when
// fenced, and takes both back to Fencing when not (the node is not fenced as
// a whole any more). It leaves the request's error alone: that is the
// record's summary of every driver's entries.
func (c *Controller) markFenced(ctx context.Context, node string, fenced bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		fr, err := c.frClient.Get(ctx, node)
		if apierrors.IsNotFound(err) && !fenced {
			return nil
		}
		if err != nil {
			return err
		}
		if (fr.Status.Phase == fencingv1alpha1.PhaseFenced) == fenced {
			return nil
		}
		if fenced {
			fr.Status.Phase = fencingv1alpha1.PhaseFenced
			setFRCondition(fr, fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, reasonAllAttachmentsFenced, "every attachment of every driver on the node is fenced")
		} else {
			fr.Status.Phase = fencingv1alpha1.PhaseFencing
			setFRCondition(fr, fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, "NotFencedAsAWhole", "the node is not fenced as a whole any more")
		}
		if _, err = c.frClient.UpdateStatus(ctx, fr); err != nil {
			return err
		}
		if fenced && fr.Status.StartTime != nil {
			fencingDuration.Observe(time.Since(fr.Status.StartTime.Time).Seconds())
		}
		return nil
	})
}

func setFRCondition(fr *fencingv1alpha1.FencingRequest, t string, s metav1.ConditionStatus, reason, msg string) {
	now := metav1.Now()
	for i := range fr.Status.Conditions {
		if fr.Status.Conditions[i].Type == t {
			if fr.Status.Conditions[i].Status != s {
				fr.Status.Conditions[i].LastTransitionTime = now
			}
			fr.Status.Conditions[i].Status, fr.Status.Conditions[i].Reason, fr.Status.Conditions[i].Message = s, reason, msg
			return
		}
	}
	fr.Status.Conditions = append(fr.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now})
}

// forceDeleteWorkers is how many of a node's pods the pod GC deletes at
// once. Each delete is a live read of the node, shared by the deletes that
// ask at the same time (pkg/nodehealth), and three writes (the pod's
// condition, the pod, its fenced attachments), one after another: it is
// round trips, not work, and the API client's rate limit
// (--failover-kube-api-qps) is to pace them, not the workers. With 16, a
// 110-pod node's deletes took 2.6 s at 300 QPS (about 42 pods a second,
// each worker waiting on four round trips of about 90 ms on a loaded
// control plane), under half what the rate allowed; with 64, 1.4 to 1.7 s.
// Measured with fence-bench on KWOK nodes (the failed node's kubelet
// simulated, the mock driver) on a 2-core machine, not on real nodes.
const forceDeleteWorkers = 64

// forceDeleteAll hands each pod to the pod GC's one guarded delete, which
// reads the node live and refuses if it is alive (S3), for the reason that
// reason gives it, forceDeleteWorkers at a time; gone is called after each
// pod that went, from the worker that deleted it.
//
// The pods that asked for their termination reason (termreason.OptedIn)
// get it recorded in the node's FencingRequest first, in one write: their
// containers' preStop hooks run when the node is back, once the pod and the
// ServiceAccount token bound to it are gone from the API, and the node's
// agent serves the reason from the record. A record that cannot be written
// does not hold up the failover: those hooks get Unknown.
func (c *Controller) forceDeleteAll(ctx context.Context, nodeName string, pods []*v1.Pod, reason func(*v1.Pod) string, gone func(*v1.Pod)) {
	var record []fencingv1alpha1.ForceDeletedPod
	for _, pod := range pods {
		if termreason.OptedIn(pod) {
			record = append(record, fencingv1alpha1.ForceDeletedPod{
				Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, TerminationReason: podgc.TerminationReason(pod)})
		}
	}
	if err := fencerecord.RecordForceDeletedPods(ctx, c.frClient, nodeName, record); err != nil {
		klog.FromContext(ctx).Error(err, "Termination reasons not recorded; the pods' preStop hooks will get Unknown", "pods", len(record))
	}
	workqueue.ParallelizeUntil(ctx, forceDeleteWorkers, len(pods), func(i int) {
		pod, why := pods[i], reason(pods[i])
		msg := fmt.Sprintf("csi-fence-attacher: node %s is not Ready (%s)", nodeName, why)
		if err := c.pgc.ForceDelete(ctx, pod, why, podgc.TerminationReason(pod), msg); err != nil {
			klog.FromContext(ctx).Error(err, "Pod not force-deleted", "pod", klog.KObj(pod), "reason", why)
			return
		}
		if gone != nil {
			gone(pod)
		}
	})
}

// releaseFencedAttachments deletes the VolumeAttachments among vas (a dead
// node's) of the volumes in freed (PV names: their last pod on the node is
// gone, force-deleted by this pass, which the cache may not know yet) that
// are fenced there. The attach/detach controller would delete them too,
// once the pods are gone from its cache and the volumes from the node's
// volumesInUse, but its detach then polls for the attachment to go, first
// after half a second: deleted here first, its delete finds nothing and it
// attaches the volume elsewhere at its next reconcile. A pod the cache still
// misses is no danger: the attachment would be created again, and no
// publish reaches a node where a volume is fenced (S2).
func (c *Controller) releaseFencedAttachments(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest, vas []*storagev1.VolumeAttachment, freed map[string]bool) error {
	if len(freed) == 0 {
		return nil
	}
	return c.deleteFencedAttachments(ctx, vas, fr, nil, func(va *storagev1.VolumeAttachment) bool {
		return freed[*va.Spec.Source.PersistentVolumeName]
	}, func(handle string) string {
		return fmt.Sprintf("Node %s is down, volume %s is fenced from it and its pods are deleted: VolumeAttachment deleted so that the volume attaches elsewhere at once", nodeName, handle)
	})
}

// releaseVolumesInUse removes the volumes fenced on a dead node from its
// status.volumesInUse, which no kubelet will update: the attach/detach
// controller then detaches each of them as soon as its pods are gone
// instead of after 6 minutes. A fenced volume can no longer be reached from
// the node, whatever its pods do. It runs before the pod GC: the attach/detach
// controller attaches a volume elsewhere only once it has detached it here,
// which a volume still listed would hold up until the node's last pod is
// gone; and the pod GC deletes each pod's fenced attachment right after the
// pod, well within the attach/detach controller's 100 ms loop.
func (c *Controller) releaseVolumesInUse(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest) error {
	if fr == nil {
		return nil
	}
	// The cache decides whether to look: a dead node's list does not grow,
	// and every pass over every dead node must not cost a live read.
	if cached, err := c.nodes.Get(nodeName); err == nil && !slices.ContainsFunc(cached.Status.VolumesInUse, func(u v1.UniqueVolumeName) bool {
		return fencedUnique(fr, string(u))
	}) {
		return nil
	}
	return c.updateNodeStatus(ctx, nodeName, func(n *v1.Node) bool {
		if podgc.NodeReady(n) {
			return false // its kubelet owns the list again
		}
		var kept []v1.UniqueVolumeName
		for _, u := range n.Status.VolumesInUse {
			if !fencedUnique(fr, string(u)) {
				kept = append(kept, u)
			}
		}
		if len(kept) == len(n.Status.VolumesInUse) {
			return false
		}
		n.Status.VolumesInUse = kept
		return true
	})
}

// fencedUnique matches the ADC's unique volume name "kubernetes.io/csi/<driver>^<handle>".
func fencedUnique(fr *fencingv1alpha1.FencingRequest, unique string) bool {
	for _, v := range fr.Status.Volumes {
		if v.FencedTime != nil && v.CleanedTime == nil && unique == "kubernetes.io/csi/"+v.Driver+"^"+v.VolumeHandle {
			return true
		}
	}
	return false
}

// release lifts the quarantine of a node that is Ready again once every
// volume fenced on it is cleaned and none is attached there; then the request
// completes and the fencing conditions go.
func (c *Controller) release(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) error {
	quarantined := podgc.Taint(node, contract.QuarantineTaintKey) != nil
	active := fr != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete
	_, annotated := node.Annotations[contract.OutOfServiceProvenanceAnnotation]
	ownOutOfService := annotated || fencerecord.OwnOutOfServiceTaint(fr, podgc.Taint(node, contract.OutOfServiceTaintKey))
	if !quarantined && !active && !fencerecord.Pending(fr) && !hasFencingCondition(node) && !ownOutOfService &&
		podgc.Taint(node, contract.FencingTriagedTaintKey) == nil && podgc.Taint(node, contract.FencingRequiredTaintKey) == nil {
		return nil
	}
	// A remediation asked of MachineHealthCheck and not acted on goes
	// first, whatever the cleanup still waits for: the node is back.
	if err := c.withdrawRemediation(ctx, node, fr); err != nil {
		return err
	}
	if fencerecord.Pending(fr) && !quarantined {
		// A node that re-registered (deleted and back) while its volumes
		// may still be quarantined, or one whose release a fence recorded
		// meanwhile interrupted: nothing is scheduled there until its
		// agent has cleaned them. Admitted first, whatever the storm
		// guard's count (its fencing only continues), so that the guard
		// counts every quarantined node.
		always := func(int) (bool, string) { return true, "" }
		if _, err := c.guard.admit(ctx, node.Name, true, always, c.admissionStale); err != nil {
			return err
		}
		if err := c.addQuarantineTaint(ctx, node); err != nil {
			return err
		}
		if err := c.guard.confirm(ctx, node.Name, always, c.admissionStale); err != nil {
			return err
		}
	}
	vas, err := c.vasOn(node.Name)
	if err != nil {
		return err
	}
	ok, why := Release(fr, quarantined, vas, c.pvHandle, func(va *storagev1.VolumeAttachment) bool {
		return c.wantedOnNode(ctx, node.Name, va)
	})
	if !ok {
		klog.FromContext(ctx).V(2).Info("Node stays quarantined", "why", why)
		return c.setConditions(ctx, node.Name, map[string]v1.ConditionStatus{contract.ConditionFencingRequired: v1.ConditionTrue}, "AwaitingCleanup", why)
	}
	// The out-of-service taint goes only if this system added it (the
	// record says so): a taint an admin or another fencer added is theirs.
	if err := c.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		changed := withoutOwnOutOfServiceTaint(n, fr)
		var kept []v1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key == contract.QuarantineTaintKey || t.Key == contract.FencingTriagedTaintKey || t.Key == contract.FencingRequiredTaintKey {
				changed = true
				continue
			}
			kept = append(kept, t)
		}
		n.Spec.Taints = kept
		return changed
	}); err != nil {
		return err
	}
	if err := c.removeFencingConditions(ctx, node.Name); err != nil {
		return err
	}
	// The request's completion is the last write: until it is done, the
	// record is active and a pass after a crash anywhere above comes back
	// here, so that no admission or finalizer outlives the release. The
	// admission goes only on a live read that shows no fence recorded since
	// the cache this pass decided on (one recorded later still fails the
	// completion, and the next pass admits the node again before it
	// quarantines it).
	if active {
		cur, err := c.frClient.Get(ctx, node.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if fencerecord.Pending(cur) {
			return fmt.Errorf("a volume was recorded fenced on node %s meanwhile: its request stays open", node.Name)
		}
	}
	if err := c.guard.release(ctx, node.Name); err != nil {
		return err
	}
	if err := fencerecord.RemoveFinalizer(ctx, c.frClient, node.Name); err != nil {
		return err
	}
	if active {
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := c.frClient.Get(ctx, node.Name)
			if err != nil {
				return err
			}
			if fencerecord.Pending(cur) {
				// A fence was recorded since the cache this pass decided
				// on: the next pass quarantines the node again.
				return fmt.Errorf("a volume was recorded fenced on node %s meanwhile: its request stays open", node.Name)
			}
			now := metav1.Now()
			cur.Status.Phase = fencingv1alpha1.PhaseComplete
			cur.Status.CompletionTime = &now
			setFRCondition(cur, fencingv1alpha1.ConditionCleaned, metav1.ConditionTrue, "AllVolumesCleaned", "every fenced volume was cleaned up on the node")
			_, err = c.frClient.UpdateStatus(ctx, cur)
			return err
		}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Node released from quarantine")
	c.recorder.Eventf(node, v1.EventTypeNormal, "NodeReleased", "Node %s is back and cleaned: quarantine lifted", node.Name)
	return nil
}

func isFencingCondition(t string) bool {
	return t == contract.ConditionFencingTriaged || t == contract.ConditionFencingRequired || t == contract.ConditionFencingComplete
}

func hasFencingCondition(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if isFencingCondition(string(c.Type)) {
			return true
		}
	}
	return false
}

// setConditions sets Node Fencing KEP conditions on the node by one
// strategic-merge patch of status.conditions (merged by type), so that the
// kubelet's and the node lifecycle controller's conditions are never written
// back. A condition the cache shows as wanted already is not written again;
// a condition whose status is unchanged keeps its transition time.
func (c *Controller) setConditions(ctx context.Context, node string, want map[string]v1.ConditionStatus, reason, msg string) error {
	cached, err := c.nodes.Get(node)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	now := metav1.Now()
	var conds []v1.NodeCondition
	for _, t := range slices.Sorted(maps.Keys(want)) {
		s := want[t]
		var cur *v1.NodeCondition
		if cached != nil {
			for i := range cached.Status.Conditions {
				if string(cached.Status.Conditions[i].Type) == t {
					cur = &cached.Status.Conditions[i]
				}
			}
		}
		if cur != nil && cur.Status == s && cur.Reason == reason && cur.Message == msg {
			continue
		}
		transition := now
		if cur != nil && cur.Status == s {
			transition = cur.LastTransitionTime
		}
		conds = append(conds, v1.NodeCondition{Type: v1.NodeConditionType(t), Status: s, Reason: reason, Message: msg,
			LastTransitionTime: transition, LastHeartbeatTime: now})
	}
	if len(conds) == 0 {
		return nil
	}
	return c.patchConditions(ctx, node, conds)
}

// removeFencingConditions deletes the Node Fencing KEP's conditions from the
// node, by one strategic-merge patch (a condition that is not there is no
// error), whatever the cache shows.
func (c *Controller) removeFencingConditions(ctx context.Context, node string) error {
	var del []map[string]string
	for _, t := range []string{contract.ConditionFencingTriaged, contract.ConditionFencingRequired, contract.ConditionFencingComplete} {
		del = append(del, map[string]string{"type": t, "$patch": "delete"})
	}
	return c.patchConditions(ctx, node, del)
}

func (c *Controller) patchConditions(ctx context.Context, node string, conds interface{}) error {
	patch, err := json.Marshal(map[string]interface{}{"status": map[string]interface{}{"conditions": conds}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching the fencing conditions of node %s: %w", node, err)
	}
	return nil
}

func (c *Controller) updateNode(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, false, true, mutate)
}

func (c *Controller) updateNodeStatus(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, true, true, mutate)
}

// updateNodeLive is updateNode from a live read: for a change of what this
// pass wrote itself a moment ago, which the cache may not show yet (mutate
// would find nothing to change).
func (c *Controller) updateNodeLive(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return c.mutateNode(ctx, name, false, false, mutate)
}

// mutateNode applies mutate to a copy of the node and sends the difference
// as a strategic-merge patch (of its status subresource when status) that
// carries the copy's resourceVersion: the lists it changes (taints,
// volumesInUse) have no merge key and are replaced whole, so the patch must
// fail if anyone (the kubelet, the node lifecycle controller) wrote the node
// since. The first try starts from the cache when cached, saving a read; a
// conflict retries from a live read, as the node lifecycle controller's
// taint helpers do.
func (c *Controller) mutateNode(ctx context.Context, name string, status, cached bool, mutate func(*v1.Node) bool) error {
	nodes := c.client.CoreV1().Nodes()
	first := cached
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var n *v1.Node
		var err error
		if first {
			first = false
			if n, err = c.nodes.Get(name); err == nil {
				n = n.DeepCopy()
			}
		}
		if n == nil {
			if n, err = nodes.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		old := n.DeepCopy()
		old.ResourceVersion = ""
		if !mutate(n) {
			return nil
		}
		oldJSON, err := json.Marshal(old)
		if err != nil {
			return err
		}
		newJSON, err := json.Marshal(n)
		if err != nil {
			return err
		}
		patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Node{})
		if err != nil {
			return err
		}
		var sub []string
		if status {
			sub = []string{"status"}
		}
		_, err = nodes.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, sub...)
		return err
	})
}

func (c *Controller) vasOn(node string) ([]*storagev1.VolumeAttachment, error) {
	return onNode[*storagev1.VolumeAttachment](c.factory.Storage().V1().VolumeAttachments().Informer(), node)
}
