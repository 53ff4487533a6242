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

// Package protection is the failover's decision, as pure functions: which
// Terminating pods of a dead node fail over, which may not and why (Triage),
// whether a driver's volumes may (FailsOver), whether storage fencing alone
// frees them or a node-level backend must fence the node (NeedsNodeFence,
// NodeBackends), whether a node is held from automatic fencing (Held) and
// whether the storm guard admits one more (StormGuard).
//
// pkg/failover calls them at failover time, on what its informers cache;
// Assess calls the same ones beforehand, on a pod as it would be if its node
// died now, for `kubectl fence explain` and the controller's gauge of pods
// not protected. The answer given ahead is the decision taken then: there is
// one copy of it. The functions read nothing themselves: the caller passes
// what they depend on (Facts), so that each caller may answer from its own
// sources (caches, or reads) and tests from plain values.
package protection

import (
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// Facts are what the triage of a node's pods reads of the cluster.
type Facts struct {
	// PV resolves a claim to its bound PersistentVolume (an error wrapping
	// ErrUnbound for a claim that is not bound).
	PV func(namespace, claim string) (*v1.PersistentVolume, error)
	// Driver returns a CSIDriver, an error if there is none.
	Driver func(name string) (*storagev1.CSIDriver, error)
	// StorageFences reports whether the storage backend is on and fences
	// the driver's attachments (UNPUBLISH_FENCE, or an unpublish its
	// owner declared revokes access: pkg/fencemode).
	StorageFences func(driver string) bool
	// FencesOnOutOfService reports whether the out-of-service backend is
	// on and the driver's CSIDriver declares it fences on the taint.
	FencesOnOutOfService func(driver string) bool
	// NamespaceLabels returns a namespace's labels (nil if unknown).
	NamespaceLabels func(namespace string) map[string]string
	// OptIn is --failover-opt-in.
	OptIn bool
}

// Errors of Resolve, which Triage tells apart.
var (
	ErrUnbound = errors.New("is not bound")
	ErrNotCSI  = errors.New("not a CSI volume")
)

// Resolve maps a claim of namespace to the volume the failover fences: its
// bound PersistentVolume, which must be a CSI one.
func Resolve(pvOf func(namespace, claim string) (*v1.PersistentVolume, error), namespace string) func(string) (*podgc.Volume, error) {
	return func(claim string) (*podgc.Volume, error) {
		pv, err := pvOf(namespace, claim)
		if err != nil {
			return nil, err
		}
		if pv.Spec.CSI == nil {
			return nil, fmt.Errorf("volume %s is %w", pv.Name, ErrNotCSI)
		}
		rwx := slices.Contains(pv.Spec.AccessModes, v1.ReadWriteMany)
		return &podgc.Volume{Driver: pv.Spec.CSI.Driver, VolumeHandle: pv.Spec.CSI.VolumeHandle, PVName: pv.Name, RWX: rwx}, nil
	}
}

// FailsOver decides whether a driver's volumes on a node may fail over:
// its CSIDriver is annotated SafeDetach, and either it fences storage, or
// it fences on the out-of-service taint, or the node can be fenced as a
// whole (wholeNode: a power switch, a Cluster API Machine). If not, the
// reason (ReasonNotSafeDetach, ReasonCannotFence) and a sentence.
func FailsOver(f Facts, wholeNode bool, driver string) (bool, Reason, string) {
	d, err := f.Driver(driver)
	if err != nil || d.Annotations[contract.SafeDetachAnnotation] != contract.SafeDetachTrue {
		return false, ReasonNotSafeDetach, fmt.Sprintf("driver %s is not SafeDetach (its CSIDriver has no %s=%s)", driver, contract.SafeDetachAnnotation, contract.SafeDetachTrue)
	}
	if wholeNode || f.StorageFences(driver) || f.FencesOnOutOfService(driver) {
		return true, "", ""
	}
	return false, ReasonCannotFence, fmt.Sprintf("driver %s does not fence storage (no UNPUBLISH_FENCE, no %s=%s, or no registration of its sidecar), does not fence on the out-of-service taint, and the node has no power switch or Machine to fence it whole",
		driver, contract.UnpublishRevokesAccessAnnotation, contract.UnpublishRevokesAccessTrue)
}

// Class sorts a Terminating pod of a node that may fail over.
type Class int

const (
	// Candidate: the pod fails over once its volumes are fenced.
	Candidate Class = iota
	// Blocked: storage fencing cannot move it (Reason says why).
	Blocked
	// OptedOut: its owner said no (podgc.FailoverAllowed).
	OptedOut
)

// Verdict is Triage's answer for one pod.
type Verdict struct {
	Class Class
	// Vols are a candidate's volumes (those that are not node-local).
	Vols []podgc.Volume
	// Reason and Why say why a pod is not a candidate; Driver names the
	// driver it is about, if any.
	Reason Reason
	Why    string
	Driver string
}

// Triage sorts one Terminating pod of a node: a candidate when every volume
// is node-local or of a driver that fails over there (FailsOver), none is
// ReadWriteMany, at least one is a CSI volume, and its owner allows it.
// wholeNode: the node can be fenced as a whole (FailsOver).
func Triage(p *v1.Pod, f Facts, wholeNode bool) Verdict {
	vols, err := podgc.Volumes(p, Resolve(f.PV, p.Namespace))
	if err != nil {
		r := ReasonClaimUnresolved
		switch {
		case errors.Is(err, podgc.ErrInlineVolume):
			r = ReasonInlineVolume
		case errors.Is(err, ErrNotCSI):
			r = ReasonNotCSI
		}
		return Verdict{Class: Blocked, Reason: r, Why: err.Error()}
	}
	failsOver := func(d string) bool {
		ok, _, _ := FailsOver(f, wholeNode, d)
		return ok
	}
	if r := podgc.CheckSafeDetach(p, vols, failsOver, func(podgc.Volume) bool { return true }); r != nil {
		v := Verdict{Class: Blocked, Why: r.Message}
		switch r.Rule {
		case podgc.RuleNoVolume:
			v.Reason = ReasonNoVolume
		case podgc.RuleRWX:
			v.Reason, v.Driver = ReasonRWX, r.Volume.Driver
		case podgc.RuleNotSafeDetach:
			// Which half of FailsOver refused, said precisely.
			_, v.Reason, v.Why = FailsOver(f, wholeNode, r.Volume.Driver)
			v.Driver = r.Volume.Driver
			v.Why = fmt.Sprintf("volume %s: %s", r.Volume.PVName, v.Why)
		default:
			v.Reason = ReasonNotTerminating
		}
		return v
	}
	var nsLabels map[string]string
	if f.NamespaceLabels != nil {
		nsLabels = f.NamespaceLabels(p.Namespace)
	}
	if ok, why := podgc.FailoverAllowed(p, nsLabels, f.OptIn); !ok {
		return Verdict{Class: OptedOut, Reason: ReasonOptedOut, Why: why}
	}
	return Verdict{Class: Candidate, Vols: vols}
}

// IsControlPlane reports control-plane nodes, which are never fenced
// automatically.
func IsControlPlane(n *v1.Node) bool {
	_, ok := n.Labels["node-role.kubernetes.io/control-plane"]
	return ok
}

// Maintenance says why a node must not be fenced automatically ("" if it
// may be): someone is working on it, with a maintenance condition set
// (contract.MaintenanceConditions) or cordoned (spec.unschedulable, as a
// drain starts). An admin's FencingRequest still fences it.
func Maintenance(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Status == v1.ConditionTrue && slices.Contains(contract.MaintenanceConditions, string(c.Type)) {
			return fmt.Sprintf("the node has condition %s=True", c.Type)
		}
	}
	if n.Spec.Unschedulable {
		return "the node is cordoned (being drained or under maintenance)"
	}
	return ""
}

// StormGuard says whether one more node may be fenced: at most max nodes
// (0: no absolute limit) and at most percent of all nodes may be quarantined
// at once (invariant S5). already is true when this node is quarantined
// already: continuing its fencing never counts against the limit.
func StormGuard(quarantined, total, max, percent int, already bool) (bool, string) {
	if already {
		return true, ""
	}
	if max > 0 && quarantined >= max {
		return false, fmt.Sprintf("%d nodes are fenced already (limit %d)", quarantined, max)
	}
	if percent > 0 && total > 0 && (quarantined+1)*100 > total*percent {
		return false, fmt.Sprintf("fencing one more node would fence %d of %d nodes (limit %d%%)", quarantined+1, total, percent)
	}
	return true, ""
}

// PowerFirst reports whether the admin ordered the power fence before the
// storage fence (--fencing-backends): then a node with a power switch is
// powered off at once.
func PowerFirst(backends []string) bool {
	p, s := slices.Index(backends, fencingv1alpha1.BackendPower), slices.Index(backends, fencingv1alpha1.BackendStorage)
	return p >= 0 && (s < 0 || p < s)
}

// NeedsNodeFence reports whether storage fencing alone cannot free the
// candidates whose volumes are vols: the power fence comes first, or one of
// them is of a driver that does not fence storage. (A fence that failed is
// the caller's to add: it is in the record, not a capability.)
func NeedsNodeFence(backends []string, vols []podgc.Volume, storageFences func(driver string) bool) (bool, string) {
	if PowerFirst(backends) && len(vols) > 0 {
		return true, "the power fence comes first (--fencing-backends)"
	}
	for _, v := range vols {
		if !storageFences(v.Driver) {
			return true, fmt.Sprintf("driver %s of volume %s does not fence storage", v.Driver, v.PVName)
		}
	}
	return false, ""
}

// NodeBackends are the node-level backends (--fencing-backends without
// storage) configured for a node, in the admin's order: the ones the
// failover tries, one after the other, when storage fencing cannot free its
// pods.
func NodeBackends(backends []string, configured func(backend string) bool) []string {
	var out []string
	for _, b := range backends {
		if b != fencingv1alpha1.BackendStorage && configured(b) {
			out = append(out, b)
		}
	}
	return out
}

// OutOfServiceFences reports whether the out-of-service taint fences a
// node: every attachment on it (vas) is of a driver that fences on the
// taint or fences storage (the attach/detach controller detaches them all
// once the taint is there, and each detach is then a fence), and one at
// least is of the first kind. An attachment whose driver is unknown
// (driverOf "": an inline volume, a PersistentVolume gone) means it does
// not, and neither does storage that reaches the node without an
// attachment (unattached, UnattachedStorage's answer): the taint would let
// the pod GCs delete its pod, and no detach would cut it.
func OutOfServiceFences(vas []*storagev1.VolumeAttachment, driverOf func(pv string) string, fencesOnOutOfService, storageFences func(driver string) bool, unattached string) bool {
	if unattached != "" {
		return false
	}
	some := false
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil {
			return false
		}
		d := driverOf(*va.Spec.Source.PersistentVolumeName)
		switch {
		case d == "":
			return false
		case fencesOnOutOfService(d):
			some = true
		case !storageFences(d):
			return false
		}
	}
	return some
}

// UnattachedStorage says why the pods on a node use storage that no fence
// of a VolumeAttachment covers ("" if none): a network volume that reaches
// the node without an attachment, which neither the driver's fence (of
// attachments) nor the attach/detach controller's detach (that the
// out-of-service taint triggers) can cut. Such storage is fenced only with
// the whole node (a confirmed power-off); until then, the node is not
// fenced as a whole (S9), whatever its attachments.
//
// Node-local volumes (pkg/podgc.NodeLocal, and local or hostPath
// PersistentVolumes) are no other node's business. Every other volume must
// be a CSI PersistentVolume whose fence covers it (covered: attached to the
// node through a VolumeAttachment, or recorded fenced there). An inline volume (NFS, iSCSI, RBD, CephFS, an inline CSI
// volume), a PersistentVolume of another kind, one of a CSI driver without
// attachments (attachRequired false: NFS-CSI, SMB, CephFS...) and a claim
// that cannot be resolved are not. Pods that have finished are skipped:
// their containers no longer run.
func UnattachedStorage(pods []*v1.Pod, pvOf func(namespace, claim string) (*v1.PersistentVolume, error), covered func(pv string) bool) string {
	for _, p := range pods {
		if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for _, vol := range p.Spec.Volumes {
			if podgc.NodeLocal(vol) {
				continue
			}
			claim, ok := podgc.ClaimName(p, vol)
			if !ok {
				return fmt.Sprintf("pod %s/%s has inline volume %s, which no attachment fence covers", p.Namespace, p.Name, vol.Name)
			}
			pv, err := pvOf(p.Namespace, claim)
			if err != nil {
				return fmt.Sprintf("pod %s/%s: volume %s: %v", p.Namespace, p.Name, vol.Name, err)
			}
			switch {
			case pv.Spec.Local != nil || pv.Spec.HostPath != nil:
			case pv.Spec.CSI == nil:
				return fmt.Sprintf("pod %s/%s uses PersistentVolume %s, which is not a CSI volume: no attachment fence covers it", p.Namespace, p.Name, pv.Name)
			case !covered(pv.Name):
				return fmt.Sprintf("pod %s/%s uses PersistentVolume %s of driver %s with no VolumeAttachment on the node: no attachment fence covers it", p.Namespace, p.Name, pv.Name, pv.Spec.CSI.Driver)
			}
		}
	}
	return ""
}
