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

package driver

import (
	"context"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// ControllerCapabilities lists what the controller advertises under cfg.
func ControllerCapabilities(cfg Config) []csi.ControllerServiceCapability_RPC_Type {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if !cfg.NoCapacity {
		types = append(types, csi.ControllerServiceCapability_RPC_GET_CAPACITY)
	}
	if !cfg.NoExpand {
		types = append(types, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME)
	}
	if !cfg.NoPublish {
		types = append(types, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
		if !cfg.NoReadOnly {
			types = append(types, csi.ControllerServiceCapability_RPC_PUBLISH_READONLY)
		}
		if !cfg.NoFence {
			types = append(types, fence.ControllerUnpublishFence)
		}
	}
	if !cfg.NoListVolumes {
		types = append(types, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	return types
}

func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range ControllerCapabilities(d.cfg) {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// singleNode reports whether an access mode allows one node only.
func singleNode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
		return false
	}
	return true
}

// checkCapability rejects a capability without access mode or access type.
func checkCapability(c *csi.VolumeCapability) error {
	if c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
		return status.Error(codes.InvalidArgument, "volume capability has no access mode")
	}
	if c.GetBlock() == nil && c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume capability has no access type (block or mount)")
	}
	return nil
}

func (d *Driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	single := true
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return nil, err
		}
		single = single && singleNode(c)
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	size, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if size < 0 || limit < 0 {
		return nil, status.Error(codes.InvalidArgument, "capacity range must not be negative")
	}
	if limit > 0 && limit < size {
		return nil, status.Error(codes.InvalidArgument, "limit_bytes is smaller than required_bytes")
	}
	if size == 0 {
		size = defaultVolumeSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if size > d.cfg.Capacity {
		return nil, status.Errorf(codes.OutOfRange, "%d bytes requested, the array has %d", size, d.cfg.Capacity)
	}
	v, err := d.array.CreateVolume(array.CreateArgs{Name: req.GetName(), RequiredBytes: size, LimitBytes: limit, SingleNode: single, Context: req.GetParameters()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Capacity, VolumeContext: v.Context}}, nil
}

func (d *Driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := d.array.DeleteVolume(req.GetVolumeId()); err != nil {
		return nil, toStatus(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *Driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if d.cfg.NoPublish {
		return nil, status.Error(codes.Unimplemented, "ControllerPublishVolume is switched off")
	}
	if req.GetVolumeId() == "" || req.GetNodeId() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, node_id and volume_capability are required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if req.GetReadonly() && d.cfg.NoReadOnly {
		return nil, status.Error(codes.InvalidArgument, "readonly publishing is switched off")
	}
	err := d.array.PublishVolume(array.PublishArgs{
		Volume: req.GetVolumeId(), Node: req.GetNodeId(),
		SingleNode: singleNode(req.GetVolumeCapability()), ReadOnly: req.GetReadonly(),
		KnownNode: !d.cfg.AnyNode,
	}, d.cfg.Array)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"device": "/dev/mock/" + req.GetVolumeId()}}, nil
}

// ControllerUnpublishVolume honours fence=true (read from the unknown field
// of pkg/fence) unless the fence capability is switched off: a driver without
// the extension does not know the field and does a plain unpublish, which is
// exactly the danger the extension exists to remove.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if d.cfg.NoPublish {
		return nil, status.Error(codes.Unimplemented, "ControllerUnpublishVolume is switched off")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	fenced, err := fence.GetFence(req)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "fence field: %v", err)
	}
	if d.cfg.NoFence {
		fenced = false
	}
	if !fenced && d.cfg.OutOfService != nil && req.GetNodeId() != "" {
		// ceph-csi's behaviour: the node's out-of-service taint turns the
		// unpublish into a fence. Unknown is no answer: unpublishing plainly
		// could leave a node that is declared dead writing.
		oos, err := d.cfg.OutOfService(ctx, req.GetNodeId())
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reading whether node %s is out of service: %v", req.GetNodeId(), err)
		}
		fenced = oos
	}
	nodes := []string{req.GetNodeId()}
	if req.GetNodeId() == "" {
		if fenced {
			return nil, status.Error(codes.InvalidArgument, "fence needs a node_id")
		}
		// No node: unpublish from every node, as the spec asks.
		if nodes, err = d.publishedNodes(req.GetVolumeId()); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		if err := d.array.Unpublish(req.GetVolumeId(), n, fenced, d.cfg.Array); err != nil {
			return nil, toStatus(err)
		}
		// The fence field is an unknown field: gRPC logs do not show it.
		klog.FromContext(ctx).V(1).Info("Unpublished", "volume", req.GetVolumeId(), "node", n, "fence", fenced)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *Driver) publishedNodes(id string) ([]string, error) {
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, toStatus(err)
	}
	var out []string
	if v := s.Volumes[id]; v != nil {
		for n, p := range v.Publications {
			if p.Access == array.AccessGranted {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func (d *Driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_capabilities are required")
	}
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, toStatus(err)
	}
	v, ok := s.Volumes[req.GetVolumeId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(c); err != nil {
			return nil, err
		}
		if v.SingleNode && !singleNode(c) {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "volume " + v.ID + " was created for a single node"}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// tokenPrefix marks ListVolumes tokens, so that garbage is told apart from a
// token whose volume was deleted since (listing resumes after it).
const tokenPrefix = "from:"

func (d *Driver) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if d.cfg.NoListVolumes {
		return nil, status.Error(codes.Unimplemented, "ListVolumes is switched off")
	}
	if req.GetMaxEntries() < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_entries must not be negative")
	}
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, toStatus(err)
	}
	ids := sortedKeys(s.Volumes)
	start := 0
	if t := req.GetStartingToken(); t != "" {
		from, ok := strings.CutPrefix(t, tokenPrefix)
		if !ok {
			return nil, status.Errorf(codes.Aborted, "invalid starting_token %q", t)
		}
		for start < len(ids) && ids[start] < from {
			start++
		}
	}
	end := len(ids)
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end = start + m
	}
	rsp := &csi.ListVolumesResponse{}
	for _, id := range ids[start:end] {
		v := s.Volumes[id]
		// Only granted nodes count as published: a fenced node has no
		// access, and a plain unpublish is done as far as the CO goes.
		var nodes []string
		for _, n := range sortedKeys(v.Publications) {
			if v.Publications[n].Access == array.AccessGranted {
				nodes = append(nodes, n)
			}
		}
		rsp.Entries = append(rsp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: &csi.Volume{VolumeId: id, CapacityBytes: v.Capacity, VolumeContext: v.Context},
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: nodes},
		})
	}
	if end < len(ids) {
		rsp.NextToken = tokenPrefix + ids[end]
	}
	return rsp, nil
}

func (d *Driver) GetCapacity(context.Context, *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if d.cfg.NoCapacity {
		return nil, status.Error(codes.Unimplemented, "GetCapacity is switched off")
	}
	s, err := d.array.Snapshot()
	if err != nil {
		return nil, toStatus(err)
	}
	free := d.cfg.Capacity
	for _, v := range s.Volumes {
		free -= v.Capacity
	}
	if free < 0 {
		free = 0
	}
	return &csi.GetCapacityResponse{AvailableCapacity: free}, nil
}

func (d *Driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if d.cfg.NoExpand {
		return nil, status.Error(codes.Unimplemented, "ControllerExpandVolume is switched off")
	}
	if req.GetVolumeId() == "" || req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id and capacity_range are required")
	}
	size, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if limit > 0 && limit < size {
		return nil, status.Error(codes.InvalidArgument, "limit_bytes is smaller than required_bytes")
	}
	capacity, err := d.array.ExpandVolume(req.GetVolumeId(), size)
	if err != nil {
		return nil, toStatus(err)
	}
	if limit > 0 && capacity > limit {
		return nil, status.Errorf(codes.OutOfRange, "volume %s already has %d bytes, more than limit_bytes %d", req.GetVolumeId(), capacity, limit)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: capacity, NodeExpansionRequired: false}, nil
}
