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
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestLayerReproducible: the layer's digest depends on the files' names,
// modes and contents only, not on the order they are given in or when it is
// built; and it does change with the content.
func TestLayerReproducible(t *testing.T) {
	files := ReleaseFiles([]byte("binary"))
	a, err := Layer(files, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(files)
	slices.Reverse(reversed)
	time.Sleep(1100 * time.Millisecond) // a second later, in case a clock leaks in
	b, err := Layer(reversed, Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Errorf("same files in another order: digest %s, then %s", da, db)
	}
	c, err := Layer(ReleaseFiles([]byte("other binary")), Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, a) == digest(t, c) {
		t.Error("another binary gave the same digest")
	}
	// The entries: sorted, every one at Epoch, owned by number only.
	var names []string
	for hdr := range entries(t, a) {
		names = append(names, hdr.Name)
		if !hdr.ModTime.Equal(Epoch) || hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: mtime %v, owner %q/%q", hdr.Name, hdr.ModTime, hdr.Uname, hdr.Gname)
		}
	}
	if !slices.IsSorted(names) || len(names) != len(files) {
		t.Errorf("entries %q, want %d sorted", names, len(files))
	}
	if _, err := Layer([]File{{Name: "/abs"}}, Epoch); err == nil {
		t.Error("an absolute path was accepted")
	}
}

// TestRelease builds a release image of testdata/cmd/release-fixture twice,
// into two directories: the same digests both times (reproducible), an OCI
// index of linux/amd64 and linux/arm64 whose images hold that
// architecture's binary as /entrypoint, run as nonroot, tagged with the
// version, read back from the OCI layout on disk. The product's own images
// are built the same way by the real-node e2e tests (linux/amd64) and by
// `make images`.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles for arm64")
	}
	root, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	opts := ReleaseOptions{RepoRoot: root, Cmds: []string{fixtureCmd}, Platforms: []string{"linux/amd64", "linux/arm64"},
		Registry: "ghcr.io/csi-fence", Version: "v9.8.7-test", Commit: "0123456789abcdef"}
	var digests []v1.Hash
	for i := range 2 {
		opts.OutDir = filepath.Join(t.TempDir(), "out")
		built, err := Release(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(built) != 1 {
			t.Fatalf("built %d images, want 1", len(built))
		}
		b := built[0]
		if want := "ghcr.io/csi-fence/" + fixtureCmd + ":v9.8.7-test"; b.Ref != want {
			t.Errorf("ref %s, want %s", b.Ref, want)
		}
		digests = append(digests, b.Digest)
		if i == 0 {
			checkLayout(t, b)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same sources: index %s, then %s", digests[0], digests[1])
	}
}

// fixtureCmd is the command under testdata/cmd that TestRelease releases.
const fixtureCmd = "release-fixture"

func checkLayout(t *testing.T, b Built) {
	t.Helper()
	outer, err := layout.ImageIndexFromPath(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Manifests) != 1 || om.Manifests[0].Digest != b.Digest || om.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != b.Ref {
		t.Fatalf("index.json %+v, want the index %s named %s", om.Manifests, b.Digest, b.Ref)
	}
	idx, err := outer.ImageIndex(b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", m.MediaType)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s without a platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != d.Platform.OS || cfg.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", d.Platform, cfg.OS, cfg.Architecture)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{ReleaseEntrypoint}) || cfg.Config.User != ReleaseUser ||
			cfg.Config.Labels["org.opencontainers.image.version"] != "v9.8.7-test" || !cfg.Created.Equal(Epoch) {
			t.Errorf("%s: config %+v, created %v", d.Platform, cfg.Config, cfg.Created)
		}
		// What a registry and a scanner show of the image: its name, what
		// it is, its licence and where it comes from.
		for k, want := range map[string]string{
			"org.opencontainers.image.title":    fixtureCmd,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.source":   "https://github.com/csi-fence/fence-attacher",
		} {
			if got := cfg.Config.Labels[k]; got != want {
				t.Errorf("%s: label %s = %q, want %q", d.Platform, k, got, want)
			}
		}
		if cfg.Config.Labels["org.opencontainers.image.description"] == "" {
			t.Errorf("%s: no description label", d.Platform)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers, %v", d.Platform, len(layers), err)
		}
		found := false
		for hdr, data := range entriesData(t, layers[0]) {
			if hdr.Name != "entrypoint" {
				continue
			}
			found = true
			f, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s: /entrypoint: %v", d.Platform, err)
			}
			if f.Machine != machines[d.Platform.Architecture] {
				t.Errorf("%s: /entrypoint is for %v", d.Platform, f.Machine)
			}
			if hdr.Mode&0o111 == 0 {
				t.Errorf("%s: /entrypoint mode %o", d.Platform, hdr.Mode)
			}
		}
		if !found {
			t.Errorf("%s: no /entrypoint", d.Platform)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %q, want linux/amd64, linux/arm64", platforms)
	}
	// The binary says its version (pkg/version), when it runs here.
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		out, err := exec.Command(filepath.Join(filepath.Dir(b.Dir), "bin", "linux_amd64", fixtureCmd), "--version").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("v9.8.7-test")) {
			t.Errorf("--version: %s, %v", out, err)
		}
	}
}

func digest(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	h, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func entries(t *testing.T, l v1.Layer) func(func(*tar.Header) bool) {
	return func(yield func(*tar.Header) bool) {
		for hdr := range entriesData(t, l) {
			if !yield(hdr) {
				return
			}
		}
	}
}

func entriesData(t *testing.T, l v1.Layer) func(func(*tar.Header, []byte) bool) {
	t.Helper()
	return func(yield func(*tar.Header, []byte) bool) {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if !yield(hdr, data) {
				return
			}
		}
	}
}

// Every command the Makefile releases an image of (IMAGE_CMDS) has a
// description of its own, not the fallback.
func TestReleaseLabelsDescribeEveryImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "IMAGE_CMDS = "); ok {
			cmds = strings.Fields(v)
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no IMAGE_CMDS in the Makefile")
	}
	for _, c := range cmds {
		l := ReleaseLabels(c, "v1.2.3", "abc")
		if _, ok := descriptions[c]; !ok || l["org.opencontainers.image.title"] != c || l["org.opencontainers.image.revision"] != "abc" {
			t.Errorf("%s: labels %v; want a description of its own", c, l)
		}
	}
}
