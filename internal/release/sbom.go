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
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOMMediaType is the media type of the SBOMs, a CycloneDX JSON document,
// and the artifactType of the OCI manifest that attaches one to an image.
const SBOMMediaType = "application/vnd.cyclonedx+json"

// SBOM is the CycloneDX software bill of materials (JSON, spec 1.6) of the
// Go binary at path, named name at version: the modules the Go toolchain
// recorded in it (the build info `go version -m` prints), each with its
// version, package URL and go.sum hash, the Go standard library it was
// built with, and the build's settings. created, if not zero, is its
// timestamp; none otherwise, so that the same binary gives the same SBOM.
func SBOM(path, name, version string, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("build info of %s: %w", path, err)
	}
	return sbomOf(info, name, version, created)
}

func sbomOf(info *debug.BuildInfo, name, version string, created time.Time) ([]byte, error) {
	bom := cdx.NewBOM()
	var settings []cdx.Property
	for _, s := range info.Settings {
		settings = append(settings, cdx.Property{Name: "cdx:gomod:build:" + s.Key, Value: s.Value})
	}
	root := cdx.Component{
		BOMRef:     "root",
		Type:       cdx.ComponentTypeApplication,
		Name:       name,
		Version:    version,
		PackageURL: purl(info.Main.Path, version) + "#" + strings.TrimPrefix(strings.TrimPrefix(info.Path, info.Main.Path), "/"),
		Licenses:   &cdx.Licenses{{License: &cdx.License{ID: "Apache-2.0"}}},
		Properties: &settings,
	}
	bom.Metadata = &cdx.Metadata{
		Component: &root,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "fence-attacher hack/tools/release",
		}}},
	}
	if !created.IsZero() {
		bom.Metadata.Timestamp = created.UTC().Format(time.RFC3339)
	}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	components := []cdx.Component{{
		BOMRef:     purl("stdlib", goVersion),
		Type:       cdx.ComponentTypeLibrary,
		Name:       "stdlib",
		Version:    info.GoVersion,
		PackageURL: purl("stdlib", goVersion),
	}}
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		c := cdx.Component{
			BOMRef:     purl(m.Path, m.Version),
			Type:       cdx.ComponentTypeLibrary,
			Name:       m.Path,
			Version:    m.Version,
			PackageURL: purl(m.Path, m.Version),
		}
		if h, ok := sumHash(m.Sum); ok {
			c.Hashes = &[]cdx.Hash{h}
		}
		if d.Replace != nil {
			c.Properties = &[]cdx.Property{{Name: "cdx:gomod:replaces", Value: d.Path + "@" + d.Version}}
		}
		components = append(components, c)
	}
	bom.Components = &components
	refs := make([]string, len(components))
	for i, c := range components {
		refs[i] = c.BOMRef
	}
	bom.Dependencies = &[]cdx.Dependency{{Ref: root.BOMRef, Dependencies: &refs}}

	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// purl is the package URL of a Go module version (the purl spec's golang
// type; "+" of +incompatible percent-encoded).
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + strings.ReplaceAll(version, "+", "%2B")
}

// sumHash is the SHA-256 of a go.sum hash ("h1:" and base64), as
// cyclonedx-gomod records it.
func sumHash(sum string) (cdx.Hash, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return cdx.Hash{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != sha256.Size {
		return cdx.Hash{}, false
	}
	return cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(raw)}, true
}

// emptyConfig is OCI's empty descriptor's content, the config of an
// artifact manifest.
var emptyConfig = []byte("{}")

// AttachSBOM adds sbom to the OCI layout at dir as a referrer of subject
// (one platform's image manifest in it): an OCI 1.1 artifact manifest of
// artifactType SBOMMediaType whose subject is the image and whose one
// layer is the SBOM, titled title. Registries and tools that follow the
// referrers API (oras discover, cosign tree) find it from the image; the
// layout's index.json lists it beside the image index.
func AttachSBOM(dir string, subject v1.Descriptor, sbom []byte, title string) (v1.Descriptor, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return v1.Descriptor{}, err
	}
	cfg, err := writeBlob(p, emptyConfig)
	if err != nil {
		return v1.Descriptor{}, err
	}
	cfg.MediaType, cfg.Data = types.MediaType("application/vnd.oci.empty.v1+json"), emptyConfig
	layer, err := writeBlob(p, sbom)
	if err != nil {
		return v1.Descriptor{}, err
	}
	layer.MediaType = SBOMMediaType
	layer.Annotations = map[string]string{"org.opencontainers.image.title": title}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMMediaType,
		Config:        cfg,
		Layers:        []v1.Descriptor{layer},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc, err := writeBlob(p, raw)
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc.MediaType, desc.ArtifactType = types.OCIManifestSchema1, SBOMMediaType
	return desc, p.AppendDescriptor(desc)
}

func writeBlob(p layout.Path, data []byte) (v1.Descriptor, error) {
	h, size, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(data))); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{Digest: h, Size: size}, nil
}
