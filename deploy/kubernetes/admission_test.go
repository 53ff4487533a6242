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
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
)

// The node agents' admission policy lets them change only the cleanup
// fields of their record's entries, by naming every other field and
// requiring it unchanged. A field added to the status, or to an entry,
// that the rule does not name would be writable by any node agent: each
// must be named, but the two cleanup fields.
func TestNodeAgentPolicyNamesEveryFieldButTheCleanup(t *testing.T) {
	b, err := os.ReadFile("base/admission-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy := string(b)
	// Each field is named on both sides, the old object's and the new:
	// the status fields by their paths, the entries' fields twice (one
	// list of each entry per side).
	check := func(typ reflect.Type, times int, names func(field string) []string, writable ...string) {
		named := func(expr string) bool {
			return len(regexp.MustCompile(regexp.QuoteMeta(expr)+`\b`).FindAllString(policy, -1)) >= times
		}
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "" || slices.Contains(writable, name) {
				continue
			}
			for _, expr := range names(name) {
				if !named(expr) {
					t.Errorf("the node agents' policy does not keep %s unchanged (%s)", name, expr)
				}
			}
		}
	}
	check(reflect.TypeOf(fencingv1alpha1.FencingRequestStatus{}), 1, func(f string) []string {
		return []string{"oldObject.?status.?" + f, " object.?status.?" + f}
	}, "volumes")
	check(reflect.TypeOf(fencingv1alpha1.FencedVolume{}), 2, func(f string) []string {
		if f == "driver" || f == "volumeHandle" {
			return []string{"v." + f}
		}
		return []string{"v.?" + f}
	}, "cleanedTime", "cleanupError")
}
