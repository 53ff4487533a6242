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

// Package imagebuild builds container images from static binaries without a
// container engine (go-containerregistry): the release images (`make
// images`, Release) and the e2e framework's images for the real nodes share
// it. DebianFiles adds the files of the host's installed Debian packages,
// for an image whose program runs others (the fence agents).
//
// Everything it writes is reproducible: the layer's entries are sorted, owned
// by root with a fixed modification time and no user or group names, the
// config's creation time is fixed, so the same binaries give the same
// digests.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the default time of every timestamp in an image: the Unix epoch,
// as distroless and ko use.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of a layer.
type File struct {
	// Name is the path in the image, without the leading slash; a
	// directory's may end with one.
	Name string
	Mode int64
	Dir  bool
	Data []byte // a regular file's content
	// Link, if set, makes the entry a symbolic link to Link (as the link
	// holds it: relative to the link's directory, or absolute in the
	// image).
	Link string
	UID  int
	GID  int
}

// Layer returns a one-layer tar of files in name order (whatever the order
// given), every entry with modification time mtime.
func Layer(files []File, mtime time.Time) (v1.Layer, error) {
	files = slices.Clone(files)
	key := func(f File) string { return strings.TrimSuffix(f.Name, "/") }
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(key(a), key(b)) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, f := range files {
		name := key(f)
		if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name {
			return nil, fmt.Errorf("layer entry %q: want a clean relative path", f.Name)
		}
		if i > 0 && key(files[i-1]) == name {
			return nil, fmt.Errorf("layer entry %q twice", name)
		}
		hdr := &tar.Header{Name: name, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, f.Link
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Spec is one image for one platform: one layer of Files and its config.
type Spec struct {
	Platform   v1.Platform
	Files      []File
	Entrypoint []string
	// Env is the containers' environment (NAME=value), e.g. PATH for an
	// image whose program runs others.
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	// Comment is the layer's history comment, "static binary" when empty.
	Comment string
	// Created is every timestamp of the image (config, history, layer
	// entries); Epoch when zero.
	Created time.Time
}

// Image builds the OCI image of spec.
func Image(spec Spec) (v1.Image, error) {
	created := spec.Created
	if created.IsZero() {
		created = Epoch
	}
	layer, err := Layer(spec.Files, created)
	if err != nil {
		return nil, err
	}
	comment := spec.Comment
	if comment == "" {
		comment = "static binary"
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "fence-attacher imagebuild", Comment: comment}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: created}
	cfg.OS, cfg.Architecture, cfg.Variant = spec.Platform.OS, spec.Platform.Architecture, spec.Platform.Variant
	cfg.Config = v1.Config{Entrypoint: spec.Entrypoint, Env: spec.Env, User: spec.User, WorkingDir: spec.WorkingDir, Labels: spec.Labels}
	return mutate.ConfigFile(img, cfg)
}

// Index is the OCI image index of images, one per platform (each image's
// config says which), in the order given.
func Index(images []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range images {
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant},
		}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	if len(annotations) > 0 {
		idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	}
	return idx, nil
}

// GoBuild builds the packages (./cmd/x, relative to dir) as static binaries
// for goos/goarch into outDir, one file per package named after its
// directory: CGO off (no libc in the image), -trimpath (no build machine
// paths), with ldflags.
func GoBuild(ctx context.Context, dir, outDir, goos, goarch, ldflags string, pkgs ...string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags, "-o", outDir + "/"}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", strings.Join(pkgs, " "), goos, goarch, err, out)
	}
	return nil
}
