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
)

// The CRD's schema and the Go types must describe the same fields: the
// apiserver prunes a field the schema lacks without an error (the record
// would silently lose it), and rejects an object that misses a field the
// schema requires.
func TestFencingRequestSchemaMatchesTypes(t *testing.T) {
	b, err := os.ReadFile("base/crd-fencingrequests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range schemaMismatches(b) {
		t.Error(m)
	}

	// Negative controls: the check sees a field the schema lost, a type
	// that differs and a required field Go may omit.
	for _, tc := range []struct{ from, to, want string }{
		{"cleanupError: {type: string}", "", ".status.volumes[].cleanupError (string) is in the Go types but not in the CRD schema"},
		{"fencedTime: {type: string, format: date-time}", "fencedTime: {type: integer}", ".status.volumes[].fencedTime is integer in the CRD schema"},
		{"required: [driver, volumeHandle]", "required: [driver, volumeHandle, nodeID]", ".status.volumes[].nodeID is required by the CRD but omitempty"},
	} {
		mutated := strings.Replace(string(b), tc.from, tc.to, 1)
		if mutated == string(b) {
			t.Fatalf("negative control: %q not in the CRD", tc.from)
		}
		found := false
		for _, m := range schemaMismatches([]byte(mutated)) {
			found = found || strings.Contains(m, tc.want)
		}
		if !found {
			t.Errorf("negative control: replacing %q by %q not reported (want %q)", tc.from, tc.to, tc.want)
		}
	}
}

func schemaMismatches(b []byte) (out []string) {
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
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return []string{err.Error()}
	}
	if crd.Spec.Group != contract.FencingGroup || crd.Spec.Names.Plural != contract.FencingResource ||
		crd.Spec.Names.Kind != "FencingRequest" || crd.Spec.Scope != "Cluster" {
		errorf("CRD names %s/%s kind %s scope %s, want %s/%s FencingRequest Cluster", crd.Spec.Group, crd.Spec.Names.Plural,
			crd.Spec.Names.Kind, crd.Spec.Scope, contract.FencingGroup, contract.FencingResource)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != contract.FencingVersion {
		errorf("want one version %s", contract.FencingVersion)
		return out
	}
	v := crd.Spec.Versions[0]
	if v.Subresources.Status == nil {
		errorf("no status subresource: UpdateStatus would fail")
	}
	root := v.Schema.OpenAPIV3Schema

	schema := map[string]string{}
	required := map[string]bool{}
	enums := map[string][]string{}
	walkSchema(root, "", schema, required, enums)
	goFields := map[string]string{}
	omitEmpty := map[string]bool{}
	typ := reflect.TypeOf(fencingv1alpha1.FencingRequest{})
	for _, top := range []string{"Spec", "Status"} {
		f, _ := typ.FieldByName(top)
		name, omit := jsonName(f)
		walkType(f.Type, "."+name, goFields, omitEmpty)
		goFields["."+name] = "object"
		omitEmpty["."+name] = omit
	}
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
		if strings.HasPrefix(path, ".spec") || strings.HasPrefix(path, ".status") {
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
	for path, want := range map[string][]string{
		".spec.origin":                {string(fencingv1alpha1.OriginManual), string(fencingv1alpha1.OriginAutomatic)},
		".status.phase":               {string(fencingv1alpha1.PhasePending), string(fencingv1alpha1.PhaseFencing), string(fencingv1alpha1.PhaseFenced), string(fencingv1alpha1.PhaseCleaning), string(fencingv1alpha1.PhaseComplete)},
		".status.conditions[].status": {string(metav1.ConditionTrue), string(metav1.ConditionFalse), string(metav1.ConditionUnknown)},
	} {
		got := slices.Clone(enums[path])
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			errorf("%s: CRD enum %v, Go constants %v", path, got, want)
		}
	}
	if !required[".spec.nodeName"] {
		errorf(".spec.nodeName must be required: a request names its node")
	}
	return out
}

func walkSchema(s map[string]interface{}, path string, types map[string]string, required map[string]bool, enums map[string][]string) {
	typ, _ := s["type"].(string)
	if path != "" {
		types[path] = typ
	}
	if e, ok := s["enum"].([]interface{}); ok {
		for _, v := range e {
			enums[path] = append(enums[path], v.(string))
		}
	}
	if req, ok := s["required"].([]interface{}); ok {
		for _, r := range req {
			required[path+"."+r.(string)] = true
		}
	}
	if props, ok := s["properties"].(map[string]interface{}); ok {
		for name, p := range props {
			if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
				continue
			}
			walkSchema(p.(map[string]interface{}), path+"."+name, types, required, enums)
		}
	}
	if items, ok := s["items"].(map[string]interface{}); ok {
		walkSchema(items, path+"[]", types, required, enums)
		types[path] = "array"
	}
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
