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

package fence

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
)

// ControllerCanFence reports whether caps (as returned by csi-lib-utils'
// rpc.GetControllerCapabilities) advertise UNPUBLISH_FENCE.
func ControllerCanFence(caps rpc.ControllerCapabilitySet) bool {
	return caps[ControllerUnpublishFence]
}

// NodeCapabilitySet is the set of node capabilities a node plugin advertises.
// csi-lib-utils has no node counterpart of rpc.GetControllerCapabilities.
type NodeCapabilitySet map[csi.NodeServiceCapability_RPC_Type]bool

// CanForceUnpublish reports whether the node plugin advertises FORCE_UNPUBLISH.
func (s NodeCapabilitySet) CanForceUnpublish() bool { return s[NodeForceUnpublish] }

// CanStage reports whether the node plugin advertises STAGE_UNSTAGE_VOLUME.
func (s NodeCapabilitySet) CanStage() bool {
	return s[csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME]
}

// GetNodeCapabilities calls NodeGetCapabilities and returns the RPC
// capabilities the plugin advertises. Entries of another kind, or without a
// type, are rejected, so that a plugin that returns garbage is noticed rather
// than read as "no capabilities".
func GetNodeCapabilities(ctx context.Context, conn grpc.ClientConnInterface) (NodeCapabilitySet, error) {
	rsp, err := csi.NewNodeClient(conn).NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	set := NodeCapabilitySet{}
	for i, c := range rsp.GetCapabilities() {
		r := c.GetRpc()
		if r == nil {
			return nil, fmt.Errorf("NodeGetCapabilities: capability %d has no RPC type", i)
		}
		set[r.GetType()] = true
	}
	return set, nil
}
