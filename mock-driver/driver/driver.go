// Package driver serves the CSI Identity, Controller and Node services of the
// mock driver over the simulated array, with the fence/force extension.
package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// Config selects what the driver advertises and how the array behaves.
type Config struct {
	Name    string
	Version string
	NodeID  string // node role only
	// Capabilities that can be switched off to play other drivers.
	NoPublish     bool // no PUBLISH_UNPUBLISH_VOLUME
	NoFence       bool // no UNPUBLISH_FENCE
	NoForce       bool // no FORCE_UNPUBLISH
	NoStage       bool // no STAGE_UNSTAGE_VOLUME
	NoListVolumes bool // no LIST_VOLUMES(_PUBLISHED_NODES)
	Array         array.Options
}

// Driver implements the three CSI services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg   Config
	array *array.Array
}

// New returns a driver over arr.
func New(cfg Config, arr *array.Array) *Driver {
	return &Driver{cfg: cfg, array: arr}
}

func toStatus(err error) error {
	var ae *array.Error
	if !errors.As(err, &ae) {
		if err == nil {
			return nil
		}
		return status.Error(codes.Internal, err.Error())
	}
	code := map[array.Code]codes.Code{
		array.CodeNotFound:           codes.NotFound,
		array.CodeFailedPrecondition: codes.FailedPrecondition,
		array.CodeUnavailable:        codes.Unavailable,
		array.CodePermissionDenied:   codes.PermissionDenied,
		array.CodeInvalidArgument:    codes.InvalidArgument,
	}[ae.Code]
	return status.Error(code, ae.Msg)
}

// Identity.

func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: d.cfg.Version}, nil
}

func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Controller.

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if !d.cfg.NoPublish {
		types = append(types, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY)
		if !d.cfg.NoFence {
			types = append(types, fence.ControllerUnpublishFence)
		}
	}
	if !d.cfg.NoListVolumes {
		types = append(types, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	var caps []*csi.ControllerServiceCapability
	for _, t := range types {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

const defaultCapacity = 1 << 30

func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = defaultCapacity
	}
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && lim < size {
		return nil, status.Error(codes.InvalidArgument, "limit_bytes is smaller than required_bytes")
	}
	v, err := d.array.CreateVolume(req.GetName(), size)
	if err != nil {
		if ae := new(array.Error); errors.As(err, &ae) && ae.Code == array.CodeFailedPrecondition {
			return nil, status.Error(codes.AlreadyExists, ae.Msg)
		}
		return nil, toStatus(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Capacity, VolumeContext: req.GetParameters()}}, nil
}

func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return &csi.DeleteVolumeResponse{}, toStatus(d.array.DeleteVolume(req.GetVolumeId()))
}

func singleNode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		return false
	}
	return true
}

func (d *Driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if d.cfg.NoPublish {
		return nil, status.Error(codes.Unimplemented, "publish is switched off")
	}
	if req.GetVolumeId() == "" || req.GetNodeId() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, node_id and volume_capability are required")
	}
	if err := d.array.Publish(req.GetVolumeId(), req.GetNodeId(), singleNode(req.GetVolumeCapability()), req.GetReadonly(), d.cfg.Array); err != nil {
		return nil, toStatus(err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"node": req.GetNodeId()}}, nil
}

func (d *Driver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if d.cfg.NoPublish {
		return nil, status.Error(codes.Unimplemented, "publish is switched off")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	fenced, err := fence.GetFence(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if fenced && d.cfg.NoFence {
		// A CO must not send fence to a driver that does not advertise it;
		// this driver, playing one without fencing, ignores it as such a
		// driver would, which is exactly the danger.
		fenced = false
	}
	if req.GetNodeId() == "" {
		if fenced {
			return nil, status.Error(codes.InvalidArgument, "fence needs a node_id")
		}
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	return &csi.ControllerUnpublishVolumeResponse{}, toStatus(d.array.Unpublish(req.GetVolumeId(), req.GetNodeId(), fenced, d.cfg.Array))
}

func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_capabilities are required")
	}
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if _, ok := s.Volumes[req.GetVolumeId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

func (d *Driver) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if d.cfg.NoListVolumes {
		return nil, status.Error(codes.Unimplemented, "ListVolumes is switched off")
	}
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	ids := sortedIDs(s)
	start := 0
	if t := req.GetStartingToken(); t != "" {
		start = -1
		for i, id := range ids {
			if id == t {
				start = i
			}
		}
		if start < 0 {
			return nil, status.Errorf(codes.Aborted, "invalid starting_token %q", t)
		}
	}
	end := len(ids)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	rsp := &csi.ListVolumesResponse{}
	for _, id := range ids[start:end] {
		v := s.Volumes[id]
		var nodes []string
		for n, p := range v.Publications {
			// A fenced node has no access: it is not published there.
			if p.Access == array.AccessGranted {
				nodes = append(nodes, n)
			}
		}
		rsp.Entries = append(rsp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: id, CapacityBytes: v.Capacity},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
		})
	}
	if end < len(ids) {
		rsp.NextToken = ids[end]
	}
	return rsp, nil
}

func (d *Driver) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	return &csi.GetCapacityResponse{AvailableCapacity: 1 << 40}, nil
}

func (d *Driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id and capacity_range are required")
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	err := d.array.Update(func(s *array.State) error {
		v, ok := s.Volumes[req.GetVolumeId()]
		if !ok {
			return &array.Error{Code: array.CodeNotFound, Msg: "volume " + req.GetVolumeId() + " not found"}
		}
		if size > v.Capacity {
			v.Capacity = size
		}
		size = v.Capacity
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: false}, nil
}

// Node.

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID}, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var types []csi.NodeServiceCapability_RPC_Type
	if !d.cfg.NoStage {
		types = append(types, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	if !d.cfg.NoForce {
		types = append(types, fence.NodeForceUnpublish)
	}
	caps := []*csi.NodeServiceCapability{}
	for _, t := range types {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *Driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if d.cfg.NoStage {
		return nil, status.Error(codes.Unimplemented, "staging is switched off")
	}
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, staging_target_path and volume_capability are required")
	}
	if err := d.publishCheck(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(req.GetStagingTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeStageVolumeResponse{}, toStatus(d.array.NodeStage(req.GetVolumeId(), d.cfg.NodeID, req.GetStagingTargetPath()))
}

// publishCheck refuses node operations on volumes the array does not know.
func (d *Driver) publishCheck(id string) error {
	if d.cfg.NoPublish {
		// Without ControllerPublish the node grants itself access, as a
		// local-storage driver would.
		return toStatus(d.array.Publish(id, d.cfg.NodeID, false, false, d.cfg.Array))
	}
	return nil
}

func (d *Driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	force, err := fence.GetNodeUnstageForce(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := d.array.NodeUnstage(req.GetVolumeId(), d.cfg.NodeID, force && !d.cfg.NoForce); err != nil {
		return nil, toStatus(err)
	}
	if err := removeIfExists(req.GetStagingTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and volume_capability are required")
	}
	if !d.cfg.NoStage && req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is required: the volume must be staged first")
	}
	if d.cfg.NoStage {
		if err := d.publishCheck(req.GetVolumeId()); err != nil {
			return nil, err
		}
	}
	if err := d.array.NodePublish(req.GetVolumeId(), d.cfg.NodeID, req.GetTargetPath()); err != nil {
		return nil, toStatus(err)
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// A marker stands in for the mounted filesystem.
	if err := os.WriteFile(filepath.Join(req.GetTargetPath(), ".mock-volume"), []byte(req.GetVolumeId()), 0o640); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	force, err := fence.GetNodeUnpublishForce(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := d.array.NodeUnpublish(req.GetVolumeId(), d.cfg.NodeID, req.GetTargetPath(), force && !d.cfg.NoForce); err != nil {
		return nil, toStatus(err)
	}
	if err := removeIfExists(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func removeIfExists(path string) error {
	os.Remove(filepath.Join(path, ".mock-volume"))
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func sortedIDs(s *array.State) []string {
	ids := make([]string, 0, len(s.Volumes))
	for id := range s.Volumes {
		ids = append(ids, id)
	}
	sortStrings(ids)
	return ids
}
