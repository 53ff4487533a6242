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
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MountChecker tells whether a path is a mount point. k8s.io/mount-utils'
// mount.Interface (mount.New("")) satisfies it; it must return an error
// satisfying errors.Is(err, fs.ErrNotExist) for a missing path.
type MountChecker interface {
	IsMountPoint(path string) (bool, error)
}

// ErrStillMounted is returned for a path that is still a mount point: it is
// neither removed nor entered.
var ErrStillMounted = errors.New("still a mount point")

// Remover removes leftovers the way the kubelet does after a successful
// NodeUnpublishVolume or NodeUnstageVolume (pkg/volume/csi removeMountDir and
// cleanupOrphanDeviceFiles): a directory the driver should have emptied is
// removed only if it is empty, and nothing that is a mount point is removed
// or descended into. Symlinks are removed, never followed.
type Remover struct {
	Layout Layout
	Mounts MountChecker
}

// CheckUnmounted returns nil when path is not a mount point, fs.ErrNotExist
// when it is gone, ErrStillMounted (wrapped) when it is a mount point. It
// does not enter path.
func (r Remover) CheckUnmounted(path string) error {
	mounted, err := r.Mounts.IsMountPoint(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fs.ErrNotExist
		}
		return fmt.Errorf("checking whether %s is a mount point: %w", path, err)
	}
	if mounted {
		return fmt.Errorf("%s: %w", path, ErrStillMounted)
	}
	return nil
}

// removeEmpty removes path (a file or an empty directory) if it is not a
// mount point. A missing path is fine; a non-empty directory is an error.
func (r Remover) removeEmpty(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := r.CheckUnmounted(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeTree removes path and everything below it. It first checks the whole
// tree, without following symlinks: if anything in it is a mount point,
// nothing is removed, so that metadata such as vol_data.json stays beside
// whatever the kubelet must still tear down.
func (r Remover) removeTree(path string) error {
	if err := r.checkTree(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return r.removeChecked(path)
}

// CheckTreeUnmounted returns nil when nothing at or below path is a mount
// point, or path is gone, and ErrStillMounted (wrapped) otherwise. It enters
// no mount point and follows no symlink, as removeTree.
func (r Remover) CheckTreeUnmounted(path string) error {
	if err := r.checkTree(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// checkTree returns ErrStillMounted (wrapped) if path or anything below it is
// a mount point, fs.ErrNotExist if path is gone.
func (r Remover) checkTree(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if err := r.CheckUnmounted(path); err != nil {
		return err
	}
	if !fi.IsDir() {
		return nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := r.checkTree(filepath.Join(path, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// removeChecked removes a tree checkTree accepted, depth first; symlinks are
// removed, not followed.
func (r Remover) removeChecked(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			if err := r.removeChecked(filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemovePodVolume removes a filesystem volume's publish path (which the
// driver must have removed or emptied), its vol_data.json and its directory.
// The pod directory itself is left to the kubelet's orphaned-pod cleanup.
func (r Remover) RemovePodVolume(p PodVolume) error {
	if err := r.removeEmpty(p.TargetPath); err != nil {
		return err
	}
	if err := r.removeEmpty(filepath.Join(p.Dir, VolDataFileName)); err != nil {
		return err
	}
	return r.removeEmpty(p.Dir)
}

// RemoveStaged removes a filesystem volume's staging path (which the driver
// must have unmounted), its vol_data.json and its directory.
func (r Remover) RemoveStaged(s StagedVolume) error {
	if err := r.removeEmpty(s.StagingPath); err != nil {
		return err
	}
	if err := r.removeEmpty(filepath.Join(s.Dir, VolDataFileName)); err != nil {
		return err
	}
	return r.removeEmpty(s.Dir)
}

// RemoveBlockPod removes what a block volume left for one pod after its
// NodeUnpublishVolume: the pod's device symlink, the device entry under the
// global map path, and the publish path if the driver left it behind.
func (r Remover) RemoveBlockPod(specName, podUID string) error {
	l := r.Layout
	for _, p := range []string{
		l.PodDeviceMapPath(podUID, specName),
		filepath.Join(l.BlockGlobalMapPath(specName), podUID),
		l.BlockPublishPath(specName, podUID),
	} {
		if err := r.removeEmpty(p); err != nil {
			return err
		}
	}
	return nil
}

// RemoveBlockVolume removes a block volume's directories once every pod's
// leftovers are gone and NodeUnstageVolume succeeded: the publish directory,
// the staging path and its content, and volumeDevices/<specName> with its
// vol_data.json (as the kubelet's cleanupOrphanDeviceFiles does).
func (r Remover) RemoveBlockVolume(specName string) error {
	l := r.Layout
	if err := r.removeEmpty(l.BlockPublishDir(specName)); err != nil {
		return err
	}
	if err := r.removeTree(l.BlockStagingPath(specName)); err != nil {
		return err
	}
	return r.removeTree(l.BlockVolumeDir(specName))
}

// RemovePodDirIfUnused removes a pod's directory when no volume directory is
// left in it, as the kubelet's orphaned-pod cleanup does; it reports whether
// the directory is gone. It is for the simulator: the node agent leaves pod
// directories to the kubelet.
func (r Remover) RemovePodDirIfUnused(podUID string) (bool, error) {
	pod := r.Layout.PodDir(podUID)
	for _, sub := range []string{"volumes", "volumeDevices"} {
		plugins, err := readDirNames(filepath.Join(pod, sub), true)
		if err != nil {
			return false, err
		}
		for _, plugin := range plugins {
			vols, err := readDirNames(filepath.Join(pod, sub, plugin), false)
			if err != nil {
				return false, err
			}
			if len(vols) > 0 {
				return false, nil
			}
		}
	}
	if err := r.removeTree(pod); err != nil {
		return false, err
	}
	return true, nil
}
