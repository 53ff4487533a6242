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

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// The flags of status and timeline: the output formats, the NODE, the
// storm guard's namespace.
func TestViewArguments(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fenceview.StormGuardLease, Namespace: "csi-fence-system",
		Annotations: map[string]string{contract.Prefix + "/paused": "elsewhere"}}}
	tests := []struct {
		args    []string
		wantOut string
		wantErr string
	}{
		{[]string{"status"}, "Storm guard (Lease kube-system/", ""},
		{[]string{"status", "-o", "json", "--storm-guard-namespace=csi-fence-system"}, `"paused": "elsewhere"`, ""},
		{[]string{"status", "-o", "wide"}, "", `unknown output format "wide"`},
		{[]string{"status", "node-a"}, "", "unexpected arguments"},
		{[]string{"status", "-n", "x"}, "", "unknown shorthand flag: 'n'"},
		{[]string{"timeline", "node-a", "-o", "yaml"}, "node: node-a", ""},
		{[]string{"timeline", "--output=json", "node-a"}, `"node": "node-a"`, ""},
		{[]string{"timeline"}, "", "want exactly one NODE"},
		{[]string{"timeline", "node-a", "--storm-guard-namespace=x"}, "", "unknown flag: --storm-guard-namespace"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			p := newTestPlugin(t, fake.NewClientset(lease, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}), nil, "")
			err := p.execute(tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(p.out.String(), tc.wantOut) {
				t.Errorf("output:\n%s\nwant %q", p.out.String(), tc.wantOut)
			}
		})
	}
}

// status and timeline in each format: the table, and JSON and YAML that
// decode into the same view (fields for scripts), the same bytes each run.
func TestViewOutputs(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
			Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: contract.QuarantineTaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &t0}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: t0}}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fenceview.StormGuardLease, Namespace: "kube-system",
			Annotations: map[string]string{contract.Prefix + "/fencing-nodes": "node-a", contract.Prefix + "/paused": "maintenance"}}},
	)
	fr, err := fencingv1alpha1.ToUnstructured(&fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", CreationTimestamp: t0},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "node-a", Origin: fencingv1alpha1.OriginAutomatic},
		Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFenced, StartTime: &t0,
			Volumes: []fencingv1alpha1.FencedVolume{{Driver: "d", VolumeHandle: "v", StartedTime: &t0, FencedTime: &t0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{fencingv1alpha1.Resource: "FencingRequestList", fencingv1alpha1.FenceAgentConfigResource: "FenceAgentConfigList"}, fr)
	run := func(verb, format string) string {
		p := newTestPlugin(t, kube, dyn, "")
		args := []string{verb, "-o", format}
		if verb == "timeline" {
			args = append(args, "node-a")
		}
		if err := p.execute(args...); err != nil {
			t.Fatalf("%s -o %s: %v", verb, format, err)
		}
		return p.out.String()
	}
	for _, format := range []string{"table", "json", "yaml"} {
		if a, b := run("status", format), run("status", format); a != b {
			t.Errorf("status -o %s differs between two runs:\n%s\n%s", format, a, b)
		}
	}
	if s := run("status", "table"); !strings.Contains(s, "node-a   Unknown   Fenced") || !strings.Contains(s, "PAUSED: maintenance") {
		t.Errorf("status table:\n%s", s)
	}
	var st fenceview.Status
	if err := json.Unmarshal([]byte(run("status", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || st.Nodes[0].Name != "node-a" || st.Nodes[0].Volumes.Fenced != 1 || !st.Nodes[0].Admitted || st.StormGuard.Paused != "maintenance" {
		t.Errorf("status -o json decodes to %+v", st)
	}
	var fromYAML fenceview.Status
	if err := yaml.Unmarshal([]byte(run("status", "yaml")), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if len(fromYAML.Nodes) != 1 || fromYAML.Nodes[0].Phase != "Fenced" || fromYAML.Nodes[0].Taints[0] != contract.QuarantineTaintKey+":NoSchedule" {
		t.Errorf("status -o yaml decodes to %+v", fromYAML)
	}
	var tl fenceview.Timeline
	if err := yaml.Unmarshal([]byte(run("timeline", "yaml")), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Node != "node-a" || len(tl.Entries) == 0 || !tl.Entries[0].Time.Equal(&t0) {
		t.Errorf("timeline -o yaml decodes to %+v", tl)
	}
	if s := run("timeline", "table"); !strings.Contains(s, "volume v (d) fenced") {
		t.Errorf("timeline table:\n%s", s)
	}
}
