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
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
)

// csiNode is a CSINode of node registering the given driver → node ID
// pairs.
func csiNode(node string, ids ...string) *storagev1.CSINode {
	cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for i := 0; i+1 < len(ids); i += 2 {
		cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: ids[i], NodeID: ids[i+1]})
	}
	return cn
}

// TestNodeBackUnderNewNodeID: a volume was fenced from the node ID its node
// plugin had then; the node comes back and its plugin registers under
// another one (an ID derived from an initiator or NQN that changed, a
// plugin reconfigured). The record is per Kubernetes node and the kubelet's
// directories are the node's, whatever the ID: the agent cleans the volume
// when the API shows the ID moved on this node (its CSINode names the
// plugin's new ID) and nothing ties the old ID to another node now. Anything
// less certain leaves the volume quarantined, and says why.
func TestNodeBackUnderNewNodeID(t *testing.T) {
	const oldID, newID = "iqn.2026-01.io.example:node-1-a", "iqn.2026-01.io.example:node-1-b"
	for _, tc := range []struct {
		name     string
		csiNodes []*storagev1.CSINode
		// wantError is part of the cleanup error; "" means cleaned.
		wantError string
	}{{
		name:     "the kubelet registered the plugin's new ID",
		csiNodes: []*storagev1.CSINode{csiNode(testNode, testDriver, newID), csiNode("node-2", testDriver, "iqn.2026-01.io.example:node-2")},
	}, {
		name: "another driver registers the old ID on another node",
		csiNodes: []*storagev1.CSINode{csiNode(testNode, testDriver, newID),
			csiNode("node-2", testDriver, "iqn.2026-01.io.example:node-2", "other.example.com", oldID)},
	}, {
		name:      "the kubelet still registers the old ID",
		csiNodes:  []*storagev1.CSINode{csiNode(testNode, testDriver, oldID)},
		wantError: "registers node ID",
	}, {
		name:      "the kubelet registers a third ID",
		csiNodes:  []*storagev1.CSINode{csiNode(testNode, testDriver, "iqn.2026-01.io.example:node-1-c")},
		wantError: "registers node ID",
	}, {
		name:      "the driver is not registered on this node",
		csiNodes:  []*storagev1.CSINode{csiNode(testNode, "other.example.com", newID)},
		wantError: "registers no node ID",
	}, {
		name:      "this node has no CSINode",
		wantError: "registers no node ID",
	}, {
		name:      "another node registers the old ID now",
		csiNodes:  []*storagev1.CSINode{csiNode(testNode, testDriver, newID), csiNode("node-2", testDriver, oldID)},
		wantError: "node node-2 registers node ID",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.nodeID = oldID
			e.startMockDriver(driver.Config{})
			e.attach("vol-a")
			e.mount("vol-a", "pv-a", true, "pod-1")
			e.fence("vol-a", "pv-a")
			// The node comes back; its plugin reports another ID.
			e.nodeID = newID
			e.serveMockDriver(driver.Config{})
			for _, cn := range tc.csiNodes {
				if _, err := e.csiNodes.StorageV1().CSINodes().Create(e.ctx, cn, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			e.run(e.options())
			l := e.layout
			if tc.wantError != "" {
				e.waitCleanupError("vol-a", tc.wantError)
				mustExist(t, l.PublishPath("pod-1", "pv-a"), l.StagingPath(testDriver, "vol-a"))
			} else {
				e.waitCleaned("vol-a")
				mustBeGone(t, l.PodVolumeDir("pod-1", "pv-a"), l.StagingDir(testDriver, "vol-a"))
				if v := e.entry("vol-a"); v.NodeID != oldID {
					t.Errorf("the entry names node ID %q, want the one fenced from, %q", v.NodeID, oldID)
				}
			}
			// Whatever the agent decides, the fence of the old ID at the
			// storage stays: no call of this node's plugin can lift it.
			if p := e.publicationOn("vol-a", oldID); p == nil || p.Access != array.AccessFenced {
				t.Errorf("the fence of the old node ID was lifted: %+v", p)
			}
			if p := e.publicationOn("vol-a", newID); p != nil {
				t.Errorf("vol-a is published under the new node ID: %+v", p)
			}
		})
	}
}
