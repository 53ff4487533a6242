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

package imagebuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The release image's layout, the one release-tools/Dockerfile gives
// (`make container`): the binary at /entrypoint (pkg/prestop's helper
// image relies on it), run as distroless's nonroot user.
const (
	ReleaseEntrypoint = "/entrypoint"
	ReleaseUser       = "65532:65532"
)

// VersionPkg is the package whose variables the release stamps, as
// release-tools/build.make does.
const VersionPkg = "github.com/csi-fence/fence-attacher/pkg/version"

// ReleaseOptions say what Release builds.
type ReleaseOptions struct {
	// RepoRoot is the module's root, where `go build ./cmd/<cmd>` runs.
	RepoRoot string
	// Cmds are the commands of cmd/ to build an image of, each
	// <Registry>/<cmd>:<Version>.
	Cmds []string
	// Platforms are os/arch pairs, e.g. linux/amd64, linux/arm64.
	Platforms []string
	Registry  string
	// Version is stamped into pkg/version and is the image's tag; Commit
	// is stamped and the revision label.
	Version string
	Commit  string
	// OutDir receives bin/<os>_<arch>/<cmd> and one OCI layout directory
	// per command, <OutDir>/<cmd>.
	OutDir string
	// Binaries, if set, is a directory of binaries already built with
	// ReleaseLDFlags, <Binaries>/<os>_<arch>/<cmd>, which the images take
	// instead of building their own into OutDir/bin.
	Binaries string
	// Created is the images' timestamp, Epoch when zero.
	Created time.Time
}

// Built is one command's image index, written to Dir.
type Built struct {
	Ref    string // registry/cmd:version
	Digest v1.Hash
	Dir    string // the OCI layout
	Index  v1.ImageIndex
}

// descriptions say what each released command's image is, for its
// org.opencontainers.image.description label.
var descriptions = map[string]string{
	"csi-fence-attacher":        "CSI sidecar that extends external-attacher with fenced detach, automatic failover of pods from dead nodes, and the node agent that cleans fenced volumes",
	"csi-fence-mock":            "CSI driver on a simulated array with the fence extension of CSI spec PR #477, for tests and sanity runs",
	"csi-fence-prestop":         "static helper that delivers a pod's termination reason to its preStop hook",
	"csi-fence-prestop-webhook": "mutating admission webhook that delivers termination reasons to the preStop hooks of the pods that opt in",
	"csi-fence-sanity":          "csi-test sanity suite plus the fence and force-unpublish checks of fence-attacher",
	"kubectl-fence":             "kubectl plugin of fence-attacher (kubectl fence)",
}

// ReleaseLabels are the OCI labels of the release image of command cmd:
// title, description, licence, source, version and, when known, the
// commit it was built from.
func ReleaseLabels(cmd, version, commit string) map[string]string {
	desc, ok := descriptions[cmd]
	if !ok {
		desc = cmd + " of fence-attacher"
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       cmd,
		"org.opencontainers.image.description": desc,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.source":      "https://github.com/csi-fence/fence-attacher",
		"org.opencontainers.image.url":         "https://github.com/csi-fence/fence-attacher",
	}
	if commit != "" {
		labels["org.opencontainers.image.revision"] = commit
	}
	return labels
}

// ReleaseLDFlags are the -ldflags of a release binary: version and, when
// known, commit stamped into pkg/version.
func ReleaseLDFlags(version, commit string) string {
	ldflags := "-X " + VersionPkg + ".version=" + version
	if commit != "" {
		ldflags += " -X " + VersionPkg + ".commit=" + commit
	}
	return ldflags
}

// Release builds the static binaries of opts.Cmds for every platform and
// one multi-platform image index per command, written as an OCI layout
// directory whose index.json names the index by its tag
// (org.opencontainers.image.ref.name).
func Release(ctx context.Context, opts ReleaseOptions) ([]Built, error) {
	if len(opts.Cmds) == 0 || len(opts.Platforms) == 0 || opts.Version == "" {
		return nil, fmt.Errorf("release: commands, platforms and version are required")
	}
	ldflags := ReleaseLDFlags(opts.Version, opts.Commit)
	binDir := opts.Binaries
	if binDir == "" {
		binDir = filepath.Join(opts.OutDir, "bin")
	}
	var pkgs []string
	for _, c := range opts.Cmds {
		pkgs = append(pkgs, "./cmd/"+c)
	}
	var platforms []v1.Platform
	for _, p := range opts.Platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, err
		}
		if plat.OS == "" || plat.Architecture == "" || plat.Variant != "" {
			return nil, fmt.Errorf("platform %q: want os/arch", p)
		}
		platforms = append(platforms, *plat)
		if opts.Binaries != "" {
			continue
		}
		bin := filepath.Join(binDir, plat.OS+"_"+plat.Architecture)
		if err := GoBuild(ctx, opts.RepoRoot, bin, plat.OS, plat.Architecture, ldflags, pkgs...); err != nil {
			return nil, err
		}
	}
	var built []Built
	for _, c := range opts.Cmds {
		labels := ReleaseLabels(c, opts.Version, opts.Commit)
		ref := strings.TrimSuffix(opts.Registry, "/") + "/" + c + ":" + opts.Version
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("image name: %w", err)
		}
		var images []v1.Image
		for _, plat := range platforms {
			data, err := os.ReadFile(filepath.Join(binDir, plat.OS+"_"+plat.Architecture, c))
			if err != nil {
				return nil, err
			}
			img, err := Image(Spec{Platform: plat, Files: ReleaseFiles(data), Entrypoint: []string{ReleaseEntrypoint},
				User: ReleaseUser, WorkingDir: "/", Labels: labels, Created: opts.Created})
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", c, plat, err)
			}
			images = append(images, img)
		}
		idx, err := Index(images, labels)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(opts.OutDir, c)
		if err := WriteLayout(dir, idx, tag.String()); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		built = append(built, Built{Ref: tag.String(), Digest: digest, Dir: dir, Index: idx})
	}
	return built, nil
}

// ReleaseFiles are a release image's files: the binary as /entrypoint,
// /etc/passwd and /etc/group naming root and nonroot (65532, as
// distroless), a world-writable /tmp and nonroot's home.
func ReleaseFiles(binary []byte) []File {
	return []File{
		{Name: "entrypoint", Mode: 0o755, Data: binary},
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Name: "home", Mode: 0o755, Dir: true},
		{Name: "home/nonroot", Mode: 0o700, Dir: true, UID: 65532, GID: 65532},
		{Name: "tmp", Mode: 0o1777, Dir: true},
	}
}

// WriteLayout replaces dir with an OCI image layout holding idx, named ref
// in its index.json.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	}))
}
