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
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite generated files (base/rbac-controller.yaml)")

// allFeaturesRBAC are the controller role's RBAC files, one per feature,
// that base/rbac-controller.yaml concatenates.
var allFeaturesRBAC = []string{"base/rbac-attacher.yaml", "failover/rbac.yaml", "power-fencing/rbac.yaml"}

const allFeaturesHeader = `# GENERATED from base/rbac-attacher.yaml, failover/rbac.yaml and
# power-fencing/rbac.yaml by: go test ./deploy/kubernetes -run TestAllFeaturesRBAC -update
# Every feature's RBAC of the controller role in one file, for
# kubectl apply -f and for the end-to-end tests, which run every feature.
# Kustomize users take base/ (the fenced detach) and add the components
# failover/ and power-fencing/ only for the features they enable.
`

// base/rbac-controller.yaml is exactly the per-feature files: a rule added
// to one of them and not regenerated here fails.
func TestAllFeaturesRBAC(t *testing.T) {
	var b strings.Builder
	b.WriteString(allFeaturesHeader)
	for i, f := range allFeaturesRBAC {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(content)
	}
	const path = "base/rbac-controller.yaml"
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != b.String() {
		t.Errorf("%s is not the concatenation of %v: run go test ./deploy/kubernetes -run TestAllFeaturesRBAC -update", path, allFeaturesRBAC)
	}
}
