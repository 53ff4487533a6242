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
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/kubeletlayout"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// releaseVolumesInUse removes the volumes fenced on a dead node from its
// status.volumesInUse, which no kubelet will update: the attach/detach
// controller then detaches each of them as soon as its pods are gone
// instead of after 6 minutes. A fenced volume can no longer be reached from
// the node, whatever its pods do. It runs before the pod GC: the attach/detach
// controller attaches a volume elsewhere only once it has detached it here,
// which a volume still listed would hold up until the node's last pod is
// gone; and the pod GC deletes each pod's fenced attachment before the
// pod's Failed phase lets that controller detach it
// (releaseFencedAttachments).
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
		if nodestate.Ready(n) {
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

// fencedUnique matches the attach/detach controller's unique volume name
// (kubeletlayout.UniqueVolumeName).
func fencedUnique(fr *fencingv1alpha1.FencingRequest, unique string) bool {
	for _, v := range fr.Status.Volumes {
		if v.FencedTime != nil && v.CleanedTime == nil && unique == string(kubeletlayout.UniqueVolumeName(v.Driver, v.VolumeHandle)) {
			return true
		}
	}
	return false
}

// releaseFencedAttachments deletes the VolumeAttachments among vas (a dead
// node's) of the volumes in freed (PV names: their last pod on the node is
// going, force-deleted by this pass, its node found down by a live read)
// that are fenced there. The attach/detach controller would delete them
// too, once it sees the pods terminated and the volumes gone from the
// node's volumesInUse, but its detach then polls for the attachment to go,
// first after half a second: deleted here before the pod is marked Failed,
// its delete finds nothing and it attaches the volume elsewhere at its next
// reconcile. An attachment released for a pod whose status write or delete
// then fails, or for a pod the cache still misses, is no danger: the volume
// is fenced, so the attach/detach controller, if it creates the attachment
// again before the pod goes, gets no publish to a node where a volume is
// fenced (S2), and the next pass deletes the pod.
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
