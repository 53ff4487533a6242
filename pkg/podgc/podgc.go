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

// Package podgc is the pod GC of csi-fence-attacher: the one place that
// force-deletes a pod, and the home of safety invariant S3. Like Kubernetes'
// own pod GC (pkg/controller/podgc), it has one pure decision per reason a pod
// may be force-deleted, each tested alone, and one guarded delete:
//
//   - SafeDetach: the pod is Terminating, every volume it has that is not
//     node-local is a CSI volume of a SafeDetach driver, none is
//     ReadWriteMany, and each is recorded fenced on the node;
//   - OutOfService (KEP-2268): the node carries the out-of-service taint and
//     the pod does not tolerate it;
//   - FencingComplete (Node Fencing KEP): the node's FencingComplete
//     condition is True, which means the whole node is fenced (S9).
//
// Whatever the reason, ForceDelete reads the Node and its heartbeat Lease
// live immediately before it deletes and refuses unless the node is down by
// pkg/nodehealth's test (its kubelet stopped talking): a decision made from a
// cache, or before a slow fence, never deletes a pod on a node that came
// back.
package podgc

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// Reasons label the csi_fence_force_delete_pods_total metrics and the events: each
// names the rule that allowed a force-delete.
const (
	ReasonSafeDetach      = "safe-detach"
	ReasonOutOfService    = "out-of-service"
	ReasonFencingComplete = "fencing-complete"
)

// FieldManager is the server-side apply manager of the pod status this GC
// writes before deleting.
const FieldManager = "csi-fence-attacher-podgc"

// DisruptionTarget reasons of Kubernetes' own controllers (kept in
// k8s.io/kubernetes, which is not importable): the taint manager's, which
// tells an IntolerableTaint termination, and the pod GC's, which this GC
// uses for the pods it deletes.
const (
	DisruptionReasonTaintManager = "DeletionByTaintManager"
	DisruptionReasonPodGC        = "DeletionByPodGC"
)

// Volume is one volume of a pod that outlives its node (not node-local),
// resolved through its claim to a CSI PersistentVolume.
type Volume struct {
	Driver       string
	VolumeHandle string
	PVName       string
	RWX          bool
}

// NodeLocal reports whether a pod volume lives and dies with the node, so
// that a second node can never see it: an allow-list, so that any network
// volume source (NFS, iSCSI, RBD, FC, an in-tree cloud disk...) is not.
func NodeLocal(v v1.Volume) bool {
	s := v.VolumeSource
	return s.EmptyDir != nil || s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil ||
		s.Projected != nil || s.HostPath != nil || s.Image != nil
}

// ClaimName returns the name of the claim behind a pod volume: a
// PersistentVolumeClaim's, or the one generated for an ephemeral volume
// ("<pod>-<volume>"); ok is false for an inline volume.
func ClaimName(pod *v1.Pod, vol v1.Volume) (string, bool) {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName, true
	case vol.Ephemeral != nil:
		return pod.Name + "-" + vol.Name, true
	}
	return "", false
}

// WantsClaim returns the first of pods that runs on node, is not
// terminating nor finished, and uses the claim namespace/name (directly or
// as an ephemeral volume's generated claim): a pod that waits for, or uses,
// that claim's volume on the node. nil if none.
func WantsClaim(pods []v1.Pod, node, namespace, claim string) *v1.Pod {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || p.Namespace != namespace || p.DeletionTimestamp != nil ||
			p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for _, vol := range p.Spec.Volumes {
			if name, ok := ClaimName(p, vol); ok && name == claim {
				return p
			}
		}
	}
	return nil
}

// ErrInlineVolume is why Volumes refuses a pod with a volume that is neither
// node-local nor a claim.
var ErrInlineVolume = errors.New("it cannot be fenced")

// Volumes resolves the pod's volumes that are not node-local. claim maps a
// claim name (a PVC, or the generated claim of an ephemeral volume) to its
// CSI volume, or fails. A volume that is neither node-local nor a claim
// (inline CSI, NFS, iSCSI...) cannot be fenced through a VolumeAttachment:
// an error.
func Volumes(pod *v1.Pod, claim func(name string) (*Volume, error)) ([]Volume, error) {
	var out []Volume
	for _, vol := range pod.Spec.Volumes {
		if NodeLocal(vol) {
			continue
		}
		name, ok := ClaimName(pod, vol)
		if !ok {
			return nil, fmt.Errorf("volume %s is an inline network volume: %w", vol.Name, ErrInlineVolume)
		}
		v, err := claim(name)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}

// SafeDetach decides whether a pod may be force-deleted on the SafeDetach
// path once fenced reports each of its volumes fenced on the node: it is
// Terminating, has at least one volume, every volume's driver is SafeDetach
// and none is ReadWriteMany (another node may legitimately use it). A pod
// with only node-local volumes is no business of a storage fence. It is
// CheckSafeDetach's answer as a sentence.
func SafeDetach(pod *v1.Pod, vols []Volume, safeDetach func(driver string) bool, fenced func(Volume) bool) (bool, string) {
	if r := CheckSafeDetach(pod, vols, safeDetach, fenced); r != nil {
		return false, r.Message
	}
	return true, ""
}

// Rules of the SafeDetach path a pod can fail (Refusal.Rule).
const (
	RuleNotTerminating = "not-terminating"
	RuleNoVolume       = "no-volume"
	RuleRWX            = "rwx"
	RuleNotSafeDetach  = "not-safe-detach"
	RuleNotFenced      = "not-fenced"
)

// Refusal is why CheckSafeDetach refuses a pod: the rule it fails, the
// volume that fails it (none for the pod's own rules) and the sentence the
// Events and logs say.
type Refusal struct {
	Rule    string
	Volume  Volume
	Message string
}

// CheckSafeDetach is SafeDetach's decision, nil when the pod passes, else
// the first rule it fails, in SafeDetach's order.
func CheckSafeDetach(pod *v1.Pod, vols []Volume, safeDetach func(driver string) bool, fenced func(Volume) bool) *Refusal {
	if pod.DeletionTimestamp == nil {
		return &Refusal{Rule: RuleNotTerminating, Message: "the pod is not Terminating"}
	}
	if len(vols) == 0 {
		return &Refusal{Rule: RuleNoVolume, Message: "the pod has no volume to fence"}
	}
	for _, v := range vols {
		switch {
		case v.RWX:
			return &Refusal{Rule: RuleRWX, Volume: v, Message: fmt.Sprintf("volume %s is ReadWriteMany", v.PVName)}
		case !safeDetach(v.Driver):
			return &Refusal{Rule: RuleNotSafeDetach, Volume: v, Message: fmt.Sprintf("driver %s of volume %s is not SafeDetach", v.Driver, v.PVName)}
		case !fenced(v):
			return &Refusal{Rule: RuleNotFenced, Volume: v, Message: fmt.Sprintf("volume %s is not fenced on the node yet", v.PVName)}
		}
	}
	return nil
}

// FailoverAllowed decides the per-workload policy of the SafeDetach path:
// the pod's label, else its namespace's (FailoverLabel), else the default
// (allowed unless optIn). It does not apply to taints and conditions that
// others set (KEP-2268, the Node Fencing KEP): those are their decisions.
func FailoverAllowed(pod *v1.Pod, nsLabels map[string]string, optIn bool) (bool, string) {
	for _, l := range []struct {
		labels map[string]string
		whose  string
	}{{pod.Labels, "pod"}, {nsLabels, "namespace"}} {
		switch v := l.labels[contract.FailoverLabel]; v {
		case contract.FailoverEnabled:
			return true, ""
		case contract.FailoverDisabled:
			return false, fmt.Sprintf("failover disabled by the %s's label %s=%s", l.whose, contract.FailoverLabel, v)
		case "":
		default:
			// A typo must not fence a workload its owner meant to keep.
			return false, fmt.Sprintf("the %s's label %s=%q is neither %q nor %q", l.whose, contract.FailoverLabel, v, contract.FailoverEnabled, contract.FailoverDisabled)
		}
	}
	if optIn {
		return false, fmt.Sprintf("failover is opt-in (--failover-opt-in) and neither the pod nor its namespace has %s=%s", contract.FailoverLabel, contract.FailoverEnabled)
	}
	return true, ""
}

// OutOfService decides KEP-2268's rule: a Terminating pod on a node that is
// not Ready and carries the out-of-service taint, which the pod does not
// tolerate.
func OutOfService(pod *v1.Pod, node *v1.Node) bool {
	t := nodestate.Taint(node, contract.OutOfServiceTaintKey)
	return pod.DeletionTimestamp != nil && t != nil && !nodestate.Ready(node) && !Tolerates(pod, *t)
}

// FencingComplete decides the Node Fencing KEP's rule: a Terminating pod on
// a node that is not Ready and whose FencingComplete condition is True. Who
// sets that condition vouches for the whole node (S9); this system sets it
// only when every attachment of every driver on the node is fenced.
func FencingComplete(pod *v1.Pod, node *v1.Node) bool {
	return pod.DeletionTimestamp != nil && !nodestate.Ready(node) && nodestate.ConditionTrue(node, contract.ConditionFencingComplete)
}

// Tolerates reports whether the pod tolerates the taint forever (a
// toleration with tolerationSeconds never takes effect past its time).
func Tolerates(pod *v1.Pod, taint v1.Taint) bool {
	for _, t := range pod.Spec.Tolerations {
		if t.ToleratesTaint(klog.Background(), &taint, false) && t.TolerationSeconds == nil {
			return true
		}
	}
	return false
}

// ErrNodeAlive is returned by ForceDelete for a node whose kubelet talks
// (pkg/nodehealth).
var ErrNodeAlive = nodehealth.ErrNodeAlive

// GC force-deletes pods.
type GC struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	// Health decides whether a node is down, by live reads and its own
	// observation of the node's heartbeat (fed by the caller's Lease
	// informer).
	Health *nodehealth.Observer
}

// NodeHealth reads the node and its heartbeat Lease live
// (nodehealth.Observer.Check).
func (g *GC) NodeHealth(ctx context.Context, nodeName string) (nodehealth.Health, error) {
	return g.Health.Check(ctx, nodeName)
}

// NodeDown is the refusal form of NodeHealth: nil only when the node is
// down, else the read's error or one wrapping ErrNodeAlive that says why.
func (g *GC) NodeDown(ctx context.Context, nodeName string) error {
	h, err := g.NodeHealth(ctx, nodeName)
	if err != nil {
		return err
	}
	return h.Err()
}

// ForceDelete deletes the pod with a zero grace period for reason, the one
// guarded delete of this system (S3): it reads the node live first and
// refuses (ErrNodeAlive) unless it is down; it then records why on the pod,
// as the in-tree pod GC does (phase Failed and a DisruptionTarget condition,
// by server-side apply, with the termination reason), and deletes the pod it
// decided about. Each request names the pod's UID: a decision made from a
// cache may be about a pod that is gone and replaced under the same name
// (a StatefulSet's), on a healthy node, which must not be touched. A pod
// that is gone already is no error.
//
// going, if not nil, is called once the node is found down and before the
// pod's status is written: what must be done before anyone sees the pod
// terminated. The attach/detach controller drops a pod from its desired
// state on its Failed phase, before the delete, and detaches its volumes at
// its next reconcile.
func (g *GC) ForceDelete(ctx context.Context, pod *v1.Pod, reason, terminationReason, message string, going func()) error {
	logger := klog.FromContext(ctx)
	if err := g.NodeDown(ctx, pod.Spec.NodeName); err != nil {
		forceDeletePodsRefused.WithLabelValues(reason).Inc()
		return fmt.Errorf("not force-deleting pod %s: %w", klog.KObj(pod), err)
	}
	if going != nil {
		going()
	}
	// One write records why, before the delete: the termination reason
	// (an annotation, which the pod status subresource accepts) with the
	// phase and the condition.
	pods := g.Client.CoreV1().Pods(pod.Namespace)
	status := corev1apply.Pod(pod.Name, pod.Namespace).WithUID(pod.UID).
		WithAnnotations(map[string]string{contract.TerminationReasonAnnotation: terminationReason}).
		WithStatus(corev1apply.PodStatus().
			WithPhase(v1.PodFailed).
			WithConditions(corev1apply.PodCondition().
				WithType(v1.DisruptionTarget).
				WithStatus(v1.ConditionTrue).
				WithReason(DisruptionReasonPodGC).
				WithMessage(message).
				WithLastTransitionTime(metav1.Now())))
	if _, err := pods.ApplyStatus(ctx, status, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return g.failed(pod, reason, fmt.Errorf("marking the pod failed: %w", err))
	}
	zero := int64(0)
	err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return g.failed(pod, reason, err)
	}
	forceDeletePods.WithLabelValues(reason).Inc()
	logger.V(2).Info("Force-deleted pod", "pod", klog.KObj(pod), "node", pod.Spec.NodeName, "reason", reason, "terminationReason", terminationReason)
	g.Recorder.Eventf(pod, v1.EventTypeNormal, "ForceDeleted", "Force-deleted (%s), termination reason %s: %s", reason, terminationReason, message)
	return nil
}

func (g *GC) failed(pod *v1.Pod, reason string, err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	forceDeletePodErrors.WithLabelValues(reason).Inc()
	return fmt.Errorf("force-deleting pod %s: %w", klog.KObj(pod), err)
}

// TerminationReason is the seed's termination reason for a pod this GC
// deletes: IntolerableTaint when the taint manager marked it for deletion,
// Eviction otherwise. A pod this GC marked already keeps the reason it was
// marked with: ForceDelete's status write replaces the taint manager's
// DisruptionTarget with its own, so a pass that retries the delete, or one
// beside it that still sees the pod in its cache, would otherwise record
// Eviction for a pod deleted for IntolerableTaint (the reason its preStop
// hooks get from the node's FencingRequest when the node is back).
func TerminationReason(pod *v1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type != v1.DisruptionTarget {
			continue
		}
		switch c.Reason {
		case DisruptionReasonTaintManager:
			return contract.TerminationIntolerableTaint
		case DisruptionReasonPodGC:
			if r := pod.Annotations[contract.TerminationReasonAnnotation]; r != "" {
				return r
			}
		}
	}
	return contract.TerminationEviction
}
