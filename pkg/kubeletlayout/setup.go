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

package kubeletlayout

import (
	"errors"
	"os"
	"path/filepath"
)

// The Prepare* functions do what the kubelet does on disk before each CSI
// call, and MapBlockDevice what it does after a block NodePublishVolume, so
// that a simulator and tests leave exactly what a real kubelet would leave.
// The CSI driver creates the target and staging content itself.

// PrepareStage creates a filesystem volume's staging path and its
// vol_data.json (kubelet: csiAttacher.MountDevice) and returns the staging
// path to pass to NodeStageVolume.
func (l Layout) PrepareStage(driver, volumeHandle string) (string, error) {
	path := l.StagingPath(driver, volumeHandle)
	if err := os.MkdirAll(path, 0o750); err != nil {
		return "", err
	}
	if err := WriteVolumeData(filepath.Dir(path), VolumeData{VolumeHandle: volumeHandle, DriverName: driver}); err != nil {
		return "", err
	}
	return path, nil
}

// PreparePublish creates the parent of a filesystem volume's publish path and
// its vol_data.json (kubelet: csiMountMgr.SetUpAt) and returns the target path
// to pass to NodePublishVolume; the driver creates the target itself.
func (l Layout) PreparePublish(podUID, specName string, d VolumeData) (string, error) {
	if d.SpecVolID == "" {
		d.SpecVolID = specName
	}
	if d.VolumeLifecycleMode == "" {
		d.VolumeLifecycleMode = LifecyclePersistent
	}
	if err := WriteVolumeData(l.PodVolumeDir(podUID, specName), d); err != nil {
		return "", err
	}
	return l.PublishPath(podUID, specName), nil
}

// PrepareBlock writes a block volume's vol_data.json (kubelet:
// csiPlugin.NewBlockVolumeMapper).
func (l Layout) PrepareBlock(specName string, d VolumeData) error {
	if d.SpecVolID == "" {
		d.SpecVolID = specName
	}
	return WriteVolumeData(l.BlockDataDir(specName), d)
}

// PrepareBlockStage creates a block volume's staging path and returns it
// (kubelet: csiBlockMapper.stageVolumeForBlock).
func (l Layout) PrepareBlockStage(specName string) (string, error) {
	path := l.BlockStagingPath(specName)
	return path, os.MkdirAll(path, 0o750)
}

// PrepareBlockPublish creates the parent of a block volume's publish path for
// a pod and returns the path (kubelet: csiBlockMapper.publishVolumeForBlock).
func (l Layout) PrepareBlockPublish(specName, podUID string) (string, error) {
	if err := os.MkdirAll(l.BlockPublishDir(specName), 0o750); err != nil {
		return "", err
	}
	return l.BlockPublishPath(specName, podUID), nil
}

// MapBlockDevice does what the kubelet's MapBlockVolume does after a block
// publish: the pod's symlink to the published device, and the per-pod entry
// under the global map path. On a real node that entry is a bind mount of
// the device file; here it is an empty file standing in for it.
func (l Layout) MapBlockDevice(specName, podUID string) error {
	dev := filepath.Join(l.BlockGlobalMapPath(specName), podUID)
	if err := os.MkdirAll(filepath.Dir(dev), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(dev, os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	link := l.PodDeviceMapPath(podUID, specName)
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	if err := os.Symlink(l.BlockPublishPath(specName, podUID), link); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}
