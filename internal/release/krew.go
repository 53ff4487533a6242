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
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// KrewPlatform is one platform of the krew manifest: an archive holding
// the plugin's binary Bin and LICENSE.
type KrewPlatform struct {
	OS, Arch string
	URI      string
	SHA256   string
	Bin      string
}

// KrewManifest fills the krew manifest template at path (deploy/krew) for
// version and platforms, and checks the result (CheckKrewManifest).
func KrewManifest(path, version string, platforms []KrewPlatform) ([]byte, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New(path).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, struct {
		Version   string
		Platforms []KrewPlatform
	}{version, platforms}); err != nil {
		return nil, err
	}
	if _, err := CheckKrewManifest(buf.Bytes()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return buf.Bytes(), nil
}

// KrewPlugin is krew's Plugin (krew.googlecontainertools.github.com/
// v1alpha2, sigs.k8s.io/krew/pkg/index), the fields a manifest of the
// index may have; CheckKrewManifest refuses any other.
type KrewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
		} `json:"platforms"`
	} `json:"spec"`
}

var (
	krewName   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	krewSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// CheckKrewManifest parses a krew manifest and checks it as krew's
// validation does (krew's internal/index/validation): the apiVersion and
// kind, a plugin name, a semantic version, a short description, and each
// platform with an os/arch selector, an https URI, a SHA-256 and a bin
// among the files it installs, no two platforms for one os/arch.
func CheckKrewManifest(data []byte) (*KrewPlugin, error) {
	var p KrewPlugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		return nil, fmt.Errorf("krew manifest: apiVersion %s, kind %s, want krew.googlecontainertools.github.com/v1alpha2 Plugin", p.APIVersion, p.Kind)
	}
	if !krewName.MatchString(p.Metadata.Name) {
		return nil, fmt.Errorf("krew manifest: plugin name %q", p.Metadata.Name)
	}
	if err := CheckVersion(p.Spec.Version); err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	if p.Spec.ShortDescription == "" || len(p.Spec.Platforms) == 0 {
		return nil, fmt.Errorf("krew manifest: no shortDescription or no platforms")
	}
	seen := map[string]bool{}
	for i, pl := range p.Spec.Platforms {
		goos, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		if goos == "" || arch == "" || len(pl.Selector.MatchLabels) != 2 {
			return nil, fmt.Errorf("krew manifest: platform %d: selector %v, want matchLabels os and arch", i, pl.Selector.MatchLabels)
		}
		if seen[goos+"/"+arch] {
			return nil, fmt.Errorf("krew manifest: platform %s/%s twice", goos, arch)
		}
		seen[goos+"/"+arch] = true
		if !strings.HasPrefix(pl.URI, "https://") || !krewSHA256.MatchString(pl.SHA256) || pl.Bin == "" {
			return nil, fmt.Errorf("krew manifest: platform %s/%s: uri %q, sha256 %q, bin %q", goos, arch, pl.URI, pl.SHA256, pl.Bin)
		}
		installed := false
		for _, f := range pl.Files {
			installed = installed || f.From == pl.Bin
		}
		if !installed {
			return nil, fmt.Errorf("krew manifest: platform %s/%s: bin %s is not among its files", goos, arch, pl.Bin)
		}
	}
	return &p, nil
}
