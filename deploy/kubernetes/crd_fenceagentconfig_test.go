package kubernetes

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// The FenceAgentConfig CRD and its Go types must describe the same fields, for
// the same reasons as the FencingRequest's (a field the schema lacks is pruned
// silently: a node's BMC address or the Secret reference would vanish).
func TestFenceAgentConfigSchemaMatchesTypes(t *testing.T) {
	b, err := os.ReadFile("base/crd-fenceagentconfigs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fenceAgentConfigMismatches(b) {
		t.Error(m)
	}

	// Negative controls: the check sees a lost field, a changed type, a
	// required field Go may omit, and a lost agent name pattern.
	for _, tc := range []struct{ from, to, want string }{
		{"statusIntervalSeconds: {type: integer, format: int32, minimum: 0}", "", ".spec.timeouts.statusIntervalSeconds (integer) is in the Go types but not in the CRD schema"},
		{"name: {type: string, minLength: 1}", "name: {type: integer}", ".spec.nodes[].name is integer in the CRD schema"},
		{"required: [name]", "required: [name, parameters]", ".spec.nodes[].parameters is required by the CRD but omitempty"},
		{"pattern: '^fence_[a-z0-9_]+$'", "", ".spec.agent must be restricted to fence_*"},
	} {
		mutated := strings.Replace(string(b), tc.from, tc.to, 1)
		if mutated == string(b) {
			t.Fatalf("negative control: %q not in the CRD", tc.from)
		}
		found := false
		for _, m := range fenceAgentConfigMismatches([]byte(mutated)) {
			found = found || strings.Contains(m, tc.want)
		}
		if !found {
			t.Errorf("negative control: replacing %q by %q not reported (want %q)", tc.from, tc.to, tc.want)
		}
	}
}

func fenceAgentConfigMismatches(b []byte) (out []string) {
	errorf := func(format string, args ...interface{}) { out = append(out, fmt.Sprintf(format, args...)) }
	var crd struct {
		Spec struct {
			Group string `json:"group"`
			Scope string `json:"scope"`
			Names struct {
				Kind   string `json:"kind"`
				Plural string `json:"plural"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return []string{err.Error()}
	}
	if crd.Spec.Group != contract.FencingGroup || crd.Spec.Names.Plural != contract.FenceAgentConfigResource ||
		crd.Spec.Names.Kind != contract.FenceAgentConfigKind || crd.Spec.Scope != "Cluster" {
		errorf("CRD names %s/%s kind %s scope %s, want %s/%s %s Cluster", crd.Spec.Group, crd.Spec.Names.Plural,
			crd.Spec.Names.Kind, crd.Spec.Scope, contract.FencingGroup, contract.FenceAgentConfigResource, contract.FenceAgentConfigKind)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != contract.FencingVersion {
		errorf("want one version %s", contract.FencingVersion)
		return out
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema

	schema := map[string]string{}
	required := map[string]bool{}
	walkSchema(root, "", schema, required, map[string][]string{})
	goFields := map[string]string{}
	omitEmpty := map[string]bool{}
	f, _ := reflect.TypeOf(fencingv1alpha1.FenceAgentConfig{}).FieldByName("Spec")
	walkType(f.Type, ".spec", goFields, omitEmpty)
	goFields[".spec"] = "object"
	for path, want := range goFields {
		got, ok := schema[path]
		switch {
		case !ok:
			errorf("%s (%s) is in the Go types but not in the CRD schema: the apiserver would prune it", path, want)
		case got != want:
			errorf("%s is %s in the CRD schema, %s in the Go types", path, got, want)
		}
	}
	for path := range schema {
		if strings.HasPrefix(path, ".spec") {
			if _, ok := goFields[path]; !ok {
				errorf("%s is in the CRD schema but not in the Go types", path)
			}
		}
	}
	for path := range required {
		if omitEmpty[path] {
			errorf("%s is required by the CRD but omitempty in Go: an empty value would be rejected", path)
		}
	}
	for _, path := range []string{".spec.agent", ".spec.nodes", ".spec.nodes[].name"} {
		if !required[path] {
			errorf("%s must be required", path)
		}
	}
	// The apiserver is the first gate on which program the sidecar may run.
	spec, _ := root["properties"].(map[string]interface{})["spec"].(map[string]interface{})
	agent, _ := spec["properties"].(map[string]interface{})["agent"].(map[string]interface{})
	if p, _ := agent["pattern"].(string); !strings.HasPrefix(p, "^fence_") || !strings.HasSuffix(p, "$") {
		errorf(".spec.agent must be restricted to fence_* by an anchored pattern, has %q", p)
	}
	return out
}
