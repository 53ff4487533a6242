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

package attacher

import (
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
)

// csiNodeByNodeIDIndex indexes CSINodes by the node ID of one driver.
const csiNodeByNodeIDIndex = "csi-fence-attacher/csinode-by-node-id"

// NodeIDs maps a driver's node IDs (what ControllerPublishVolume and
// ControllerUnpublishVolume name) back to Kubernetes Nodes, through the
// CSINode objects on which the node plugin registered them.
type NodeIDs struct {
	driver  string
	indexer cache.Indexer
}

// NewNodeIDs indexes csiNodeInformer (which must not have started yet) by
// the node IDs of driver.
func NewNodeIDs(driver string, csiNodeInformer cache.SharedIndexInformer) (*NodeIDs, error) {
	err := csiNodeInformer.AddIndexers(cache.Indexers{csiNodeByNodeIDIndex: func(obj any) ([]string, error) {
		n, ok := obj.(*storagev1.CSINode)
		if !ok {
			return nil, nil
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driver && d.NodeID != "" {
				return []string{d.NodeID}, nil
			}
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("indexing CSINodes by node ID: %w", err)
	}
	return &NodeIDs{driver: driver, indexer: csiNodeInformer.GetIndexer()}, nil
}

// NodeName returns the Node on which the driver registered nodeID. It
// reports false when no CSINode, or more than one, names it: the ID does not
// say which node it is.
func (n *NodeIDs) NodeName(nodeID string) (string, bool) {
	objs, err := n.indexer.ByIndex(csiNodeByNodeIDIndex, nodeID)
	if err != nil || len(objs) != 1 {
		return "", false
	}
	csiNode, ok := objs[0].(*storagev1.CSINode)
	if !ok {
		return "", false
	}
	return csiNode.Name, true
}

// NodeID returns the node ID the driver registers on the Node's CSINode now:
// the one external-attacher publishes to (it reads the same cache). It
// reports false when the CSINode or its entry for the driver is missing.
func (n *NodeIDs) NodeID(nodeName string) (string, bool) {
	obj, ok, err := n.indexer.GetByKey(nodeName)
	if err != nil || !ok {
		return "", false
	}
	csiNode, ok := obj.(*storagev1.CSINode)
	if !ok {
		return "", false
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == n.driver && d.NodeID != "" {
			return d.NodeID, true
		}
	}
	return "", false
}
