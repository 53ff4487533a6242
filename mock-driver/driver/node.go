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
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// MarkerName is the file a mount publication holds in place of a
// filesystem; a block publication is a file holding the volume ID.
const MarkerName = ".mock-volume"

// NodeCapabilities lists what the node plugin advertises under cfg.
func NodeCapabilities(cfg Config) []csi.NodeServiceCapability_RPC_Type {
	var types []csi.NodeServiceCapability_RPC_Type
	if !cfg.NoStage {
		types = append(types, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	if !cfg.NoForce {
		types = append(types, fence.NodeForceUnpublish)
	}
	return types
}

func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumesPerNode}, nil
}

func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	caps := []*csi.NodeServiceCapability{}
	for _, t := range NodeCapabilities(d.cfg) {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// selfPublish grants this node access when the driver has no controller
// publish step, as a local-storage driver would; the array ends that grant
// when NodeUnpublishVolume/NodeUnstageVolume leave nothing on the node.
func (d *Driver) selfPublish(id string, c *csi.VolumeCapability) error {
	if !d.cfg.NoPublish {
		return nil
	}
	return toStatus(d.array.PublishVolume(array.PublishArgs{Volume: id, Node: d.cfg.NodeID, SingleNode: singleNode(c), ByNode: true}, d.cfg.Array))
}

func (d *Driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if d.cfg.NoStage {
		return nil, status.Error(codes.Unimplemented, "NodeStageVolume is switched off")
	}
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, staging_target_path and volume_capability are required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := d.selfPublish(req.GetVolumeId(), req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := d.array.NodeStage(req.GetVolumeId(), d.cfg.NodeID, req.GetStagingTargetPath()); err != nil {
		return nil, toStatus(err)
	}
	if err := makeMountPoint(req.GetStagingTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if d.realMounts(req.GetVolumeCapability()) {
		data, err := d.dataDir(req.GetVolumeId())
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		mount := bindMount
		if d.cfg.FUSE {
			mount = func(data, staging string) error { return d.mountFUSE(req.GetVolumeId(), data, staging) }
		}
		if err := mount(data, req.GetStagingTargetPath()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume honours force=true unless FORCE_UNPUBLISH is switched
// off; the array refuses an unforced cleanup of a fenced volume.
func (d *Driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	force, err := fence.GetNodeUnstageForce(req)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "force field: %v", err)
	}
	if err := d.array.NodeUnstage(req.GetVolumeId(), d.cfg.NodeID, force && !d.cfg.NoForce); err != nil {
		return nil, toStatus(err)
	}
	if err := d.unmountStaging(req.GetStagingTargetPath(), force); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := removeEmptyDir(req.GetStagingTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and volume_capability are required")
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if d.cfg.NoStage {
		staging = ""
		if err := d.selfPublish(req.GetVolumeId(), req.GetVolumeCapability()); err != nil {
			return nil, err
		}
	} else if staging == "" {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is required: the volume must be staged first")
	}
	if err := d.array.NodePublish(req.GetVolumeId(), d.cfg.NodeID, req.GetTargetPath(), staging); err != nil {
		return nil, toStatus(err)
	}
	if d.realMounts(req.GetVolumeCapability()) {
		source := staging
		if source == "" {
			var err error
			if source, err = d.dataDir(req.GetVolumeId()); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		if req.GetVolumeCapability().GetBlock() != nil {
			if err := publishBlockDevice(source, req.GetTargetPath()); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			return &csi.NodePublishVolumeResponse{}, nil
		}
		if err := makeMountPoint(req.GetTargetPath()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := bindMount(source, req.GetTargetPath()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := layOut(req.GetTargetPath(), req.GetVolumeId(), req.GetVolumeCapability().GetBlock() != nil); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume honours force=true unless FORCE_UNPUBLISH is switched
// off, and removes what NodePublishVolume created at the target path.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	force, err := fence.GetNodeUnpublishForce(req)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "force field: %v", err)
	}
	if err := d.array.NodeUnpublish(req.GetVolumeId(), d.cfg.NodeID, req.GetTargetPath(), force && !d.cfg.NoForce); err != nil {
		return nil, toStatus(err)
	}
	if d.cfg.BlockDevices {
		if err := unpublishBlockDevice(req.GetTargetPath()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := d.unmountIfMounted(req.GetTargetPath(), force); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := removeTarget(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// layOut creates what a mount stands for at target: a directory with a
// marker (filesystem), or a file in an existing or new parent (block device).
func layOut(target, id string, block bool) error {
	if block {
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			return err
		}
		return os.WriteFile(target, []byte(id), 0o640)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(target, MarkerName), []byte(id), 0o640)
}

// removeTarget undoes layOut; a missing target is fine (idempotence).
func removeTarget(target string) error {
	fi, err := os.Lstat(target)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := os.Remove(filepath.Join(target, MarkerName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Remove(target)
}

// removeEmptyDir removes the staging directory if nothing is left in it.
func removeEmptyDir(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
