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

// Package contract names every key, value and number that fence-attacher shares
// with users, drivers and other components (DESIGN.md section 3). Code
// everywhere else imports these names instead of spelling them.
package contract

import (
	"regexp"
	"strings"
)

// Our own API prefix.
const Prefix = "csi-fence.io"

// CSIDriver annotation that marks a driver as SafeDetach (the seed's
// CSIDriverSpec.SafeDetach, which the real CSIDriverSpec lacks).
const (
	SafeDetachAnnotation = Prefix + "/safe-detach"
	SafeDetachTrue       = "true"
)

// Taints.
const (
	// QuarantineTaintKey (NoSchedule) keeps new pods off a node whose volumes
	// were fenced, until the node agent has cleaned them up.
	QuarantineTaintKey = Prefix + "/quarantine"
	// OutOfServiceTaintKey is KEP-2268's taint (NoExecute).
	OutOfServiceTaintKey = "node.kubernetes.io/out-of-service"
	// OutOfServiceTaintValue is the value this system writes when it adds the
	// out-of-service taint itself.
	OutOfServiceTaintValue = "nodeshutdown"
	// FencingRequiredTaintKey and FencingTriagedTaintKey are the Node Fencing
	// KEP's optional taints (NoSchedule and PreferNoSchedule).
	FencingRequiredTaintKey = "node.kubernetes.io/fencingrequired"
	FencingTriagedTaintKey  = "node.kubernetes.io/fencingtriaged"
)

// FencesOnOutOfServiceAnnotation on a CSIDriver ("true") declares that the
// driver fences a node's access in a plain ControllerUnpublishVolume when
// the node carries the out-of-service taint (ceph-csi's --enable-fencing):
// for a dead node whose every attachment is of such drivers (or of drivers
// that fence storage), adding the taint is the fence.
const FencesOnOutOfServiceAnnotation = Prefix + "/fences-on-out-of-service"

// UnpublishRevokesAccessAnnotation on a CSIDriver ("true") is its owner's
// declaration that a successful plain ControllerUnpublishVolume revokes the
// node's access to the volume (the cloud takes the disk away from the
// instance, alive or not). For such a driver that does not advertise
// UNPUBLISH_FENCE, the storage backend fences with a plain unpublish, under
// every rule a fence keeps (S1, S2, S8, S9). csi-fence-sanity checks the
// declaration against the driver.
const (
	UnpublishRevokesAccessAnnotation = Prefix + "/unpublish-revokes-access"
	UnpublishRevokesAccessTrue       = "true"
)

// OutOfServiceProvenanceAnnotation on a Node says this system added the
// out-of-service taint (value: the driver that added it), so that it removes
// only taints it added.
const OutOfServiceProvenanceAnnotation = Prefix + "/out-of-service-added-by"

// Node condition types of the Node Fencing KEP.
const (
	ConditionFencingTriaged  = "FencingTriaged"
	ConditionFencingRequired = "FencingRequired"
	ConditionFencingComplete = "FencingComplete"
)

// FencingRequest custom resource.
const (
	FencingGroup    = "fencing." + Prefix
	FencingVersion  = "v1alpha1"
	FencingKind     = "FencingRequest"
	FencingResource = "fencingrequests"
)

// FailoverLabel on a pod or its namespace opts it in ("enabled") or out
// ("disabled") of automatic failover; the pod's label wins over its
// namespace's. Without it, a pod fails over unless --failover-opt-in.
const (
	FailoverLabel    = Prefix + "/failover"
	FailoverEnabled  = "enabled"
	FailoverDisabled = "disabled"
)

// MaintenanceConditions are node conditions under which a node is never
// fenced automatically: someone is working on it (KEP-5683's conditions,
// alpha in Kubernetes 1.37).
var MaintenanceConditions = []string{"MaintenanceInProgress", "DrainInProgress", "GracefulNodeShutdownInProgress"}

// FenceAgentConfig custom resource (same group and version): how to power-fence
// nodes through a ClusterLabs fence agent (pkg/powerfence).
const (
	FenceAgentConfigKind     = "FenceAgentConfig"
	FenceAgentConfigResource = "fenceagentconfigs"
)

// FenceAgentCredentialsLabel on a Secret ("true") is its owner's consent to
// its use as fence agent credentials: a FenceAgentConfig may name only such
// a Secret, since the sidecar, which may read every Secret, would hand the
// values to an agent that connects wherever the config says.
const (
	FenceAgentCredentialsLabel = Prefix + "/fence-agent-credentials"
	FenceAgentCredentialsTrue  = "true"
)

// Feature gate that enables the SafeDetach pod GC.
const NonGracefulFailoverGate = "NonGracefulFailover"

// Pod termination reasons (the Pod Termination Reason design) and where they
// are recorded on a pod this system deletes.
const (
	TerminationReasonAnnotation = Prefix + "/termination-reason"
	TerminationReasonEnv        = "KUBE_POD_TERM_REASON"
	TerminationReasonHeader     = "KUBE-POD-TERM-REASON"

	TerminationEviction         = "Eviction"
	TerminationIntolerableTaint = "IntolerableTaint"
	TerminationDecommissioned   = "Decommissioned"
	TerminationUpdate           = "Update"
)

// NodeIDAnnotation is the VolumeAttachment annotation that external-attacher
// writes with the CSI node ID, used when the Node or CSINode is gone.
const NodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"

// PreviousNodeIDAnnotation on a VolumeAttachment names a CSI node ID the
// volume may still be published under although NodeIDAnnotation names
// another: the attacher writes it, with the NodeIDAnnotation it read, before
// external-attacher replaces that one with the node's new CSINode ID (a node
// plugin that registered again under another ID), and removes it only once
// the volume is unpublished from it. It is the write-ahead record of that
// unpublish (S1): a crash between external-attacher's write and the
// unpublish leaves the old ID named, for the retried publish to unpublish
// first and for a detach or fence to take the volume away from.
const PreviousNodeIDAnnotation = Prefix + "/previous-node-id"

// RecordFinalizer keeps a FencingRequest while any volume it records is not
// cleaned up on its node: deleting the record, or the Node, must never skip
// the cleanup (invariant S6).
const RecordFinalizer = Prefix + "/fence-record"

var badFinalizerChars = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// SanitizeDriverName turns a CSI driver name into the form external-attacher
// uses in its finalizer and Lease names: every character outside
// [a-zA-Z0-9-] becomes '-', and an 'X' is appended if the result ends in '-'.
func SanitizeDriverName(driver string) string {
	name := badFinalizerChars.ReplaceAllString(driver, "-")
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}

// AttacherFinalizer is the VolumeAttachment and PersistentVolume finalizer,
// the same as external-attacher's so that swapping the image adopts existing
// attachments.
func AttacherFinalizer(driver string) string {
	return "external-attacher/" + SanitizeDriverName(driver)
}

// AttacherLeaseName is external-attacher's leader-election Lease name, shared
// so that an old and a new replica never act at once.
func AttacherLeaseName(driver string) string {
	return "external-attacher-leader-" + SanitizeDriverName(driver)
}

// The Leases of the failover controllers, in the namespace of the driver's
// controller; admission policies and RBAC name them.

// NodeFencingLeaseName is the Lease whose holder owns node-level fencing
// state cluster-wide (S9): the quarantine taint, the Node Fencing conditions
// and taints, the storm guard's admissions, the pod GC and the
// FencingRequest's phase. Every driver's failover controller runs for it;
// whatever the number of drivers and replicas, one of them writes that state
// at a time, and the others fence only their own driver's attachments and
// record them per driver.
const NodeFencingLeaseName = "csi-fence-node-fencing"

// StormGuardLeaseName is the Lease that holds the storm guard's admissions.
const StormGuardLeaseName = "csi-fence-storm-guard"

// RegistrationLeaseName is the name of a driver's registration Lease: what
// the driver's failover controller tells the owner of node-level state its
// driver can do.
func RegistrationLeaseName(driver string) string {
	return "csi-fence-driver-" + SanitizeDriverName(driver)
}
