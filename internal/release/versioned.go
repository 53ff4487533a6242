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
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

var (
	chartVersionLine    = regexp.MustCompile(`(?m)^version: .*$`)
	chartAppVersionLine = regexp.MustCompile(`(?m)^appVersion: .*$`)
	// The image tags under values.yaml's image:, empty in the tree (the
	// chart's appVersion then).
	valuesEmptyTag = regexp.MustCompile(`(?m)^(    tag: )""$`)
	// The product's images in the kustomize manifests, and the tags the
	// attacher-image component gives them.
	manifestImage = regexp.MustCompile(`(ghcr\.io/csi-fence/[a-z0-9-]+):canary\b`)
	manifestTag   = regexp.MustCompile(`(?m)^(\s*newTag: )canary$`)
)

// PackageChart packages the Helm chart at chartDir as Helm does (`helm
// package`: a gzipped tar of <name>/...) into outDir at version: the
// packaged Chart.yaml says version (without its v) and appVersion, and
// values.yaml tags every image with version. The chart in the tree is not
// changed. It returns the archive's file name, <name>-<version>.tgz.
func PackageChart(chartDir, outDir, version string, mtime time.Time) (string, error) {
	name := filepath.Base(chartDir)
	var files []archiveFile
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(chartDir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch rel {
		case "Chart.yaml":
			if data, err = versionChart(data, version); err != nil {
				return err
			}
		case "values.yaml":
			if data, err = versionValues(data, version); err != nil {
				return err
			}
		}
		files = append(files, archiveFile{Name: name + "/" + filepath.ToSlash(rel), Mode: 0o644, Data: data})
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.SortFunc(files, func(a, b archiveFile) int { return strings.Compare(a.Name, b.Name) })
	file := name + "-" + ChartVersion(version) + ".tgz"
	return file, writeTarGz(filepath.Join(outDir, file), files, mtime)
}

func versionChart(data []byte, version string) ([]byte, error) {
	if !chartVersionLine.Match(data) || !chartAppVersionLine.Match(data) {
		return nil, fmt.Errorf("Chart.yaml: no version or appVersion line")
	}
	data = chartVersionLine.ReplaceAll(data, []byte("version: "+ChartVersion(version)))
	data = chartAppVersionLine.ReplaceAll(data, []byte("appVersion: "+version))
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if meta.Version != ChartVersion(version) || meta.AppVersion != version {
		return nil, fmt.Errorf("Chart.yaml: versioned as %s and %s, want %s and %s", meta.Version, meta.AppVersion, ChartVersion(version), version)
	}
	return data, nil
}

// versionValues sets the tag of every image of values.yaml to version,
// refusing a values.yaml where one would keep another.
func versionValues(data []byte, version string) ([]byte, error) {
	data = valuesEmptyTag.ReplaceAll(data, []byte("${1}"+version))
	tags, err := ValuesImageTags(data)
	if err != nil {
		return nil, err
	}
	if len(tags) == 0 {
		return nil, fmt.Errorf("values.yaml: no image")
	}
	for img, tag := range tags {
		if tag != version {
			return nil, fmt.Errorf("values.yaml: image.%s.tag is %q, want %s", img, tag, version)
		}
	}
	return data, nil
}

// ValuesImageTags are the tags of the images of a chart's values.yaml
// (image.<name>.tag of each image.<name> with a repository).
func ValuesImageTags(values []byte) (map[string]string, error) {
	var v struct {
		Image map[string]any `json:"image"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	tags := map[string]string{}
	for name, img := range v.Image {
		m, ok := img.(map[string]any)
		if !ok || m["repository"] == nil {
			continue
		}
		tag, _ := m["tag"].(string)
		tags[name] = tag
	}
	return tags, nil
}

// PinManifests copies the kustomize manifests under srcDir (every file but
// Go's and testdata) to dstDir with the product's images tagged version
// instead of canary, and refuses to leave one canary behind.
func PinManifests(srcDir, dstDir, version string) error {
	return filepath.WalkDir(srcDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(srcDir, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		data = manifestImage.ReplaceAll(data, []byte("${1}:"+version))
		data = manifestTag.ReplaceAll(data, []byte("${1}"+version))
		if i := strings.Index(string(data), ":canary"); i >= 0 || manifestTag.Match(data) {
			return fmt.Errorf("%s: an image left at canary", rel)
		}
		dst := filepath.Join(dstDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
}

// ReleaseNotes are the notes of version from the CHANGELOG of its minor
// release, changelogDir/CHANGELOG-<major>.<minor>.md: its section, from
// "# Release notes for <version>" (the release's own version, or for a
// pre-release the version it precedes) to the next such heading, titled
// with version and without "(unreleased)".
func ReleaseNotes(changelogDir, version string) ([]byte, error) {
	base, _, _ := strings.Cut(version, "-")
	mm := strings.TrimPrefix(base[:strings.LastIndex(base, ".")], "v")
	path := filepath.Join(changelogDir, "CHANGELOG-"+mm+".md")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	const heading = "# Release notes for "
	lines := strings.SplitAfter(string(data), "\n")
	start := -1
	for i, l := range lines {
		title, ok := strings.CutPrefix(strings.TrimSpace(l), heading)
		if !ok {
			continue
		}
		if start >= 0 {
			lines = lines[:i]
			break
		}
		title = strings.TrimSpace(strings.TrimSuffix(title, "(unreleased)"))
		if title == version || title == base {
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%s: no section %q for %s", path, heading+base, version)
	}
	lines = lines[start:]
	lines[0] = heading + version + "\n"
	return []byte(strings.Join(lines, "")), nil
}
