// Package csiclient is the thin gRPC client the attacher and the failover
// controller use to talk to a CSI controller plugin: publish, unpublish (with
// or without fence) and list. Tests replace it with a scripted fake.
package csiclient

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// Attacher is what the controllers need from the CSI controller plugin.
type Attacher interface {
	// Attach calls ControllerPublishVolume and returns the publish context.
	Attach(ctx context.Context, req AttachRequest) (map[string]string, error)
	// Detach calls ControllerUnpublishVolume. fence=true asks the plugin to
	// cut the node off the volume before it returns (the caller must only
	// set it when the plugin advertises UNPUBLISH_FENCE).
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

// Lister lists the volumes of the plugin with the nodes each is published to.
type Lister interface {
	ListVolumes(ctx context.Context) (map[string][]string, error)
}

// Client implements Attacher and Lister over a gRPC connection.
type Client struct {
	conn       grpc.ClientConnInterface
	maxEntries int32
}

// New returns a Client. maxEntries bounds a ListVolumes page (0: no limit).
func New(conn grpc.ClientConnInterface, maxEntries int32) *Client {
	return &Client{conn: conn, maxEntries: maxEntries}
}

// Attach implements Attacher.
func (c *Client) Attach(ctx context.Context, r AttachRequest) (map[string]string, error) {
	rsp, err := csi.NewControllerClient(c.conn).ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
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
	_, err := csi.NewControllerClient(c.conn).ControllerUnpublishVolume(ctx, req)
	return err
}

// ListVolumes implements Lister: it pages through ListVolumes and returns,
// per volume ID, the node IDs it is published to.
func (c *Client) ListVolumes(ctx context.Context) (map[string][]string, error) {
	client := csi.NewControllerClient(c.conn)
	out := map[string][]string{}
	token := ""
	for page := 0; ; page++ {
		rsp, err := client.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: c.maxEntries, StartingToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range rsp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			if id == "" {
				return nil, fmt.Errorf("ListVolumes returned an entry without a volume ID")
			}
			out[id] = append(out[id], e.GetStatus().GetPublishedNodeIds()...)
		}
		next := rsp.GetNextToken()
		if next == "" {
			return out, nil
		}
		if next == token || page > 100000 {
			return nil, fmt.Errorf("ListVolumes returned the same next_token %q again", next)
		}
		token = next
	}
}
