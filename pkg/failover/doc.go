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

// Package failover is the controller-side automatic failover of
// csi-fence-attacher (docs/safety.md has the invariants S1-S9 it keeps): for
// a pod stuck Terminating on a node that is not Ready, it quarantines the
// node, fences the pod's volumes through the driver, and only then
// force-deletes the pod, so that the replacement can attach its volume
// elsewhere without two nodes ever writing it. It also follows KEP-2268's
// out-of-service taint, the Node Fencing conditions and FencingRequests, and
// lifts the quarantine once the node is back and cleaned.
//
// One pass over a node (sync.go) observes it from the caches, decides its
// phase with one pure function (decide: gone, back, off, held, idle,
// failing, requested) and takes that phase's steps. A failing node's steps,
// in order, one file each:
//
//  1. honour.go: others' signals (the out-of-service taint, FencingComplete)
//     free pods, and evictions the taint manager lost are taken over;
//  2. triage.go: the Terminating pods that fail over once their storage is
//     fenced, and why the others do not (sorted as the pass observes the
//     node, said here);
//  3. sync.go (confirmDown): the node down by a live read (S4);
//  4. quarantine.go: the storm guard's admission (stormguard.go, S5) and the
//     quarantine taint, the record written first;
//  5. fencestorage.go: this driver's attachments fenced, write-ahead through
//     pkg/fencerecord (S1, S8);
//  6. nodefence.go: the node fenced as a whole when storage fencing cannot
//     free its pods, by the backends behind one interface: powerfence.go,
//     machinefence.go, outofservice.go;
//  7. volumesinuse.go: the fenced volumes taken out of the node's
//     volumesInUse, so that the attach/detach controller may detach them;
//  8. forcedelete.go: the pod GC, each pod whose storage is fenced deleted
//     through pkg/podgc's one guarded delete (S3), each volume's fenced
//     attachments let go as its last pod goes;
//  9. signals.go: the Node Fencing KEP's conditions, FencingComplete only
//     when the whole node is fenced (S9), taken back when it is not.
//
// Later, release.go lifts the quarantine of a node back and cleaned (S6),
// and nodegone.go lets go of a deleted Node's attachments. Each step is
// derived from the API state, so a restart between any two resumes where
// the last one stopped.
//
// Node-level steps have one owner in the cluster (owner.go: the holder of
// the csi-fence-node-fencing Lease, one of the drivers' controllers); every
// driver's controller fences its own attachments once the node is
// quarantined (syncDriver), and tells the owner what its driver can do
// through a registration (registry.go). decide.go holds the pure decisions,
// each table-tested.
package failover
