package attacher

import (
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// detachOrders remembers, for each VolumeAttachment this process saw
// being deleted, which volumes of the driver the node's kubelet reported
// in use (status.volumesInUse) at that moment, as the Node cache showed
// it. It tells the two reasons a Ready node may report a volume in use
// when its detach comes (DecideFence):
//
//   - the attach/detach controller forced the detach while the kubelet
//     still used the volume: it does so only from a node that is not
//     healthy (Ready) or that carries the out-of-service taint, after its
//     timeout, and the kubelet kept reporting the volume in use all along
//     (the mount may still be there: fence it);
//   - the controller detached a volume the kubelet had released (it reads
//     the Node live right before and refuses one still in use), and a pod
//     scheduled to the node since wants it again: a kubelet reports a
//     volume in use as soon as a pod on it wants the volume, before its
//     attach, and mounts it only once the controller reports it attached
//     again, which it does not while the detach is pending (trial seed
//     11032). Nothing is mounted: the plain unpublish Kubernetes ordered
//     is what external-attacher sends.
//
// The kubelet reports a volume in use before it mounts it and stops only
// once it unmounted it, so a volume the node did not report in use when
// the detach was first seen was not mounted then, and has not been
// mounted since for the pod that uses it now. An attachment with no
// entry (first seen being deleted before the Node was in the cache, or
// before this process ran: the handler saw it before Detach in every
// other case) is taken as in use then: it is fenced, as before.
type detachOrders struct {
	mu sync.Mutex
	// inUse holds, per VolumeAttachment UID, the driver's volumes the node
	// reported in use when its deletion was first seen.
	inUse map[types.UID][]v1.UniqueVolumeName
}

// note records what the node reported in use when va was first seen being
// deleted; a later sighting changes nothing.
func (d *detachOrders) note(va *storagev1.VolumeAttachment, node *v1.Node, driver string) {
	if va.DeletionTimestamp == nil || node == nil {
		return
	}
	prefix := string(uniqueVolumeName(driver, ""))
	inUse := []v1.UniqueVolumeName{}
	for _, u := range node.Status.VolumesInUse {
		if strings.HasPrefix(string(u), prefix) {
			inUse = append(inUse, u)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inUse == nil {
		d.inUse = map[types.UID][]v1.UniqueVolumeName{}
	}
	if _, seen := d.inUse[va.UID]; !seen {
		d.inUse[va.UID] = inUse
	}
}

// unusedWhenOrdered reports whether the node did not report the volume
// (driver, handle) in use when va was first seen being deleted.
func (d *detachOrders) unusedWhenOrdered(va *storagev1.VolumeAttachment, driver, handle string) bool {
	if va == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	inUse, seen := d.inUse[va.UID]
	return seen && !slices.Contains(inUse, uniqueVolumeName(driver, handle))
}

func (d *detachOrders) forget(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inUse, uid)
}
