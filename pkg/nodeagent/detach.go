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

// The cleanup of a volume fenced by detach (issue 37): the driver's owner
// declares on its CSIDriver that a successful plain ControllerUnpublishVolume
// revokes the node's access (contract.UnpublishRevokesAccessAnnotation), as
// a cloud detach takes the disk away from the machine, and the controller
// fenced the node's volumes with that detach. The plugin has no
// FORCE_UNPUBLISH (with it, the forced calls are used, as for any fence).
// What the node holds of such a volume when it comes back is stale: mounts
// whose device is gone, directories, and whatever the driver keeps of a
// volume it staged. The agent
//
//   - calls NodeUnpublishVolume and NodeUnstageVolume plainly on the paths
//     the kubelet left (pkg/kubeletlayout), in the kubelet's order: the
//     node plugin unmounts them and releases what it holds;
//   - tolerates NotFound from either: the volume no longer exists for the
//     driver (it looked it up and it was taken away), so it holds nothing
//     of it on this node, and what is left is the kubelet's paths, which
//     the agent cleans itself;
//   - after each call, unmounts itself a path that is still a mount point
//     (or a corrupted one: a mount whose server or device is gone), lazily:
//     the storage revoked the node's access, so no data can still reach the
//     volume through it, and a lazy unmount takes it out of the tree even
//     while a killed container's last descriptor holds it;
//   - does the same after any other error, and still fails the attempt: the
//     error may mean the driver holds something of the volume on the node
//     (a device mapping, a session), so the volume is not declared clean,
//     and the attempt is retried with backoff; but a driver that stumbles
//     over a stale mount (stat answering EIO or ENOTCONN) finds a plain
//     directory on the retry, and the node is not stranded by it.
//
// The kubelet's bind mount of a block volume's device for each pod
// (volumeDevices/<pv>/dev/<pod>), which the kubelet, not the driver, would
// have unmounted, is unmounted the same way before it is removed: its
// device went with the volume.
//
// Only the paths the plan calls the driver for, and those bind mounts of a
// block volume attributed to the recorded one, are unmounted: a directory
// without metadata is never the agent's to unmount (plan.go). The agent's
// own unmount needs the privileges and Bidirectional mount propagation the
// node plugin has; without them a stale mount the plugin left keeps the
// volume unclean, with the unmount's error in the record.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Unmounter unmounts a path.
type Unmounter interface {
	Unmount(path string) error
}

// lazyUnmounter detaches a mount lazily (MNT_DETACH).
type lazyUnmounter struct{}

func (lazyUnmounter) Unmount(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not (or no longer) a mount point
	}
	return err
}

// cleanupMode is how the node plugin's calls are made.
type cleanupMode int

const (
	// modePlain: plain calls to a plugin without FORCE_UNPUBLISH whose
	// driver is not declared to revoke access on unpublish; a driver may
	// refuse them for a fenced volume.
	modePlain cleanupMode = iota
	// modeForce: force=true (FORCE_UNPUBLISH).
	modeForce
	// modeDetached: plain calls for a volume fenced by detach (this file).
	modeDetached
)

func (m cleanupMode) String() string {
	switch m {
	case modeForce:
		return "force=true"
	case modeDetached:
		return "plain; the driver's unpublish revokes access, as its CSIDriver declares"
	}
	return "force=false"
}

// unpublishRevokesAccess reads, live, whether the driver's CSIDriver
// declares that a plain unpublish revokes access. A CSIDriver that is
// missing, or cannot be read, is no declaration: then why says what
// happened, for the warning.
func (a *Agent) unpublishRevokesAccess(ctx context.Context) (declared bool, why string) {
	if a.opts.CSIDrivers == nil {
		return false, ""
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	d, err := a.opts.CSIDrivers.Get(ctx, a.opts.DriverName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, ""
	case err != nil:
		klog.FromContext(ctx).Error(err, "Cannot read the CSIDriver: taking the driver as not declaring that its unpublish revokes access", "csiDriver", a.opts.DriverName)
		return false, fmt.Sprintf("its CSIDriver could not be read: %v", err)
	}
	return d.Annotations[contract.UnpublishRevokesAccessAnnotation] == contract.UnpublishRevokesAccessTrue, ""
}

// tolerated reports whether err of a NodeUnpublishVolume/NodeUnstageVolume
// of a volume fenced by detach still lets the cleanup go on: only NotFound,
// the driver's word that the volume does not exist for it.
func tolerated(err error) bool {
	return status.Code(err) == codes.NotFound
}

// afterDetachedCall finishes a plugin call on path of a volume fenced by
// detach: it unmounts path if it is still a mount point, and returns nil
// when the call succeeded or failed with a tolerated error and nothing is
// mounted there any more, the call's error otherwise (joined with the
// unmount's, if that failed too).
func (a *Agent) afterDetachedCall(ctx context.Context, call, path string, callErr error) error {
	logger := klog.FromContext(ctx)
	if callErr != nil && tolerated(callErr) {
		logger.V(2).Info("The driver no longer knows the volume fenced by detach: tolerated", "call", call, "path", path, "err", callErr)
		callErr = nil
	}
	return errors.Join(callErr, a.unmountStale(ctx, path))
}

// unmountStale unmounts path if it is still a mount point (a corrupted one
// included); a path that is not there or not mounted is fine.
func (a *Agent) unmountStale(ctx context.Context, path string) error {
	stale, err := a.mounted(path)
	if err != nil || !stale {
		return err
	}
	klog.FromContext(ctx).Info("Unmounting a stale mount of a volume fenced by detach", "path", path)
	if err := a.opts.Unmounter.Unmount(path); err != nil {
		return fmt.Errorf("unmounting the stale mount %s: %w", path, err)
	}
	return nil
}

// mounted reports whether path is a mount point, a corrupted one included
// (ENOTCONN, EIO, ESTALE: its server or device is gone).
func (a *Agent) mounted(path string) (bool, error) {
	m, err := a.opts.Mounts.IsMountPoint(path)
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case mount.IsCorruptedMnt(err):
		return true, nil
	}
	return false, fmt.Errorf("checking whether %s is a mount point: %w", path, err)
}
