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

package kubernetes

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// The CRDs are generated from the Go types of pkg/apis and their markers
// (hack/update-codegen.sh; make verify fails on a stale copy), so their
// fields, types and required fields are the types' by construction. What the
// generator cannot know is that a marker's literal is a bound that a writer
// in another package keeps the record to (past it the apiserver refuses the
// write the writer believes fits), or that an enum lists the Go constants the
// code switches on: this test ties them.
func TestGeneratedCRDsMatchWriters(t *testing.T) {
	backends := slices.DeleteFunc(slices.Clone(fencingv1alpha1.Backends), func(b string) bool {
		return b == fencingv1alpha1.BackendStorage // per volume, never the node's fence
	})
	for _, tc := range []struct {
		crd, path, keyword string
		want               interface{}
	}{
		{"crd-fencingrequests.yaml", ".status.volumes", "maxItems", int64(fencerecord.MaxVolumes)},
		{"crd-fencingrequests.yaml", ".status.forceDeletedPods", "maxItems", int64(fencerecord.MaxForceDeletedPods)},
		{"crd-fencingrequests.yaml", ".status.volumes[].fencesInFlight", "maxItems", int64(fencerecord.MaxFencesInFlight)},
		{"crd-fencingrequests.yaml", ".status.volumes[].fenceError", "maxLength", int64(fencerecord.MaxMessageLength)},
		{"crd-fencingrequests.yaml", ".status.volumes[].cleanupError", "maxLength", int64(fencerecord.MaxMessageLength)},
		{"crd-fencingrequests.yaml", ".spec.origin", "enum", []string{string(fencingv1alpha1.OriginManual), string(fencingv1alpha1.OriginAutomatic)}},
		{"crd-fencingrequests.yaml", ".status.phase", "enum", []string{
			string(fencingv1alpha1.PhasePending), string(fencingv1alpha1.PhaseFencing), string(fencingv1alpha1.PhaseFenced),
			string(fencingv1alpha1.PhaseCleaning), string(fencingv1alpha1.PhaseComplete)}},
		{"crd-fencingrequests.yaml", ".status.nodeFence.backend", "enum", backends},
		// The apiserver is the first gate on which program the sidecar may
		// run: only fence_*, anchored at both ends.
		{"crd-fenceagentconfigs.yaml", ".spec.agent", "pattern", "^fence_[a-z0-9_]+$"},
	} {
		t.Run(tc.crd+tc.path+"."+tc.keyword, func(t *testing.T) {
			s, err := schemaAt("base/"+tc.crd, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			got := s[tc.keyword]
			if want, ok := tc.want.([]string); ok {
				var enum []string
				for _, v := range s[tc.keyword].([]interface{}) {
					enum = append(enum, v.(string))
				}
				slices.Sort(enum)
				got, tc.want = enum, slices.Sorted(slices.Values(want))
			}
			if n, ok := got.(float64); ok { // a JSON number
				got = int64(n)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s %s: %s is %v, want %v (the marker on the Go type: change both)", tc.crd, tc.path, tc.keyword, got, tc.want)
			}
		})
	}
}

// schemaAt reads the one version's schema of the CRD at file and returns
// the node at path: .a.b for properties, [] for an array's items.
func schemaAt(file, path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return nil, err
	}
	if len(crd.Spec.Versions) != 1 {
		return nil, fmt.Errorf("%s: %d versions, want 1", file, len(crd.Spec.Versions))
	}
	s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, name := range strings.Split(strings.ReplaceAll(path, "[]", ".[]"), ".")[1:] {
		props, _ := s["properties"].(map[string]interface{})
		next, _ := props[name].(map[string]interface{})
		if name == "[]" {
			next, _ = s["items"].(map[string]interface{})
		}
		if next == nil {
			return nil, fmt.Errorf("%s: no %s in the schema (at %q)", file, path, name)
		}
		s = next
	}
	return s, nil
}
