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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// SchemeGroupVersion is the group and version of this API.
var SchemeGroupVersion = schema.GroupVersion{Group: contract.FencingGroup, Version: contract.FencingVersion}

// Resource is the GroupVersionResource of FencingRequests.
var Resource = SchemeGroupVersion.WithResource(contract.FencingResource)

// FencingRequest asks for a node to be fenced and records the progress. It is
// cluster-scoped; its name is the node's name, one per node: the failover
// finds a node's request by its name, so a request named after another node
// than spec.nodeName would be ignored, and the CRD refuses it (metadata.name
// is immutable, so spec.nodeName is too).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Origin",type=string,JSONPath=`.spec.origin`
// +kubebuilder:printcolumn:name="Released",type=boolean,JSONPath=`.spec.released`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.errorReason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.nodeName",message="metadata.name must be spec.nodeName: a FencingRequest is named after the node it fences",fieldPath=".spec.nodeName"
type FencingRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FencingRequestSpec   `json:"spec"`
	Status FencingRequestStatus `json:"status,omitempty"`
}

// Origin says who asked for fencing.
//
// +kubebuilder:validation:Enum=Manual;Automatic
type Origin string

const (
	// OriginManual: an admin created the request. Only a manual request may
	// fence a node that is Ready (safety invariant S4).
	OriginManual Origin = "Manual"
	// OriginAutomatic: the failover controller created it for a node it
	// found NotReady.
	OriginAutomatic Origin = "Automatic"
)

// ManualActive reports whether fr is an admin's request (Manual, the
// default) that is neither done nor withdrawn: the only thing that may
// fence a node that is Ready (S4). fr may be nil.
func (fr *FencingRequest) ManualActive() bool {
	return fr != nil && fr.Spec.Origin != OriginAutomatic &&
		fr.Status.Phase != PhaseComplete && !fr.Withdrawn()
}

// Withdrawn reports whether the request was withdrawn: released through
// its spec (spec.released, what `kubectl fence release` sets) or being
// deleted (kept by its finalizer until its volumes are cleaned). Either
// way nothing new is fenced for it, and the node leaves quarantine once
// every volume recorded in it is cleaned. fr may be nil.
func (fr *FencingRequest) Withdrawn() bool {
	return fr != nil && (fr.Spec.Released || fr.DeletionTimestamp != nil)
}

// FencingRequestSpec is what is asked.
//
// spec.released withdraws an admin's request (kubectl fence release): it
// cannot be undone (a new fence is a new request), and the failover's own
// records are released by the failover.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.released) || !oldSelf.released || (has(self.released) && self.released)",message="spec.released cannot be unset: to fence the node again, create a new request once this one is Complete",fieldPath=".released"
// +kubebuilder:validation:XValidation:rule="!has(self.released) || !self.released || !has(self.origin) || self.origin != \"Automatic\"",message="an Automatic FencingRequest is the failover's record, released by the failover once its volumes are cleaned: spec.released is for Manual requests",fieldPath=".released"
type FencingRequestSpec struct {
	// NodeName is the node to fence.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`
	// Origin is Manual (the default) or Automatic.
	Origin Origin `json:"origin,omitempty"`
	// Reason is a short, human-readable reason for the request.
	Reason string `json:"reason,omitempty"`
	// Released withdraws an admin's request (Manual): nothing new is
	// fenced for it, and the node leaves quarantine once the node agent has
	// cleaned every volume recorded in it; then the request is Complete and
	// stays as the record of what was done. Once set it cannot be unset
	// (the CRD's rule): fencing the node again is a new request. An
	// automatic request is released by the failover itself: setting it
	// there is refused by the CRD too.
	Released bool `json:"released,omitempty"`
}

// Phase is a summary of a request's progress.
//
// +kubebuilder:validation:Enum=Pending;Fencing;Fenced;Cleaning;Complete
type Phase string

const (
	// PhasePending: accepted, nothing fenced yet.
	PhasePending Phase = "Pending"
	// PhaseFencing: fencing is under way (or being retried after an error).
	PhaseFencing Phase = "Fencing"
	// PhaseFenced: every attachment on the node is fenced; the node is
	// quarantined until it returns and is cleaned.
	PhaseFenced Phase = "Fenced"
	// PhaseCleaning: the node is back and its node agent is cleaning up.
	PhaseCleaning Phase = "Cleaning"
	// PhaseComplete: every fenced volume was cleaned up on the node and the
	// quarantine was lifted.
	PhaseComplete Phase = "Complete"
)

// Condition types of a FencingRequest.
const (
	// ConditionFenced is True when every attachment on the node is fenced.
	ConditionFenced = "Fenced"
	// ConditionCleaned is True when every fenced volume was cleaned up.
	ConditionCleaned = "Cleaned"
)

// FencingRequestStatus is the record of progress.
type FencingRequestStatus struct {
	// Phase summarises the progress.
	Phase Phase `json:"phase,omitempty"`
	// Conditions are Fenced and Cleaned.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// StartTime is when fencing started.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the node was cleaned and released.
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// ErrorReason is the last error's reason, if any.
	ErrorReason string `json:"errorReason,omitempty"`
	// ErrorMessage is the last error's message, if any.
	ErrorMessage string `json:"errorMessage,omitempty"`
	// Volumes is the durable list of volumes fenced on the node, per driver.
	// Bounded (fencerecord.MaxVolumes, the CRD's maxItems): a request that
	// starts over forgets the entries its last failure cleaned; at the
	// bound, those cleaned longest ago go first; an entry not cleaned is
	// never dropped: the intent of one more fence fails instead.
	// +kubebuilder:validation:MaxItems=512
	Volumes []FencedVolume `json:"volumes,omitempty"`
	// NodeFence is the fence of the node as a whole by a node-level backend
	// (power), when storage fencing alone could not free its pods: its
	// intent is recorded before the backend acts (S8), its outcome after.
	NodeFence *NodeFence `json:"nodeFence,omitempty"`
	// ForceDeletedPods are the pods of the node this system force-deleted
	// while the node was away, with their termination reason: when the
	// node is back, its kubelet stops their containers and runs their
	// preStop hooks, but the pods are gone from the API, and their
	// ServiceAccount tokens, bound to them, with them. The node's agent
	// serves the reason from here (pkg/nodeagent). Bounded: the oldest go
	// first (fencerecord.MaxForceDeletedPods).
	// +kubebuilder:validation:MaxItems=256
	ForceDeletedPods []ForceDeletedPod `json:"forceDeletedPods,omitempty"`
}

// ForceDeletedPod is one pod force-deleted from a node that was away.
type ForceDeletedPod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// TerminationReason is the reason recorded on the pod before its
	// deletion (contract.TerminationReasonAnnotation).
	TerminationReason string       `json:"terminationReason"`
	DeletedTime       *metav1.Time `json:"deletedTime,omitempty"`
}

// Node-level fencing backends, as --fencing-backends names them.
const (
	// BackendStorage fences each attachment through its driver
	// (ControllerUnpublishVolume with fence=true).
	BackendStorage = "storage"
	// BackendPower powers the node off through a fence agent.
	BackendPower = "power"
	// BackendOutOfService adds the out-of-service taint to a node whose
	// every attachment is of drivers that fence on it (their CSIDriver says
	// so, contract.FencesOnOutOfServiceAnnotation) or fence storage: their
	// unpublish during the detach the taint starts is the fence.
	BackendOutOfService = "out-of-service"
	// BackendMachine deletes the node's Cluster API Machine (the
	// remediation MachineHealthCheck itself does) and counts the node
	// fenced once the infrastructure provider reports its instance gone
	// (pkg/machinefence).
	BackendMachine = "machine"
)

// Backends are every fencing backend.
var Backends = []string{BackendStorage, BackendPower, BackendOutOfService, BackendMachine}

// NodeFence is one node-level fence: which backend, what it did.
type NodeFence struct {
	// Backend is the node-level backend: power, or out-of-service (the taint
	// was added; the drivers' fences are the volumes' entries, and
	// confirmedTime stays empty), or machine.
	// +kubebuilder:validation:Enum=power;out-of-service;machine
	Backend string `json:"backend"`
	// Config and Agent name the FenceAgentConfig and the agent that ran.
	Config string `json:"config,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// StartedTime is when the intent was recorded, before the first agent
	// action of this attempt: from then on the node may be off.
	StartedTime *metav1.Time `json:"startedTime,omitempty"`
	// Attempts counts the fences started under this request.
	Attempts int32 `json:"attempts,omitempty"`
	// ConfirmedTime is when the agent's status reported the node off; nil
	// while not confirmed. A node confirmed off stays fenced only while it
	// has not been Ready since.
	ConfirmedTime *metav1.Time `json:"confirmedTime,omitempty"`
	// OutOfServiceTaintAdded is the timeAdded of the out-of-service taint
	// this system put on the node for this fence, recorded before the
	// taint: release removes an out-of-service taint only if its timeAdded
	// is this one. The record, not an annotation on the Node (which its
	// own kubelet may write), says whose taint it is.
	OutOfServiceTaintAdded *metav1.Time `json:"outOfServiceTaintAdded,omitempty"`
	// NotReadySince is the node's Ready condition's lastTransitionTime, as
	// the node lifecycle controller wrote it, read just before the fence:
	// a confirmation holds only while that condition has not changed since
	// (the node has not been Ready in between). An equality of one clock's
	// times, never a comparison of the controller's clock with this one's.
	NotReadySince *metav1.Time `json:"notReadySince,omitempty"`
	// Error is the last failure (redacted: no credential), if not confirmed.
	Error string `json:"error,omitempty"`
	// Output is the last agent runs' output, redacted and truncated.
	Output string `json:"output,omitempty"`
	// Machine is the Cluster API Machine a machine fence deletes, as it
	// was read when the intent was recorded (backend machine only).
	Machine *MachineTarget `json:"machine,omitempty"`
}

// MachineTarget names the Cluster API Machine of a node and the
// infrastructure object (InfraMachine) whose disappearance confirms the
// fence: UIDs included, so that a Machine deleted and replaced under the
// same name is neither deleted nor taken for the one fenced.
type MachineTarget struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// ProviderID is the Machine's spec.providerID (the instance's ID).
	ProviderID string `json:"providerID,omitempty"`
	// Infrastructure is the Machine's spec.infrastructureRef, resolved.
	Infrastructure InfrastructureRef `json:"infrastructure"`
	// DeletionStartedBy is "fence-attacher" when this system deleted the
	// Machine, "other" when it found the Machine being deleted already
	// (by MachineHealthCheck, an admin, a MachineSet) and only waited for
	// it; empty until the deletion is asked or found.
	DeletionStartedBy string `json:"deletionStartedBy,omitempty"`
}

// InfrastructureRef is an InfraMachine: what the infrastructure provider
// keeps for one instance.
type InfrastructureRef struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid,omitempty"`
	// DeletionSeenTime is when this system read the InfraMachine of UID
	// being deleted through its provider: a deletionTimestamp, the
	// provider's finalizers in place, neither paused nor being moved by
	// clusterctl. Its disappearance after that is the provider's report
	// that the instance is deleted; a disappearance never preceded by such
	// a read (a finalizer removed by hand, a move, an edited
	// infrastructureRef) confirms nothing.
	DeletionSeenTime *metav1.Time `json:"deletionSeenTime,omitempty"`
}

// FencedVolume is one volume fenced on the request's node.
type FencedVolume struct {
	// Driver is the CSI driver name.
	Driver string `json:"driver"`
	// VolumeHandle is the CSI volume ID.
	VolumeHandle string `json:"volumeHandle"`
	// PersistentVolumeName is the PV, when known.
	PersistentVolumeName string `json:"persistentVolumeName,omitempty"`
	// NodeID is the CSI node ID the volume was fenced from.
	NodeID string `json:"nodeID,omitempty"`
	// StartedTime is when the intent to fence was recorded, before the
	// first ControllerUnpublishVolume(fence=true) of this quarantine was
	// sent (write-ahead, invariant S8). From then on, until CleanedTime, the
	// volume may be quarantined on the node: the driver may have applied a
	// fence whose answer was lost (timeout, crash).
	StartedTime *metav1.Time `json:"startedTime,omitempty"`
	// FencedTime is when ControllerUnpublishVolume(fence=true) succeeded;
	// nil while the fence has not been confirmed.
	FencedTime *metav1.Time `json:"fencedTime,omitempty"`
	// FenceError is the last fence error, if it has not succeeded
	// (truncated to fencerecord.MaxMessageLength by its writer).
	// +kubebuilder:validation:MaxLength=512
	FenceError string `json:"fenceError,omitempty"`
	// CleanedTime is when the node agent finished the forced cleanup.
	CleanedTime *metav1.Time `json:"cleanedTime,omitempty"`
	// CleanupError is the last cleanup error, if cleanup has not succeeded
	// (truncated to fencerecord.MaxMessageLength by its writer).
	// +kubebuilder:validation:MaxLength=512
	CleanupError string `json:"cleanupError,omitempty"`
	// FencesInFlight names the fence calls (a random ID each) that recorded
	// their intent to fence the volume in this quarantine and not yet their
	// outcome. A call that ends up sending nothing removes the entry only as
	// the last one in flight, when no fence of it has an outcome: another
	// call's fence may have been applied while its outcome is still to be
	// written, or never will be (a crash), and the entry is all that says so.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=32
	FencesInFlight []string `json:"fencesInFlight,omitempty"`
}

// FencingRequestList is a list of FencingRequests.
//
// +kubebuilder:object:root=true
type FencingRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencingRequest `json:"items"`
}
