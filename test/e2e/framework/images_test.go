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

package framework

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/csi-fence/fence-attacher/test/bmcsim"
)

// TestBuildImages reads each built tarball back as an image: tagged with its
// name, its entrypoint the binary, and that binary in its one layer,
// executable; the product's images too, the webhook's and the helper's in
// the release layout (/entrypoint, a non-root user), which the webhook's
// Deployment and the init container it injects need.
func TestBuildImages(t *testing.T) {
	images, err := BuildImages(context.Background(), t, t.TempDir(), ImageOptions{Product: true})
	if err != nil {
		t.Fatal(err)
	}
	type layout struct{ entrypoint, user string }
	own := func(cmd string) layout { return layout{"/" + cmd, ""} }
	release := layout{"/entrypoint", "65532:65532"}
	want := map[string]layout{PauseImage: own("pause"), WriterImage: own("writer"),
		AttacherImage: own("csi-fence-attacher"), MockImage: own("csi-fence-mock"),
		WebhookImage: release, HelperImage: release}
	if len(images) != len(want) {
		t.Fatalf("got %d images, want %d", len(images), len(want))
	}
	for _, im := range images {
		l, ok := want[im.Name]
		if !ok {
			t.Fatalf("unexpected image %s", im.Name)
		}
		cmd := l.entrypoint[1:]
		tag, err := name.NewTag(im.Name)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(im.Tarball, &tag)
		if err != nil {
			t.Fatalf("%s: %v", im.Name, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Config.Entrypoint; len(got) != 1 || got[0] != l.entrypoint {
			t.Errorf("%s: entrypoint %q, want [%s]", im.Name, got, l.entrypoint)
		}
		if cfg.Config.User != l.user {
			t.Errorf("%s: user %q, want %q", im.Name, cfg.Config.User, l.user)
		}
		if cfg.OS != "linux" {
			t.Errorf("%s: os %q", im.Name, cfg.OS)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", im.Name, len(layers), err)
		}
		hdr, err := findInLayer(layers[0].Uncompressed, cmd)
		if err != nil {
			t.Fatalf("%s: %v", im.Name, err)
		}
		if hdr.Mode&0o111 == 0 || hdr.Size == 0 {
			t.Errorf("%s: /%s mode %o size %d, want an executable", im.Name, cmd, hdr.Mode, hdr.Size)
		}
	}
}

func findInLayer(open func() (io.ReadCloser, error), file string) (*tar.Header, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New(file + " not in the layer")
		}
		if err != nil {
			return nil, err
		}
		if hdr.Name == file {
			return hdr, nil
		}
	}
}

// TestPowerFencingFiles runs fence_ipmilan from powerFencingDebian's files
// alone: written into an empty directory, the agent run chrooted there asks
// a real BMC (ipmi_sim on loopback, test/bmcsim) for its power status
// through ipmitool, as the sidecar's container does. It needs root (chroot)
// and the agents installed (hack/install-fence-agents.sh), and is skipped
// without them; the real-node test TestRealNodesPowerFencing runs the
// image itself.
func TestPowerFencingFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	for _, p := range []string{"/usr/sbin/fence_ipmilan", "/usr/bin/ipmitool", "/usr/bin/ipmi_sim"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (hack/install-fence-agents.sh): %v", p, err)
		}
	}
	deb, err := imagebuild.DebianFiles(powerFencingDebian)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, f := range deb.Files {
		p := filepath.Join(root, f.Name)
		switch {
		case f.Dir:
			err = os.MkdirAll(p, 0o755)
		case f.Link != "":
			err = os.Symlink(f.Link, p)
		default:
			err = os.WriteFile(p, f.Data, os.FileMode(f.Mode&0o777))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// What a container runtime gives every container.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files of %d packages: %s", len(deb.Files), len(deb.Packages), strings.Join(deb.Packages, " "))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bmc, err := bmcsim.Start(ctx, bmcsim.Config{Dir: t.TempDir(), User: "admin", Password: "pw-files", Machine: []string{"/bin/sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Stop()
	cmd := exec.CommandContext(ctx, "/usr/sbin/fence_ipmilan")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{imagePath}
	cmd.Stdin = strings.NewReader(fmt.Sprintf("ip=%s\nipport=%d\nusername=admin\npassword=pw-files\nlanplus=1\ncipher=3\naction=status\n", bmc.Host, bmc.Port))
	out, err := cmd.CombinedOutput()
	// The agent API: status exits 0 for on.
	if err != nil || !strings.Contains(string(out), "Status: ON") {
		t.Fatalf("fence_ipmilan status in the chroot: %v\n%s", err, out)
	}
}
