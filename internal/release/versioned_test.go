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
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

func TestReleaseNotes(t *testing.T) {
	const changelog = `# Release notes for v0.2.1 (unreleased)

Patch.

## Changes by Kind
- fix
# Release notes for v0.2.0

First of 0.2.
`
	for _, tc := range []struct {
		version, want, wantErr string
	}{
		{version: "v0.2.1", want: "# Release notes for v0.2.1\n\nPatch.\n\n## Changes by Kind\n- fix\n"},
		{version: "v0.2.0", want: "# Release notes for v0.2.0\n\nFirst of 0.2.\n"},
		{version: "v0.2.1-rc.1", want: "# Release notes for v0.2.1-rc.1\n\nPatch.\n\n## Changes by Kind\n- fix\n"},
		{version: "v0.2.2", wantErr: "no section"},
		{version: "v0.3.0", wantErr: "CHANGELOG-0.3.md"},
	} {
		t.Run(tc.version, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "CHANGELOG-0.2.md", changelog)
			got, err := ReleaseNotes(dir, tc.version)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReleaseNotes = %q, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("ReleaseNotes:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestReleaseNotesOfTheTree: the tree's CHANGELOG has the section of the
// release pkg/version.Dev precedes.
func TestReleaseNotesOfTheTree(t *testing.T) {
	notes, err := ReleaseNotes(filepath.Join(repoRoot, ChangelogDir), "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(notes), "\n"); first != "# Release notes for v0.1.0" || strings.Contains(string(notes), "(unreleased)") {
		t.Errorf("notes begin %q, want the version without (unreleased)", first)
	}
	if !strings.Contains(string(notes), "make release VERSION=vX.Y.Z") {
		t.Error("the notes miss the release flow's own entry")
	}
}

// TestPackageChart packages the tree's chart: the archive's Chart.yaml
// says the version and every image of values.yaml has it as its tag; the
// other files are the tree's.
func TestPackageChart(t *testing.T) {
	out := t.TempDir()
	file, err := PackageChart(filepath.Join(repoRoot, ChartDir), out, "v1.2.3", imagebuildEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if file != "csi-fence-1.2.3.tgz" {
		t.Errorf("file %s, want csi-fence-1.2.3.tgz", file)
	}
	checkChart(t, filepath.Join(out, file), "v1.2.3")
}

func checkChart(t *testing.T, path, version string) {
	t.Helper()
	files, err := readTarGz(path)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal(files["csi-fence/Chart.yaml"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != "csi-fence" || meta.Version != strings.TrimPrefix(version, "v") || meta.AppVersion != version {
		t.Errorf("packaged Chart.yaml: %+v, want csi-fence at %s", meta, version)
	}
	tags, err := ValuesImageTags(files["csi-fence/values.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) < 3 {
		t.Errorf("values.yaml images %v, want the attacher, webhook and helper", tags)
	}
	for img, tag := range tags {
		if tag != version {
			t.Errorf("image.%s.tag %q, want %s", img, tag, version)
		}
	}
	n := 0
	err = filepath.WalkDir(filepath.Join(repoRoot, ChartDir), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(repoRoot, ChartDir), p)
		n++
		if _, ok := files["csi-fence/"+rel]; !ok {
			t.Errorf("the chart's %s is not packaged", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != n {
		t.Errorf("packaged %d files, the chart has %d", len(files), n)
	}
}

func TestVersionValuesRefusesAFixedTag(t *testing.T) {
	values := "image:\n  attacher:\n    repository: r/a\n    tag: \"\"\n  webhook:\n    repository: r/w\n    tag: canary\n  pullPolicy: \"\"\n"
	if _, err := versionValues([]byte(values), "v1.2.3"); err == nil || !strings.Contains(err.Error(), "image.webhook.tag") {
		t.Errorf("versionValues = %v, want an error naming image.webhook.tag", err)
	}
}

// TestPinManifests pins the tree's manifests: every image of the product
// has the version, none is left at canary.
func TestPinManifests(t *testing.T) {
	out := t.TempDir()
	if err := PinManifests(filepath.Join(repoRoot, ManifestsDir), out, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	checkManifests(t, out, "v1.2.3")
}

var productImage = regexp.MustCompile(`ghcr\.io/csi-fence/[a-z0-9-]+(:[^\s"]*)?`)

func checkManifests(t *testing.T, dir, version string) {
	t.Helper()
	pinned, tags := 0, 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(p, ".go") || strings.Contains(p, "testdata") {
			t.Errorf("%s copied", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range productImage.FindAllStringSubmatch(string(data), -1) {
			if m[1] != "" && m[1] != ":"+version {
				t.Errorf("%s: image %s, want the tag %s", p, m[0], version)
			}
			if m[1] != "" {
				pinned++
			}
		}
		for _, m := range regexp.MustCompile(`newTag: (\S+)`).FindAllStringSubmatch(string(data), -1) {
			if m[1] != version {
				t.Errorf("%s: newTag %s, want %s", p, m[1], version)
			}
			tags++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pinned == 0 || tags == 0 {
		t.Errorf("%d images and %d newTags pinned, want some of each", pinned, tags)
	}
	for _, f := range []string{"sidecar/kustomization.yaml", "base/kustomization.yaml", "monitoring/grafana-dashboard.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("manifest %s: %v", f, err)
		}
	}
}

func TestKrewManifest(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	var platforms []KrewPlatform
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"} {
		goos, arch, _ := strings.Cut(p, "/")
		bin := "kubectl-fence"
		if goos == "windows" {
			bin += ".exe"
		}
		platforms = append(platforms, KrewPlatform{OS: goos, Arch: arch, Bin: bin, SHA256: sum,
			URI: "https://example.com/" + Archive("kubectl-fence", "v1.2.3", goos, arch)})
	}
	data, err := KrewManifest(filepath.Join(repoRoot, KrewTemplate), "v1.2.3", platforms)
	if err != nil {
		t.Fatal(err)
	}
	p, err := CheckKrewManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if p.Metadata.Name != "fence" || p.Spec.Version != "v1.2.3" || len(p.Spec.Platforms) != len(platforms) {
		t.Errorf("manifest: %s %s with %d platforms, want fence v1.2.3 with %d", p.Metadata.Name, p.Spec.Version, len(p.Spec.Platforms), len(platforms))
	}
	for i, pl := range p.Spec.Platforms {
		want := platforms[i]
		if pl.Selector.MatchLabels["os"] != want.OS || pl.Selector.MatchLabels["arch"] != want.Arch || pl.URI != want.URI || pl.SHA256 != want.SHA256 || pl.Bin != want.Bin {
			t.Errorf("platform %d: %+v, want %+v", i, pl, want)
		}
	}
}

// TestCheckKrewManifest: what krew's validation refuses, CheckKrewManifest
// refuses too.
func TestCheckKrewManifest(t *testing.T) {
	const good = `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: fence
spec:
  version: v1.2.3
  shortDescription: s
  platforms:
  - selector:
      matchLabels: {os: linux, arch: amd64}
    uri: https://example.com/a.tar.gz
    sha256: ` + "abababababababababababababababababababababababababababababababab" + `
    bin: kubectl-fence
    files:
    - {from: kubectl-fence, to: .}
`
	for _, tc := range []struct {
		name, from, to, wantErr string
	}{
		{name: "good"},
		{name: "apiVersion", from: "v1alpha2", to: "v1alpha1", wantErr: "apiVersion"},
		{name: "kind", from: "kind: Plugin", to: "kind: Plugins", wantErr: "Plugin"},
		{name: "version", from: "version: v1.2.3", to: "version: 1.2.3", wantErr: "version"},
		{name: "no selector", from: "      matchLabels: {os: linux, arch: amd64}", to: "      matchLabels: {os: linux}", wantErr: "selector"},
		{name: "http", from: "https://", to: "http://", wantErr: "uri"},
		{name: "sha256", from: "sha256: ab", to: "sha256: zz", wantErr: "sha256"},
		{name: "bin not installed", from: "from: kubectl-fence", to: "from: other", wantErr: "not among its files"},
		{name: "unknown field", from: "    bin:", to: "    binary: x\n    bin:", wantErr: "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(good, tc.from, tc.to, 1)
			_, err := CheckKrewManifest([]byte(data))
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("CheckKrewManifest = %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

var imagebuildEpoch = imagebuild.Epoch
