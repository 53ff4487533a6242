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

package nodeagent

import (
	"context"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node may come back under another CSI node ID than the one its volumes
// were fenced from: the driver derives it from an initiator name or an NQN
// that changed, or its plugin was reconfigured. Fences go to the published
// ID, so the record's entries name the old one, and the plugin reports the
// new one. The record is per Kubernetes node, and so are the kubelet's
// directories the cleanup works on; the node plugin's NodeUnpublishVolume and
// NodeUnstageVolume carry no node ID at all. What must be known before such
// an entry is cleaned is that the old ID was this node's and is no other's:
//
//   - the entry is in this node's record: the fence was of a
//     VolumeAttachment of this node, sent to the ID external-attacher had
//     read from this node's CSINode when it published the volume;
//   - this node's CSINode, read live, registers the ID the plugin reports
//     now: the kubelet took the new ID for this node (the old one is its
//     past, not a registration still under way), and the plugin the agent
//     talks to is this node's;
//   - no other node's CSINode registers the old ID for the driver: if one
//     does, the old ID names another host now, and so may the quarantine
//     the driver keeps under it.
//
// Anything less leaves the volume quarantined, with the reason in its
// cleanupError. The fence the driver keeps under the old ID is not lifted by
// this cleanup (no node call names an ID): it concerns an ID no node
// registers any more, and it is the driver's to collect.

// movedNodeID returns nil when a volume of driver fenced on nodeName from
// fencedID may be cleaned by the node plugin reporting pluginID, given every
// CSINode of the cluster as read live, else why not.
func movedNodeID(nodeName, driver, pluginID, fencedID string, csiNodes []storagev1.CSINode) error {
	registered := ""
	for _, cn := range csiNodes {
		for _, d := range cn.Spec.Drivers {
			if d.Name != driver || d.NodeID == "" {
				continue
			}
			switch {
			case cn.Name == nodeName:
				registered = d.NodeID
			case d.NodeID == fencedID:
				return fmt.Errorf("node %s registers node ID %q now: the quarantine under that ID may concern that node", cn.Name, fencedID)
			}
		}
	}
	switch registered {
	case pluginID:
		return nil
	case "":
		return fmt.Errorf("the CSINode of node %s registers no node ID of the driver: cannot tell whether the node plugin's ID %q replaced %q on this node", nodeName, pluginID, fencedID)
	}
	return fmt.Errorf("the CSINode of node %s registers node ID %q, not the node plugin's %q: waiting until the kubelet has registered the plugin under its new ID", nodeName, registered, pluginID)
}

// checkMovedNodeID is movedNodeID on a live read of the CSINodes.
func (a *Agent) checkMovedNodeID(ctx context.Context, pluginID, fencedID string) error {
	if a.opts.CSINodes == nil {
		return fmt.Errorf("no CSINode client to tell whether node ID %q was this node's", fencedID)
	}
	list, err := a.opts.CSINodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("reading the CSINodes: %w", err)
	}
	return movedNodeID(a.opts.NodeName, a.opts.DriverName, pluginID, fencedID, list.Items)
}
