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
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// The failover's decisions of a node and of its pods live in
// pkg/protection, where `kubectl fence explain` calls them too; these name
// them where this package's callers look.

// IsControlPlane is protection.IsControlPlane.
func IsControlPlane(n *v1.Node) bool { return protection.IsControlPlane(n) }

// Maintenance is protection.Maintenance.
func Maintenance(n *v1.Node) string { return protection.Maintenance(n) }

// StormGuard is protection.StormGuard.
func StormGuard(quarantined, total, max, percent int, already bool) (bool, string) {
	return protection.StormGuard(quarantined, total, max, percent, already)
}

// AdmissionStale decides whether a node's storm-guard admission holds a
// slot for nothing: nothing of it is pending in its record (no volume left
// to clean, no admin's request under way, no node-level fence of a node
// still down) and the node is gone, or Ready and not quarantined. node is
// nil for a Node that does not exist. Both are read live by the caller.
func AdmissionStale(node *v1.Node, fr *fencingv1alpha1.FencingRequest) bool {
	if fencerecord.Pending(fr) || fr.ManualActive() {
		return false
	}
	if node == nil {
		return true
	}
	if fr != nil && fr.Status.NodeFence != nil && fr.Status.Phase != fencingv1alpha1.PhaseComplete && !nodestate.Ready(node) {
		return false
	}
	return nodestate.Ready(node) && nodestate.Taint(node, contract.QuarantineTaintKey) == nil
}

// Release decides whether a node that is Ready again may leave quarantine:
// every volume recorded on it (all drivers, fenced or only intended) is
// cleaned, and no VolumeAttachment of those volumes remains on it unless the
// request was withdrawn (spec.released, or deleted and kept by its finalizer
// until now). A
// quarantined node with no record is not released: a quarantine taint never
// means "nothing to clean". It never decides by time.
//
// The attachment that must go first is the fenced one: released while it
// stays, external-attacher's reconciler would find it attached where the
// driver no longer publishes and publish the volume to the node again. A
// new attachment of the volume to the node, not attached and not being
// deleted, for a pod that runs on the node now (wanted, read live by the
// caller) is not that one: scheduled there once the node was back (a node
// that re-registered before its quarantine taint was put back), it waits
// for this release to be published, and holding the release for it would
// hold both for ever.
func Release(fr *fencingv1alpha1.FencingRequest, quarantined bool, vas []*storagev1.VolumeAttachment, pvHandle func(pv string) (driver, handle string), wanted func(*storagev1.VolumeAttachment) bool) (bool, string) {
	if fr == nil {
		if quarantined {
			return false, "the node is quarantined but has no FencingRequest recording what was fenced: remove the taint " + contract.QuarantineTaintKey + " by hand once its volumes are known to be clean"
		}
		return true, ""
	}
	for _, v := range fr.Status.Volumes {
		if v.CleanedTime == nil {
			msg := fmt.Sprintf("volume %s of driver %s is not cleaned up on the node yet", v.VolumeHandle, v.Driver)
			if v.CleanupError != "" {
				msg += ": " + v.CleanupError
			}
			return false, msg
		}
	}
	if fr.Spec.Released || fr.Withdrawn() && fr.Spec.Origin != fencingv1alpha1.OriginAutomatic {
		// Withdrawn by an admin (released, or their own request
		// deleted), everything cleaned: whatever stays attached there
		// may be published again. Deleting the record of an automatic
		// failover withdraws nothing: the fenced attachment must go
		// first, as without the deletion.
		return true, ""
	}
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		d, h := pvHandle(*va.Spec.Source.PersistentVolumeName)
		if fencerecord.Find(fr, d, h) == nil {
			continue
		}
		if !va.Status.Attached && va.DeletionTimestamp == nil && wanted(va) {
			continue
		}
		return false, fmt.Sprintf("VolumeAttachment %s of a fenced volume is still on the node", va.Name)
	}
	return true, ""
}

// UnattachedStorage is protection.UnattachedStorage.
func UnattachedStorage(pods []*v1.Pod, pvOf func(namespace, claim string) (*v1.PersistentVolume, error), covered func(pv string) bool) string {
	return protection.UnattachedStorage(pods, pvOf, covered)
}
