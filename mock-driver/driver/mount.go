package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// realMounts says whether a volume of capability c gets real mounts
// (Config.MountDataDir set, a filesystem volume; block volumes keep their
// marker file).
func (d *Driver) realMounts(c *csi.VolumeCapability) bool {
	return d.cfg.MountDataDir != "" && c.GetBlock() == nil
}

// dataDir returns, creating it, the directory that holds volume id's files.
func (d *Driver) dataDir(id string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsRune(id, '/') {
		return "", fmt.Errorf("volume ID %q cannot name a data directory", id)
	}
	dir := filepath.Join(d.cfg.MountDataDir, id)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("the data directory of volume %s: %w", id, err)
	}
	// Writable by a container of any user, as a fresh filesystem's root
	// would be made for it by fsGroup.
	return dir, os.Chmod(dir, 0o777)
}

// bindMount bind-mounts source on target, unless target is a mount point
// already (the call is repeated: CSI operations are idempotent).
func bindMount(source, target string) error {
	notMnt, err := mount.IsNotMountPoint(mount.New(""), target)
	if err != nil {
		return fmt.Errorf("checking %s: %w", target, err)
	}
	if !notMnt {
		return nil
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on %s: %w", source, target, err)
	}
	return nil
}

// unmountIfMounted unmounts path when it is a mount point; force detaches
// it lazily (MNT_DETACH), for a fenced volume whose users may still hold
// it: the mount is gone from the tree at once and nothing new reaches it.
func (d *Driver) unmountIfMounted(path string, force bool) error {
	if d.cfg.MountDataDir == "" {
		return nil
	}
	notMnt, err := mount.IsNotMountPoint(mount.New(""), path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && notMnt) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	flags := 0
	if force {
		flags = unix.MNT_DETACH
	}
	if err := unix.Unmount(path, flags); err != nil {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return nil
}
