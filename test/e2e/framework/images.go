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
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images of the real nodes. No registry is reachable: each is built
// here from a static Go binary of test/e2e/images (or, for the product's
// images, of cmd/) and imported into every node's containerd, which never
// pulls (the kubelet's sandbox image is the pause image, workloads use
// imagePullPolicy Never, the product's manifests a tag present already).
const (
	PauseImage  = "localhost/csi-fence/pause:dev"
	WriterImage = "localhost/csi-fence/writer:dev"

	// The product's images, under the names the shipped manifests use
	// (ghcr.io/csi-fence/<cmd>) with this registry and tag instead: what a
	// kustomization's images: transformer maps them to (ProductImageName).
	AttacherImage = ProductImageRegistry + "/csi-fence-attacher:" + ProductImageTag
	MockImage     = ProductImageRegistry + "/csi-fence-mock:" + ProductImageTag
	WebhookImage  = ProductImageRegistry + "/csi-fence-prestop-webhook:" + ProductImageTag
	// PowerFencingAttacherImage is csi-fence-attacher with what power
	// fencing runs as its child: fence_ipmilan, its Python and ipmitool
	// (powerFencingDebian).
	PowerFencingAttacherImage = ProductImageRegistry + "/csi-fence-attacher-power-fencing:" + ProductImageTag
	// HelperImage is csi-fence-prestop, which the webhook's init
	// container copies into each opted-in pod (--helper-image).
	HelperImage = ProductImageRegistry + "/csi-fence-prestop:" + ProductImageTag

	ProductImageRegistry = "localhost/csi-fence"
	ProductImageTag      = "dev"
)

// ShippedImageRegistry is where the shipped manifests (deploy/kubernetes)
// name the product's images.
const ShippedImageRegistry = "ghcr.io/csi-fence"

// Image is an image tarball (docker archive format, which `ctr images
// import` reads) ready to import.
type Image struct {
	Name    string
	Tarball string
}

type imageSource struct {
	image, pkg string
	// release lays the image out as release-tools/Dockerfile does: the
	// binary at /entrypoint, run as user 65532. The webhook's Deployment
	// requires a non-root image (runAsNonRoot without a user), and the
	// init container it injects runs the helper as /entrypoint.
	release bool
}

// testImages are the framework's own images, each the command of
// test/e2e/images it runs.
var testImages = []imageSource{
	{image: PauseImage, pkg: "./test/e2e/images/pause"},
	{image: WriterImage, pkg: "./test/e2e/images/writer"},
}

// productImages are the product's binaries as images: csi-fence-attacher
// (controller, node and registrar roles), the mock driver csi-fence-mock,
// the termination-reason webhook and its helper.
var productImages = []imageSource{
	{image: AttacherImage, pkg: "./cmd/csi-fence-attacher"},
	{image: MockImage, pkg: "./cmd/csi-fence-mock"},
	{image: WebhookImage, pkg: "./cmd/csi-fence-prestop-webhook", release: true},
	{image: HelperImage, pkg: "./cmd/csi-fence-prestop", release: true},
}

// ImageOptions choose what BuildImages builds.
type ImageOptions struct {
	// Product adds the product's images (AttacherImage, MockImage,
	// WebhookImage, HelperImage) to the framework's own (PauseImage,
	// WriterImage).
	Product bool
	// PowerFencing adds PowerFencingAttacherImage (with Product).
	PowerFencing bool
}

// powerFencingDebian is what the sidecar's container needs to run the
// ClusterLabs agent fence_ipmilan, taken from the host's Debian packages
// (hack/install-fence-agents.sh installs them), the way a user's image
// gets them from apt (release-tools/Dockerfile.power-fencing): the agent
// and the fencing library it imports (fence-agents, whose other agents'
// dependencies, cloud SDKs, are not wanted: only the agent's own files),
// the Python that runs them with the modules the library imports at its
// top (pycurl, pexpect), ipmitool, which the agent runs for every call, and
// every package these depend on (libc, libssl, libcurl, ...). dpkg and
// init-system-helpers install and configure packages and are not run; the
// documentation is left out.
var powerFencingDebian = imagebuild.DebianOptions{
	Packages: []string{"python3", "python3-pycurl", "python3-pexpect", "ipmitool"},
	Paths:    []string{"/usr/sbin/fence_ipmilan", "/usr/share/fence"},
	Skip:     []string{"dpkg", "init-system-helpers"},
	Exclude:  []string{"/usr/share/doc", "/usr/share/man", "/usr/share/info", "/usr/share/locale", "/usr/share/lintian"},
}

// imagePath is the containers' PATH in an image with more than one program:
// the agents are looked up in it (pkg/powerfence adds the sbin directories).
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuildImages builds the real nodes' images into dir: the static binaries
// (go build, CGO off, so they need no libc in the image) and one image
// tarball each, whose only layer holds the binary as /<cmd>, its entrypoint.
func BuildImages(ctx context.Context, log Logger, dir string, opts ImageOptions) ([]Image, error) {
	begin := time.Now()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	sources := testImages
	if opts.Product {
		sources = append(slices.Clone(testImages), productImages...)
	}
	// The product's binaries say which build they are, as release-tools
	// stamps them.
	var pkgs []string
	for _, s := range sources {
		pkgs = append(pkgs, s.pkg)
	}
	ldflags := "-s -w -X main.version=e2e-" + ProductImageTag
	if err := imagebuild.GoBuild(ctx, RepoRoot(), bin, "linux", runtime.GOARCH, ldflags, pkgs...); err != nil {
		return nil, fmt.Errorf("building the image binaries: %w", err)
	}
	var images []Image
	var names []string
	for _, s := range sources {
		cmd := filepath.Base(s.pkg)
		path := filepath.Join(dir, cmd+".tar")
		if err := writeImage(path, s.image, filepath.Join(bin, cmd), s.release); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.image, err)
		}
		images = append(images, Image{Name: s.image, Tarball: path})
		names = append(names, s.image)
	}
	if opts.Product && opts.PowerFencing {
		path := filepath.Join(dir, "csi-fence-attacher-power-fencing.tar")
		pkgs, err := writePowerFencingImage(path, filepath.Join(bin, "csi-fence-attacher"))
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", PowerFencingAttacherImage, err)
		}
		images = append(images, Image{Name: PowerFencingAttacherImage, Tarball: path})
		names = append(names, fmt.Sprintf("%s (with %d Debian packages)", PowerFencingAttacherImage, len(pkgs)))
	}
	log.Logf("images built in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(names, ", "))
	return images, nil
}

// writePowerFencingImage writes PowerFencingAttacherImage's tarball: the
// attacher's image (the binary at /csi-fence-attacher, its entrypoint) with
// powerFencingDebian's files from this host, and PATH set. It returns the
// Debian packages it holds.
func writePowerFencingImage(path, binary string) ([]string, error) {
	if _, err := os.Stat("/usr/sbin/fence_ipmilan"); err != nil {
		return nil, fmt.Errorf("fence_ipmilan is not installed here (run hack/install-fence-agents.sh): %w", err)
	}
	deb, err := imagebuild.DebianFiles(powerFencingDebian)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(binary)
	files := append(deb.Files,
		imagebuild.File{Name: "tmp", Mode: 0o1777, Dir: true},
		imagebuild.File{Name: base, Mode: 0o755, Data: data})
	img, err := imagebuild.Image(imagebuild.Spec{
		Platform:   v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Files:      files,
		Entrypoint: []string{"/" + base},
		Env:        []string{imagePath},
		WorkingDir: "/",
		Comment:    "static binary and Debian packages " + strings.Join(deb.Packages, " "),
	})
	if err != nil {
		return nil, err
	}
	return deb.Packages, writeTarball(path, PowerFencingAttacherImage, img)
}

// writeImage writes an image tarball tagged ref (imagebuild's reproducible
// layer and config) whose one layer is the executable binary at /<base
// name>, also its entrypoint, with the directories a container's mounts need
// (/tmp, /data). It runs as root: the e2e's workloads write to host paths.
// A release image has the binary at /entrypoint instead and runs as the
// release's user (imagebuild.ReleaseEntrypoint, ReleaseUser).
func writeImage(path, ref, binary string, release bool) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	entrypoint, user := "/"+filepath.Base(binary), ""
	if release {
		entrypoint, user = imagebuild.ReleaseEntrypoint, imagebuild.ReleaseUser
	}
	img, err := imagebuild.Image(imagebuild.Spec{
		Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Files: []imagebuild.File{
			{Name: "tmp", Mode: 0o1777, Dir: true},
			{Name: "data", Mode: 0o1777, Dir: true},
			{Name: strings.TrimPrefix(entrypoint, "/"), Mode: 0o755, Data: data},
		},
		Entrypoint: []string{entrypoint},
		User:       user,
		WorkingDir: "/",
	})
	if err != nil {
		return err
	}
	return writeTarball(path, ref, img)
}

// writeTarball writes img tagged ref to path, atomically.
func writeTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
