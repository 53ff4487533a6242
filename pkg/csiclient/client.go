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

// Package csiclient is the thin gRPC client the attacher (and the failover
// controller) use to talk to a CSI controller plugin: publish, unpublish with
// or without fence, and list. It holds no policy: the caller decides whether
// to fence, and bounds every call with its context. Tests of the callers
// replace it with a scripted fake through the Attacher and Lister interfaces.
package csiclient

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// Attacher publishes and unpublishes volumes.
type Attacher interface {
	// Attach calls ControllerPublishVolume and returns the publish context
	// (the VolumeAttachment's attachmentMetadata).
	Attach(ctx context.Context, req AttachRequest) (map[string]string, error)
	// Detach calls ControllerUnpublishVolume. With fence=true the request
	// carries the fence field of the extension (DESIGN.md section 4), asking
	// the plugin to make the volume inaccessible from the node before it
	// returns; the caller must set it only when the plugin advertises
	// UNPUBLISH_FENCE. With fence=false the request is the stock message,
	// byte for byte, as external-attacher sends it.
	Detach(ctx context.Context, volumeID, nodeID string, secrets map[string]string, fence bool) error
}

// AttachRequest holds the arguments of ControllerPublishVolume.
type AttachRequest struct {
	VolumeID      string
	NodeID        string
	ReadOnly      bool
	Capability    *csi.VolumeCapability
	VolumeContext map[string]string
	Secrets       map[string]string
}

// Lister lists the plugin's volumes with the nodes each is published to.
type Lister interface {
	// ListVolumes returns, per volume ID, the IDs of the nodes the volume is
	// published to. It needs LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES.
	ListVolumes(ctx context.Context) (map[string][]string, error)
}

// Client implements Attacher and Lister over a gRPC connection.
type Client struct {
	controller csi.ControllerClient
	maxEntries int32
}

var (
	_ Attacher = &Client{}
	_ Lister   = &Client{}
)

// New returns a Client. maxEntries is the ListVolumes page size
// (--max-entries; 0 lets the plugin choose).
func New(conn grpc.ClientConnInterface, maxEntries int32) *Client {
	return &Client{controller: csi.NewControllerClient(conn), maxEntries: maxEntries}
}

// Attach implements Attacher.
func (c *Client) Attach(ctx context.Context, r AttachRequest) (map[string]string, error) {
	rsp, err := c.controller.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId:         r.VolumeID,
		NodeId:           r.NodeID,
		VolumeCapability: r.Capability,
		Readonly:         r.ReadOnly,
		Secrets:          r.Secrets,
		VolumeContext:    r.VolumeContext,
	})
	if err != nil {
		return nil, err
	}
	return rsp.GetPublishContext(), nil
}

// Detach implements Attacher.
func (c *Client) Detach(ctx context.Context, volumeID, nodeID string, secrets map[string]string, fenced bool) error {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, Secrets: secrets}
	if fenced {
		fence.SetFence(req, true)
	}
	_, err := c.controller.ControllerUnpublishVolume(ctx, req)
	return err
}

// ListVolumes implements Lister. It follows next_token until the plugin
// returns an empty one; the caller's context bounds the whole walk, and a
// token that repeats (a plugin that would loop forever) is an error.
func (c *Client) ListVolumes(ctx context.Context) (map[string][]string, error) {
	published := map[string][]string{}
	seen := map[string]bool{}
	token := ""
	for {
		rsp, err := c.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: c.maxEntries, StartingToken: token})
		if err != nil {
			return nil, err
		}
		for i, e := range rsp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			if id == "" {
				return nil, fmt.Errorf("ListVolumes: entry %d of the page at token %q has no volume ID", i, token)
			}
			published[id] = append(published[id], e.GetStatus().GetPublishedNodeIds()...)
		}
		next := rsp.GetNextToken()
		if next == "" {
			return published, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("ListVolumes: the plugin returned next_token %q a second time", next)
		}
		seen[next] = true
		token = next
	}
}
