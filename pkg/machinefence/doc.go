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

// Package machinefence is the failover's machine backend: it fences a node
// that a Cluster API Machine owns by the remediation Cluster API documents
// for an unhealthy Machine, deleting it, and counts the node fenced only
// once the infrastructure provider reports the instance gone.
//
// The contract it relies on (Cluster API's Machine and InfraMachine
// contracts): a Machine being deleted has its InfraMachine (the object
// spec.infrastructureRef names) deleted by the Machine controller, after an
// optional drain; the infrastructure provider removes the InfraMachine's
// finalizer only once the instance is deleted. So the InfraMachine
// recorded (by UID, before the Machine is deleted), once read being
// deleted through its provider (a deletionTimestamp, its finalizers, not
// paused, not marked for clusterctl move) and then read gone, is the
// provider's own report that the instance is gone. Gone without such a
// read (its finalizer removed by hand, a move), replaced under its name (a
// pivot), or gone before the fence starts (an edited infrastructureRef),
// it reports nothing: the fence is not confirmed, and a person must act.
// Nothing here infers it from time passing or from the Machine alone.
//
// Which Machine: the one the Node's annotations cluster.x-k8s.io/machine and
// cluster.x-k8s.io/cluster-namespace name (the Machine controller sets
// them), read live, and only if that Machine's status.nodeRef names the
// Node back and their providerIDs agree: a stale annotation, or a Machine
// replaced under the same name, is refused, never deleted.
//
// Two ways to ask (Mode): delete the Machine (ModeDelete, the default), or
// ask MachineHealthCheck to remediate it (ModeMHC: the annotation
// cluster.x-k8s.io/remediate-machine, so that the cluster's MHC stays the one
// remediator, with its own limits). A Machine already being deleted, by
// whomever, is not asked again: its deletion is followed to the same
// confirmation.
//
// Unstructured objects through the dynamic client: the sidecar needs no
// Cluster API module, works with whichever provider's InfraMachine kind,
// and reads v1beta2 Machines (Cluster API v1.11 and later).
package machinefence
