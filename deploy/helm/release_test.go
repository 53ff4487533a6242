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

package helm

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/csi-fence/fence-attacher/internal/release"
)

// TestReleasedChart loads with Helm the chart `make release` packages
// (internal/release.PackageChart) and renders it: the chart says the
// release, and every image of the product it renders, the preStop
// webhook's helper image included, is tagged with it.
func TestReleasedChart(t *testing.T) {
	const version = "v0.1.0-rc.1"
	out := t.TempDir()
	file, err := release.PackageChart(chartDir, out, version, imagebuild.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	ch := loadChart(t, filepath.Join(out, file))
	if ch.Metadata.Version != "0.1.0-rc.1" || ch.Metadata.AppVersion != version {
		t.Errorf("packaged chart: version %s, appVersion %s, want 0.1.0-rc.1 and %s", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	_, manifest, err := render(ch, "default", values("features.prestopWebhook", true))
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`ghcr\.io/csi-fence/[a-z0-9-]+:(\S+)`).FindAllStringSubmatch(manifest, -1)
	if len(images) < 2 {
		t.Fatalf("%d images of the product rendered, want the webhook's and its helper's:\n%s", len(images), manifest)
	}
	for _, m := range images {
		if m[1] != version {
			t.Errorf("rendered image %s, want the tag %s", m[0], version)
		}
	}
}
