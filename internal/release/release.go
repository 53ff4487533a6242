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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
)

// Options say what Run releases.
type Options struct {
	// RepoRoot is the repository's root: cmd/, deploy/, CHANGELOG/, LICENSE.
	RepoRoot string
	// Version is the release (CheckVersion), Commit the git commit it is
	// built from: both are stamped into every binary (pkg/version) and the
	// images' labels.
	Version string
	Commit  string
	// Cmds are the commands of cmd/ released as binaries for every
	// platform of Platforms (os/arch), ImageCmds those also released as
	// images for them.
	Cmds      []string
	ImageCmds []string
	Platforms []string
	// Plugin is the kubectl plugin's command, released for PluginPlatforms
	// too, with a krew manifest.
	Plugin          string
	PluginPlatforms []string
	// Registry is the images' registry and path (<Registry>/<cmd>:<Version>).
	Registry string
	// DownloadURL is where the archives are published, the krew manifest's
	// URIs' base; the GitHub release of Version when empty.
	DownloadURL string
	// OutDir receives the release (see Run). It must not exist, be empty, or
	// hold an earlier release, which Run replaces.
	OutDir string
	// Created is every timestamp of the archives and images, the Unix epoch
	// when zero.
	Created time.Time
}

// Result is what Run made.
type Result struct {
	// Files are the release's files, relative to OutDir: what a release
	// publishes, and SHA256SUMS lists.
	Files  []string
	Images []imagebuild.Built
}

// The marker of a directory Run wrote, which it may replace.
const marker = ".fence-release"

// The paths of the sources of a release, relative to RepoRoot.
const (
	ChartDir     = "deploy/helm/csi-fence"
	ManifestsDir = "deploy/kubernetes"
	KrewTemplate = "deploy/krew/fence.yaml"
	ChangelogDir = "CHANGELOG"
)

// The files of a release, in OutDir.
const (
	NotesFile        = "RELEASE_NOTES.md"
	KrewManifestFile = "fence.yaml"
)

// Archive is the name of the archive of cmd for goos/goarch.
func Archive(cmd, version, goos, goarch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", cmd, version, goos, goarch)
}

// SBOMFile is the name of the SBOM of cmd's binary for goos/goarch, under
// OutDir/sbom.
func SBOMFile(cmd, version, goos, goarch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.cdx.json", cmd, version, goos, goarch)
}

// Run releases opts.Version into opts.OutDir:
//
//	bin/<os>_<arch>/<cmd>[.exe]            the binaries, version stamped
//	<cmd>_<version>_<os>_<arch>.tar.gz     each binary with LICENSE
//	sbom/<cmd>_<version>_<os>_<arch>.cdx.json  each binary's CycloneDX SBOM
//	images/<cmd>/                          OCI layout: the image index
//	                                       <registry>/<cmd>:<version>, and
//	                                       each platform's SBOM as a referrer
//	<chart>-<version without v>.tgz        the Helm chart at the version
//	manifests/                             the kustomize manifests, images
//	                                       pinned to the version
//	csi-fence-manifests_<version>.tar.gz   the same as an archive
//	fence.yaml                             the plugin's krew manifest
//	RELEASE_NOTES.md                       the CHANGELOG's section
//	SHA256SUMS                             the SHA-256 of every file above
//	                                       but bin/, manifests/ and images/
//
// It checks opts.Version but not the work tree (CheckTree).
func Run(ctx context.Context, opts Options) (*Result, error) {
	if err := CheckVersion(opts.Version); err != nil {
		return nil, err
	}
	if len(opts.Cmds) == 0 || len(opts.Platforms) == 0 || opts.OutDir == "" {
		return nil, errors.New("release: commands, platforms and an output directory are required")
	}
	if opts.Plugin != "" && !slices.Contains(opts.Cmds, opts.Plugin) {
		return nil, fmt.Errorf("release: plugin %s is not among the commands", opts.Plugin)
	}
	for _, c := range opts.ImageCmds {
		if !slices.Contains(opts.Cmds, c) {
			return nil, fmt.Errorf("release: image command %s is not among the commands", c)
		}
	}
	if opts.Created.IsZero() {
		opts.Created = imagebuild.Epoch
	}
	if opts.DownloadURL == "" {
		opts.DownloadURL = "https://github.com/csi-fence/fence-attacher/releases/download/" + opts.Version
	}
	if err := prepareOutDir(opts.OutDir); err != nil {
		return nil, err
	}
	license, err := os.ReadFile(filepath.Join(opts.RepoRoot, "LICENSE"))
	if err != nil {
		return nil, err
	}
	res := &Result{}
	ldflags := imagebuild.ReleaseLDFlags(opts.Version, opts.Commit)

	// Binaries, archives and SBOMs.
	type build struct {
		goos, goarch string
		cmds         []string
	}
	var builds []build
	for _, p := range opts.Platforms {
		goos, goarch, err := splitPlatform(p)
		if err != nil {
			return nil, err
		}
		builds = append(builds, build{goos, goarch, opts.Cmds})
	}
	for _, p := range opts.PluginPlatforms {
		if slices.Contains(opts.Platforms, p) {
			continue
		}
		goos, goarch, err := splitPlatform(p)
		if err != nil {
			return nil, err
		}
		builds = append(builds, build{goos, goarch, []string{opts.Plugin}})
	}
	var krew []KrewPlatform
	for _, b := range builds {
		binDir := filepath.Join(opts.OutDir, "bin", b.goos+"_"+b.goarch)
		var pkgs []string
		for _, c := range b.cmds {
			pkgs = append(pkgs, "./cmd/"+c)
		}
		if err := imagebuild.GoBuild(ctx, opts.RepoRoot, binDir, b.goos, b.goarch, ldflags, pkgs...); err != nil {
			return nil, err
		}
		for _, c := range b.cmds {
			bin := c
			if b.goos == "windows" {
				bin += ".exe"
			}
			data, err := os.ReadFile(filepath.Join(binDir, bin))
			if err != nil {
				return nil, err
			}
			archive := Archive(c, opts.Version, b.goos, b.goarch)
			if err := writeTarGz(filepath.Join(opts.OutDir, archive), []archiveFile{
				{Name: bin, Mode: 0o755, Data: data},
				{Name: "LICENSE", Mode: 0o644, Data: license},
			}, opts.Created); err != nil {
				return nil, err
			}
			sbom, err := SBOM(filepath.Join(binDir, bin), c, opts.Version, time.Time{})
			if err != nil {
				return nil, err
			}
			sbomFile := "sbom/" + SBOMFile(c, opts.Version, b.goos, b.goarch)
			if err := writeFile(filepath.Join(opts.OutDir, sbomFile), sbom); err != nil {
				return nil, err
			}
			res.Files = append(res.Files, archive, sbomFile)
			if c == opts.Plugin && (len(opts.PluginPlatforms) == 0 || slices.Contains(opts.PluginPlatforms, b.goos+"/"+b.goarch)) {
				sum, err := fileSHA256(filepath.Join(opts.OutDir, archive))
				if err != nil {
					return nil, err
				}
				krew = append(krew, KrewPlatform{OS: b.goos, Arch: b.goarch, Bin: bin,
					URI: strings.TrimSuffix(opts.DownloadURL, "/") + "/" + archive, SHA256: sum})
			}
		}
	}

	// Images, each platform's with its SBOM.
	if len(opts.ImageCmds) > 0 {
		res.Images, err = imagebuild.Release(ctx, imagebuild.ReleaseOptions{
			RepoRoot: opts.RepoRoot, Cmds: opts.ImageCmds, Platforms: opts.Platforms, Registry: opts.Registry,
			Version: opts.Version, Commit: opts.Commit, OutDir: filepath.Join(opts.OutDir, "images"),
			Binaries: filepath.Join(opts.OutDir, "bin"), Created: opts.Created,
		})
		if err != nil {
			return nil, err
		}
		for _, b := range res.Images {
			if err := attachSBOMs(b, opts.OutDir, opts.Version); err != nil {
				return nil, err
			}
		}
	}

	// The chart, the manifests, the krew manifest, the notes.
	chart, err := PackageChart(filepath.Join(opts.RepoRoot, ChartDir), opts.OutDir, opts.Version, opts.Created)
	if err != nil {
		return nil, err
	}
	res.Files = append(res.Files, chart)
	manifests, err := packManifests(opts)
	if err != nil {
		return nil, err
	}
	res.Files = append(res.Files, manifests)
	if opts.Plugin != "" {
		data, err := KrewManifest(filepath.Join(opts.RepoRoot, KrewTemplate), opts.Version, krew)
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(opts.OutDir, KrewManifestFile), data); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, KrewManifestFile)
	}
	notes, err := ReleaseNotes(filepath.Join(opts.RepoRoot, ChangelogDir), opts.Version)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(opts.OutDir, NotesFile), notes); err != nil {
		return nil, err
	}
	res.Files = append(res.Files, NotesFile)
	if err := writeChecksums(opts.OutDir, res.Files); err != nil {
		return nil, err
	}
	res.Files = append(res.Files, ChecksumsFile)
	slices.Sort(res.Files)
	return res, nil
}

// attachSBOMs attaches to each platform's image of b the SBOM of the
// binary it holds.
func attachSBOMs(b imagebuild.Built, outDir, version string) error {
	im, err := b.Index.IndexManifest()
	if err != nil {
		return err
	}
	cmd := b.Ref[strings.LastIndex(b.Ref, "/")+1 : strings.LastIndex(b.Ref, ":")]
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			continue
		}
		name := SBOMFile(cmd, version, desc.Platform.OS, desc.Platform.Architecture)
		sbom, err := os.ReadFile(filepath.Join(outDir, "sbom", name))
		if err != nil {
			return err
		}
		if _, err := AttachSBOM(b.Dir, desc, sbom, name); err != nil {
			return fmt.Errorf("%s: %w", b.Dir, err)
		}
	}
	return nil
}

// packManifests pins the manifests into OutDir/manifests and archives them.
func packManifests(opts Options) (string, error) {
	dir := filepath.Join(opts.OutDir, "manifests")
	if err := PinManifests(filepath.Join(opts.RepoRoot, ManifestsDir), dir, opts.Version); err != nil {
		return "", err
	}
	var files []archiveFile
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, archiveFile{Name: "csi-fence-manifests/" + filepath.ToSlash(rel), Mode: 0o644, Data: data})
		return nil
	})
	if err != nil {
		return "", err
	}
	name := "csi-fence-manifests_" + opts.Version + ".tar.gz"
	return name, writeTarGz(filepath.Join(opts.OutDir, name), files, opts.Created)
}

// prepareOutDir empties dir if Run wrote it (or it is empty) and refuses
// any other directory, so that a mistyped DIST_DIR removes nothing.
func prepareOutDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
			return fmt.Errorf("%s holds files of something else than a release: remove it or choose another directory", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, marker), nil, 0o644)
}

func splitPlatform(p string) (string, string, error) {
	goos, goarch, ok := strings.Cut(p, "/")
	if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
		return "", "", fmt.Errorf("platform %q: want os/arch", p)
	}
	return goos, goarch, nil
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
