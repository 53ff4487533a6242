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

package release

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// TestRun cuts a trimmed release (two commands, one an image, the plugin,
// for the host's platform only: what the Go build cache of the unit tests
// already holds) and checks everything it wrote.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	const version = "v0.1.0-rc.1"
	platform := "linux/" + runtime.GOARCH
	out := filepath.Join(t.TempDir(), "dist")
	opts := Options{
		RepoRoot: repoRoot, Version: version, Commit: "0123456789abcdef0123456789abcdef01234567",
		Cmds: []string{"csi-fence-prestop", "kubectl-fence"}, ImageCmds: []string{"csi-fence-prestop"},
		Platforms: []string{platform}, Plugin: "kubectl-fence", PluginPlatforms: []string{platform},
		Registry: "example.com/csi-fence", DownloadURL: "https://example.com/dl/", OutDir: out,
	}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}

	arch := runtime.GOARCH
	want := []string{
		ChecksumsFile, NotesFile, KrewManifestFile,
		"csi-fence-0.1.0-rc.1.tgz",
		"csi-fence-manifests_v0.1.0-rc.1.tar.gz",
		"csi-fence-prestop_v0.1.0-rc.1_linux_" + arch + ".tar.gz",
		"kubectl-fence_v0.1.0-rc.1_linux_" + arch + ".tar.gz",
		"sbom/csi-fence-prestop_v0.1.0-rc.1_linux_" + arch + ".cdx.json",
		"sbom/kubectl-fence_v0.1.0-rc.1_linux_" + arch + ".cdx.json",
	}
	slices.Sort(want)
	if !slices.Equal(res.Files, want) {
		t.Errorf("files:\n%s\nwant:\n%s", strings.Join(res.Files, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range append(want, "bin/linux_"+arch+"/kubectl-fence", "images/csi-fence-prestop/index.json", "manifests/sidecar/kustomization.yaml") {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	// SHA256SUMS lists every file but itself, with its SHA-256.
	sums, err := ReadChecksums(filepath.Join(out, ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != len(want)-1 {
		t.Errorf("SHA256SUMS lists %d files, want %d", len(sums), len(want)-1)
	}
	for name, sum := range sums {
		if got, err := fileSHA256(filepath.Join(out, name)); err != nil || got != sum {
			t.Errorf("SHA256SUMS: %s %s, the file's is %s (%v)", name, sum, got, err)
		}
	}

	// Each archive holds the binary, with the version stamped, and LICENSE.
	for _, c := range opts.Cmds {
		files, err := readTarGz(filepath.Join(out, Archive(c, version, "linux", arch)))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 2 || files["LICENSE"] == nil || files[c] == nil {
			t.Errorf("%s archive: %d files, want %s and LICENSE", c, len(files), c)
		}
	}
	got, err := exec.Command(filepath.Join(out, "bin", "linux_"+arch, "csi-fence-prestop"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(got), version) || !strings.Contains(string(got), opts.Commit[:12]) {
		t.Errorf("csi-fence-prestop version: %q (%v), want %s and the commit", got, err, version)
	}

	// The krew manifest's checksums are the archives'.
	data, err := os.ReadFile(filepath.Join(out, KrewManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := CheckKrewManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if plugin.Spec.Version != version || len(plugin.Spec.Platforms) != 1 {
		t.Fatalf("krew manifest at %s with %d platforms, want %s with 1", plugin.Spec.Version, len(plugin.Spec.Platforms), version)
	}
	for _, pl := range plugin.Spec.Platforms {
		archive := strings.TrimPrefix(pl.URI, "https://example.com/dl/")
		if sum, err := fileSHA256(filepath.Join(out, archive)); err != nil || sum != pl.SHA256 {
			t.Errorf("krew %s: sha256 %s, the archive's %s (%v)", pl.URI, pl.SHA256, sum, err)
		}
		files, err := readTarGz(filepath.Join(out, archive))
		if err != nil || files[pl.Bin] == nil {
			t.Errorf("krew %s: bin %s not in the archive (%v)", pl.URI, pl.Bin, err)
		}
	}

	checkChart(t, filepath.Join(out, "csi-fence-0.1.0-rc.1.tgz"), version)
	checkManifests(t, filepath.Join(out, "manifests"), version)
	notes, err := os.ReadFile(filepath.Join(out, NotesFile))
	if err != nil || !strings.HasPrefix(string(notes), "# Release notes for v0.1.0-rc.1\n") {
		t.Errorf("notes %.40q (%v), want the section titled the version", notes, err)
	}

	// Each SBOM lists the binary's modules, as go version -m reads them.
	for _, c := range opts.Cmds {
		bin := filepath.Join(out, "bin", "linux_"+arch, c)
		checkSBOM(t, filepath.Join(out, "sbom", SBOMFile(c, version, "linux", arch)), bin, c, version)
	}

	// The image: tagged, labelled, its SBOM a referrer of its manifest.
	if len(res.Images) != 1 {
		t.Fatalf("%d images, want 1", len(res.Images))
	}
	checkImage(t, res.Images[0].Dir, "example.com/csi-fence/csi-fence-prestop:v0.1.0-rc.1", opts.Commit,
		filepath.Join(out, "sbom", SBOMFile("csi-fence-prestop", version, "linux", arch)))

}

// checkSBOM checks that the SBOM at path names the binary and lists every
// module `go version -m` reads in it, with its version.
func checkSBOM(t *testing.T, path, bin, name, version string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	if bom.Metadata == nil || bom.Metadata.Component == nil || bom.Metadata.Component.Name != name || bom.Metadata.Component.Version != version {
		t.Fatalf("%s: metadata %+v, want the component %s %s", path, bom.Metadata, name, version)
	}
	listed := map[string]string{}
	for _, c := range *bom.Components {
		listed[c.Name] = c.Version
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	modules := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// dep <path> <version> [<sum>], or => <path> <version> <sum>
		// replacing the dep above it.
		if len(f) < 3 || (f[0] != "dep" && f[0] != "=>") {
			continue
		}
		if f[0] == "dep" && len(f) == 3 {
			continue // replaced: the => line follows
		}
		modules++
		if v, ok := listed[f[1]]; !ok || v != f[2] {
			t.Errorf("%s: module %s %s listed as %q (%v)", path, f[1], f[2], v, ok)
		}
	}
	if modules == 0 || len(listed) != modules+1 {
		t.Errorf("%s: %d components, want go version -m's %d modules and stdlib", path, len(listed), modules)
	}
	if _, ok := listed["stdlib"]; !ok {
		t.Errorf("%s: no stdlib", path)
	}
}

// checkImage checks the OCI layout at dir: the image index tagged ref,
// labelled, and each platform's image with the SBOM at sbomPath as a
// referrer.
func checkImage(t *testing.T, dir, ref, commit, sbomPath string) {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var index *v1.Descriptor
	referrers := map[v1.Hash]v1.Descriptor{}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType == types.OCIImageIndex && d.Annotations["org.opencontainers.image.ref.name"] == ref:
			index = &d
		case d.ArtifactType == SBOMMediaType:
			referrers[d.Digest] = d
		default:
			t.Errorf("index.json: unexpected %+v", d)
		}
	}
	if index == nil {
		t.Fatalf("index.json names no image index %s", ref)
	}
	idx, err := top.ImageIndex(index.Digest)
	if err != nil {
		t.Fatal(err)
	}
	platforms, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	sbom, err := os.ReadFile(sbomPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, pd := range platforms.Manifests {
		img, err := idx.Image(pd.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{
			"org.opencontainers.image.version":  strings.TrimPrefix(ref[strings.LastIndex(ref, ":"):], ":"),
			"org.opencontainers.image.revision": commit,
			"org.opencontainers.image.source":   "https://github.com/csi-fence/fence-attacher",
			"org.opencontainers.image.licenses": "Apache-2.0",
		} {
			if cfg.Config.Labels[k] != v {
				t.Errorf("%s: label %s %q, want %q", pd.Platform, k, cfg.Config.Labels[k], v)
			}
		}
		found := 0
		for digest := range referrers {
			raw, err := os.ReadFile(filepath.Join(dir, "blobs", digest.Algorithm, digest.Hex))
			if err != nil {
				t.Fatal(err)
			}
			var m v1.Manifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if m.Subject == nil || m.Subject.Digest != pd.Digest {
				continue
			}
			found++
			if m.ArtifactType != SBOMMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != SBOMMediaType {
				t.Errorf("referrer of %s: %+v, want one SBOM layer", pd.Platform, m)
				continue
			}
			blob, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", m.Layers[0].Digest.Hex))
			if err != nil || string(blob) != string(sbom) {
				t.Errorf("referrer of %s: its SBOM is not %s (%v)", pd.Platform, sbomPath, err)
			}
		}
		if found != 1 {
			t.Errorf("%s: %d SBOM referrers, want 1", pd.Platform, found)
		}
	}
}

// TestRunRefuses: Run refuses a malformed version and a directory that
// does not hold a release, which it would otherwise remove.
func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "precious", "x")
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"version", Options{Version: "0.1.0", Cmds: []string{"a"}, Platforms: []string{"linux/amd64"}, OutDir: t.TempDir()}, "version"},
		{"out dir", Options{Version: "v0.1.0", Cmds: []string{"a"}, Platforms: []string{"linux/amd64"}, OutDir: dir}, "something else"},
		{"plugin", Options{Version: "v0.1.0", Cmds: []string{"a"}, Plugin: "b", Platforms: []string{"linux/amd64"}, OutDir: t.TempDir()}, "plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Run = %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Errorf("a refused directory lost its files: %v", err)
	}
}

// TestPrepareOutDir: an earlier release's directory is emptied, a new or
// empty one made, any other refused.
func TestPrepareOutDir(t *testing.T) {
	earlier := t.TempDir()
	if err := prepareOutDir(earlier); err != nil {
		t.Fatal(err)
	}
	write(t, earlier, "old.tar.gz", "x")
	if err := prepareOutDir(earlier); err != nil {
		t.Fatalf("an earlier release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(earlier, "old.tar.gz")); !os.IsNotExist(err) {
		t.Errorf("the earlier release's file is still there (%v)", err)
	}
	if err := prepareOutDir(filepath.Join(t.TempDir(), "new", "dist")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	other := t.TempDir()
	write(t, other, "precious", "x")
	if err := prepareOutDir(other); err == nil {
		t.Error("a directory of other files: no error")
	}
}
