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
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// The CRD's schema and the Go types must describe the same fields: the
// apiserver prunes a field the schema lacks without an error (the record
// would silently lose it), and rejects an object that misses a field the
// schema requires.
func TestFencingRequestSchemaMatchesTypes(t *testing.T) {
	checkSchema(t, "base/crd-fencingrequests.yaml", schemaMismatches, []negativeControl{
		{"cleanupError: {type: string, maxLength: 512}", "", ".status.volumes[].cleanupError (string) is in the Go types but not in the CRD schema"},
		{"fencedTime: {type: string, format: date-time}", "fencedTime: {type: integer}", ".status.volumes[].fencedTime is integer in the CRD schema"},
		{"required: [driver, volumeHandle]", "required: [driver, volumeHandle, nodeID]", ".status.volumes[].nodeID is required by the CRD but omitempty"},
		{"terminationReason: {type: string}", "", ".status.forceDeletedPods[].terminationReason (string) is in the Go types but not in the CRD schema"},
		{"maxItems: 512", "", ".status.volumes: maxItems none, want 512"},
		{"maxItems: 512", "maxItems: 4096", ".status.volumes: maxItems 4096, want 512"},
		{"maxItems: 256", "maxItems: 1000", ".status.forceDeletedPods: maxItems 1000, want 256"},
		{"cleanupError: {type: string, maxLength: 512}", "cleanupError: {type: string}", ".status.volumes[].cleanupError: maxLength none, want 512"},
		{"rule: self.metadata.name == self.spec.nodeName", "rule: self.spec.nodeName != ''", "no validation rule self.metadata.name == self.spec.nodeName"},
	})
}

func schemaMismatches(b []byte) []string {
	crd, out := typeMismatches(b, contract.FencingResource, "FencingRequest", reflect.TypeOf(fencingv1alpha1.FencingRequest{}), "Spec", "Status")
	if crd.root == nil {
		return out
	}
	errorf := func(format string, args ...interface{}) { out = append(out, fmt.Sprintf(format, args...)) }
	if !crd.status {
		errorf("no status subresource: UpdateStatus would fail")
	}
	for path, want := range map[string][]string{
		".spec.origin":                {string(fencingv1alpha1.OriginManual), string(fencingv1alpha1.OriginAutomatic)},
		".status.phase":               {string(fencingv1alpha1.PhasePending), string(fencingv1alpha1.PhaseFencing), string(fencingv1alpha1.PhaseFenced), string(fencingv1alpha1.PhaseCleaning), string(fencingv1alpha1.PhaseComplete)},
		".status.conditions[].status": {string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown)},
		".status.nodeFence.backend":   {fencingv1alpha1.BackendPower, fencingv1alpha1.BackendOutOfService, fencingv1alpha1.BackendMachine},
	} {
		got := slices.Clone(crd.enums[path])
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			errorf("%s: CRD enum %v, Go constants %v", path, got, want)
		}
	}
	if !crd.required[".spec.nodeName"] {
		errorf(".spec.nodeName must be required: a request names its node")
	}
	// The apiserver refuses a record that would grow past what its writers
	// keep it to (and etcd's object size limit with it).
	for path, want := range map[string]int64{
		".status.volumes":          fencerecord.MaxVolumes,
		".status.forceDeletedPods": fencerecord.MaxForceDeletedPods,
	} {
		got, ok := crd.maxItems[path]
		switch {
		case !ok:
			errorf("%s: maxItems none, want %d (the writer's bound)", path, want)
		case got != want:
			errorf("%s: maxItems %d, want %d (the writer's bound)", path, got, want)
		}
	}
	for _, path := range []string{".status.volumes[].fenceError", ".status.volumes[].cleanupError"} {
		got, ok := crd.maxLength[path]
		switch {
		case !ok:
			errorf("%s: maxLength none, want %d (the writer's bound)", path, fencerecord.MaxMessageLength)
		case got != fencerecord.MaxMessageLength:
			errorf("%s: maxLength %d, want %d (the writer's bound)", path, got, fencerecord.MaxMessageLength)
		}
	}
	// The failover keys a request by its name: a request whose name is not
	// its node's would be ignored silently, so the apiserver refuses it.
	if !hasRule(crd.root, nameIsNodeRule) {
		errorf("no validation rule %s on the root of the schema: a request named after another node than spec.nodeName would be accepted and ignored", nameIsNodeRule)
	}
	return out
}

// nameIsNodeRule is the CEL rule that makes a FencingRequest's name its
// node's. Only a rule on the root of the schema may read metadata.name.
const nameIsNodeRule = "self.metadata.name == self.spec.nodeName"

// hasRule reports whether the schema s carries the x-kubernetes-validations
// rule, with a message.
func hasRule(s map[string]interface{}, rule string) bool {
	rules, _ := s["x-kubernetes-validations"].([]interface{})
	for _, r := range rules {
		m, _ := r.(map[string]interface{})
		if m["rule"] == rule && m["message"] != nil && m["message"] != "" {
			return true
		}
	}
	return false
}

// negativeControl replaces from by to in a CRD, after which the check must
// report want: it shows the check sees what it is for.
type negativeControl struct{ from, to, want string }

// checkSchema runs mismatches on the CRD at path, which must report
// nothing, then on each negative control's mutation, which must report it.
func checkSchema(t *testing.T, path string, mismatches func([]byte) []string, controls []negativeControl) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mismatches(b) {
		t.Error(m)
	}
	for _, tc := range controls {
		mutated := strings.Replace(string(b), tc.from, tc.to, 1)
		if mutated == string(b) {
			t.Fatalf("negative control: %q not in the CRD", tc.from)
		}
		found := false
		for _, m := range mismatches([]byte(mutated)) {
			found = found || strings.Contains(m, tc.want)
		}
		if !found {
			t.Errorf("negative control: replacing %q by %q not reported (want %q)", tc.from, tc.to, tc.want)
		}
	}
}

// crdSchema is a CRD of deploy/ as typeMismatches read it.
type crdSchema struct {
	root      map[string]interface{} // the version's openAPIV3Schema; nil: unreadable
	status    bool                   // it has the status subresource
	types     map[string]string      // JSON path -> schema type
	required  map[string]bool
	enums     map[string][]string
	maxItems  map[string]int64 // JSON path of an array -> its maxItems
	maxLength map[string]int64 // JSON path of a string -> its maxLength
}

// typeMismatches reads the CRD in b and reports how it differs from
// goType: its group, plural, kind and scope (Cluster), its one version, and
// the fields under goType's fields tops (Spec, Status) both ways, with what
// the CRD requires that Go may omit.
func typeMismatches(b []byte, plural, kind string, goType reflect.Type, tops ...string) (crd crdSchema, out []string) {
	errorf := func(format string, args ...interface{}) { out = append(out, fmt.Sprintf(format, args...)) }
	var doc struct {
		Spec struct {
			Group string `json:"group"`
			Scope string `json:"scope"`
			Names struct {
				Kind   string `json:"kind"`
				Plural string `json:"plural"`
			} `json:"names"`
			Versions []struct {
				Name         string `json:"name"`
				Subresources struct {
					Status *struct{} `json:"status"`
				} `json:"subresources"`
				Schema struct {
					OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return crd, []string{err.Error()}
	}
	if doc.Spec.Group != contract.FencingGroup || doc.Spec.Names.Plural != plural || doc.Spec.Names.Kind != kind || doc.Spec.Scope != "Cluster" {
		errorf("CRD names %s/%s kind %s scope %s, want %s/%s %s Cluster", doc.Spec.Group, doc.Spec.Names.Plural,
			doc.Spec.Names.Kind, doc.Spec.Scope, contract.FencingGroup, plural, kind)
	}
	if len(doc.Spec.Versions) != 1 || doc.Spec.Versions[0].Name != contract.FencingVersion {
		errorf("want one version %s", contract.FencingVersion)
		return crd, out
	}
	v := doc.Spec.Versions[0]
	crd = crdSchema{root: v.Schema.OpenAPIV3Schema, status: v.Subresources.Status != nil,
		types: map[string]string{}, required: map[string]bool{}, enums: map[string][]string{},
		maxItems: map[string]int64{}, maxLength: map[string]int64{}}
	walkSchema(crd.root, "", &crd)
	goFields := map[string]string{}
	omitEmpty := map[string]bool{}
	var prefixes []string
	for _, top := range tops {
		f, _ := goType.FieldByName(top)
		name, omit := jsonName(f)
		walkType(f.Type, "."+name, goFields, omitEmpty)
		goFields["."+name] = "object"
		omitEmpty["."+name] = omit
		prefixes = append(prefixes, "."+name)
	}
	for path, want := range goFields {
		got, ok := crd.types[path]
		switch {
		case !ok:
			errorf("%s (%s) is in the Go types but not in the CRD schema: the apiserver would prune it", path, want)
		case got != want:
			errorf("%s is %s in the CRD schema, %s in the Go types", path, got, want)
		}
	}
	for path := range crd.types {
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) }) {
			if _, ok := goFields[path]; !ok {
				errorf("%s is in the CRD schema but not in the Go types", path)
			}
		}
	}
	for path := range crd.required {
		if omitEmpty[path] {
			errorf("%s is required by the CRD but omitempty in Go: an empty value would be rejected", path)
		}
	}
	return crd, out
}

// walkSchema records what crd keeps of the schema s at path, and below.
func walkSchema(s map[string]interface{}, path string, crd *crdSchema) {
	typ, _ := s["type"].(string)
	if path != "" {
		crd.types[path] = typ
	}
	if e, ok := s["enum"].([]interface{}); ok {
		for _, v := range e {
			crd.enums[path] = append(crd.enums[path], v.(string))
		}
	}
	if req, ok := s["required"].([]interface{}); ok {
		for _, r := range req {
			crd.required[path+"."+r.(string)] = true
		}
	}
	if n, ok := schemaInt(s["maxItems"]); ok {
		crd.maxItems[path] = n
	}
	if n, ok := schemaInt(s["maxLength"]); ok {
		crd.maxLength[path] = n
	}
	if props, ok := s["properties"].(map[string]interface{}); ok {
		for name, p := range props {
			if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue
			}
			walkSchema(p.(map[string]interface{}), path+"."+name, crd)
		}
	}
	if items, ok := s["items"].(map[string]interface{}); ok {
		walkSchema(items, path+"[]", crd)
		crd.types[path] = "array"
	}
}

// schemaInt reads an integer of a schema: a JSON number, as yaml.Unmarshal
// reads it.
func schemaInt(v interface{}) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}

var timeType = reflect.TypeOf(metav1.Time{})

func walkType(t reflect.Type, path string, types map[string]string, omitEmpty map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return
	case t.Kind() == reflect.Slice:
		walkType(t.Elem(), path+"[]", types, omitEmpty)
		types[path+"[]"] = kindOf(t.Elem())
		return
	case t.Kind() != reflect.Struct:
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, omit := jsonName(f)
		if name == "-" {
			continue
		}
		p := path + "." + name
		types[p] = kindOf(f.Type)
		omitEmpty[p] = omit
		walkType(f.Type, p, types, omitEmpty)
	}
}

func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.Kind().String()
}

func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, strings.Contains(opts, "omitempty")
}
