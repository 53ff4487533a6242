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
	"reflect"
	"strings"
	"testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// The FenceAgentConfig CRD and its Go types must describe the same fields, for
// the same reasons as the FencingRequest's (a field the schema lacks is pruned
// silently: a node's BMC address or the Secret reference would vanish).
func TestFenceAgentConfigSchemaMatchesTypes(t *testing.T) {
	checkSchema(t, "base/crd-fenceagentconfigs.yaml", fenceAgentConfigMismatches, []negativeControl{
		{"statusIntervalSeconds: {type: integer, format: int32, minimum: 0}", "", ".spec.timeouts.statusIntervalSeconds (integer) is in the Go types but not in the CRD schema"},
		{"name: {type: string, minLength: 1}", "name: {type: integer}", ".spec.nodes[].name is integer in the CRD schema"},
		{"required: [name]", "required: [name, parameters]", ".spec.nodes[].parameters is required by the CRD but omitempty"},
		{"pattern: '^fence_[a-z0-9_]+$'", "", ".spec.agent must be restricted to fence_*"},
	})
}

func fenceAgentConfigMismatches(b []byte) []string {
	crd, out := typeMismatches(b, contract.FenceAgentConfigResource, contract.FenceAgentConfigKind, reflect.TypeOf(fencingv1alpha1.FenceAgentConfig{}), "Spec")
	if crd.root == nil {
		return out
	}
	errorf := func(format string, args ...interface{}) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, path := range []string{".spec.agent", ".spec.nodes", ".spec.nodes[].name"} {
		if !crd.required[path] {
			errorf("%s must be required", path)
		}
	}
	// The apiserver is the first gate on which program the sidecar may run.
	spec, _ := crd.root["properties"].(map[string]interface{})["spec"].(map[string]interface{})
	agent, _ := spec["properties"].(map[string]interface{})["agent"].(map[string]interface{})
	if p, _ := agent["pattern"].(string); !strings.HasPrefix(p, "^fence_") || !strings.HasSuffix(p, "$") {
		errorf(".spec.agent must be restricted to fence_* by an anchored pattern, has %q", p)
	}
	return out
}
