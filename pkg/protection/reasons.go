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

package protection

import (
	"fmt"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Reason says why a pod is not protected: its node dying now, the pod
// would not fail over automatically. The values label the
// csi_fence_unprotected_pods gauge and appear in `kubectl fence explain`.
type Reason string

// The reasons, in the order the failover meets them.
const (
	// ReasonNotScheduled: the pod is on no node.
	ReasonNotScheduled Reason = "not-scheduled"
	// ReasonDaemonSet: a DaemonSet's pod belongs to its node; it never
	// moves, and need not.
	ReasonDaemonSet Reason = "daemonset"
	// ReasonNoController: no driver's sidecar has registered: nothing of
	// this product runs (or runs elsewhere than the namespace looked in).
	ReasonNoController Reason = "no-controller"
	// ReasonGateOff: the NonGracefulFailover feature gate is off.
	ReasonGateOff Reason = "feature-gate-off"
	// ReasonControlPlane: control-plane nodes are never fenced
	// automatically.
	ReasonControlPlane Reason = "control-plane"
	// ReasonMaintenance: the node is cordoned or has a maintenance
	// condition (Maintenance).
	ReasonMaintenance Reason = "maintenance"
	// ReasonToleratesUnreachable: the pod tolerates the unreachable taint
	// for ever, so Kubernetes never evicts it and it never becomes a
	// Terminating pod the failover moves.
	ReasonToleratesUnreachable Reason = "tolerates-unreachable"
	// ReasonNotTerminating: the pod is not Terminating (Triage of a live
	// pod; Assess makes it Terminating as its node's death would).
	ReasonNotTerminating Reason = "not-terminating"
	// ReasonInlineVolume: an inline network volume (NFS, iSCSI, inline
	// CSI...), which no VolumeAttachment fence covers.
	ReasonInlineVolume Reason = "inline-volume"
	// ReasonClaimUnresolved: a claim that is not bound, or whose volume
	// cannot be found.
	ReasonClaimUnresolved Reason = "claim-unresolved"
	// ReasonNotCSI: a PersistentVolume that is not a CSI one.
	ReasonNotCSI Reason = "not-csi"
	// ReasonNoVolume: only node-local volumes: no storage fence concerns
	// the pod.
	ReasonNoVolume Reason = "no-volume"
	// ReasonRWX: a ReadWriteMany volume, which another node may use
	// legitimately: never failed over.
	ReasonRWX Reason = "rwx"
	// ReasonNotSafeDetach: a driver whose CSIDriver is not annotated
	// SafeDetach.
	ReasonNotSafeDetach Reason = "driver-not-safe-detach"
	// ReasonCannotFence: a SafeDetach driver that fences no storage, with
	// no out-of-service declaration, on a node no power switch or Machine
	// can fence.
	ReasonCannotFence Reason = "driver-cannot-fence"
	// ReasonOptedOut: the pod's or its namespace's label, or
	// --failover-opt-in without the label.
	ReasonOptedOut Reason = "opted-out"
	// ReasonStormGuardPaused: an admin paused all new fencing.
	ReasonStormGuardPaused Reason = "storm-guard-paused"
	// ReasonStormGuardFull: the storm guard would refuse one more node.
	ReasonStormGuardFull Reason = "storm-guard-full"
	// ReasonNoNodeBackend: storage fencing cannot free the pod and no
	// node-level backend is configured for its node.
	ReasonNoNodeBackend Reason = "no-node-backend"
)

// Reasons are every reason a pod may be unprotected, for the gauge.
var Reasons = []Reason{ReasonNoController, ReasonGateOff, ReasonControlPlane, ReasonMaintenance, ReasonToleratesUnreachable,
	ReasonInlineVolume, ReasonClaimUnresolved, ReasonNotCSI, ReasonNoVolume, ReasonRWX, ReasonNotSafeDetach, ReasonCannotFence,
	ReasonOptedOut, ReasonStormGuardPaused, ReasonStormGuardFull, ReasonNoNodeBackend}

// Counted reports whether a pod unprotected for r counts as one that
// should be: not one that is on no node, nor a DaemonSet's.
func (r Reason) Counted() bool {
	return r != ReasonNotScheduled && r != ReasonDaemonSet && r != ""
}

// Fix says what makes a pod unprotected for r protected: a value to set, an
// annotation a driver's owner adds, a FenceAgentConfig missing for the
// node. driver and node fill in the names where they help.
func (r Reason) Fix(driver, node string) string {
	switch r {
	case ReasonNoController:
		return "install fence-attacher's sidecar with the CSI driver (or point --storm-guard-namespace at the namespace it runs in)"
	case ReasonGateOff:
		return "start the sidecars with --feature-gates=" + contract.NonGracefulFailoverGate + "=true"
	case ReasonControlPlane:
		return "none automatic: a control-plane node is fenced only by an admin (kubectl fence fence " + node + ")"
	case ReasonMaintenance:
		return "uncordon node " + node + " (kubectl uncordon) or clear its maintenance condition once the work is done"
	case ReasonToleratesUnreachable:
		return "set tolerationSeconds on the pod's toleration of node.kubernetes.io/unreachable:NoExecute (for example 30), so that Kubernetes evicts it from a dead node"
	case ReasonInlineVolume:
		return "use a PersistentVolumeClaim (or a generic ephemeral volume) of a SafeDetach CSI driver instead of the inline volume"
	case ReasonClaimUnresolved:
		return "bind the claim to a PersistentVolume"
	case ReasonNotCSI:
		return "move the data to a PersistentVolume of a SafeDetach CSI driver"
	case ReasonNoVolume:
		return "none needed for its data: a pod with node-local volumes only has nothing to fence; it stays Terminating until the node is back or an admin taints it out-of-service"
	case ReasonRWX:
		return "ReadWriteMany volumes never fail over (another node may be using them); use ReadWriteOnce or ReadWriteOncePod if one node writes it at a time"
	case ReasonNotSafeDetach:
		return fmt.Sprintf("the owner of driver %s annotates its CSIDriver %s=%s, once its detach is known safe", driver, contract.SafeDetachAnnotation, contract.SafeDetachTrue)
	case ReasonCannotFence:
		return fmt.Sprintf("the driver %s advertises UNPUBLISH_FENCE, or its owner annotates its CSIDriver %s=%s (its unpublish revokes access) or %s=true; or add a FenceAgentConfig listing node %s (with power in --fencing-backends)",
			driver, contract.UnpublishRevokesAccessAnnotation, contract.UnpublishRevokesAccessTrue, contract.FencesOnOutOfServiceAnnotation, node)
	case ReasonOptedOut:
		return fmt.Sprintf("label the pod (its template) or its namespace %s=%s", contract.FailoverLabel, contract.FailoverEnabled)
	case ReasonStormGuardPaused:
		return "kubectl fence resume, once the reason of the pause is over"
	case ReasonStormGuardFull:
		return "release fenced nodes that are back, or raise --max-fenced-nodes / --max-fenced-node-percent"
	case ReasonNoNodeBackend:
		return fmt.Sprintf("add a FenceAgentConfig listing node %s (power in --fencing-backends), a Cluster API Machine for it (machine), or have driver %s fence storage", node, driver)
	}
	return ""
}
