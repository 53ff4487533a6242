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

package contract

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestAttacherFinalizer(t *testing.T) {
	tests := []struct{ driver, want string }{
		{"csi-test", "external-attacher/csi-test"},
		{"fence.csi-fence.io", "external-attacher/fence-csi-fence-io"},
		{"odd_name/with:chars", "external-attacher/odd-name-with-chars"},
		{"ends.with.", "external-attacher/ends-with-X"},
	}
	for _, tc := range tests {
		if got := AttacherFinalizer(tc.driver); got != tc.want {
			t.Errorf("AttacherFinalizer(%q) = %q, want %q", tc.driver, got, tc.want)
		}
	}
	if got := AttacherLeaseName("a.b"); got != "external-attacher-leader-a-b" {
		t.Errorf("lease = %q", got)
	}
}

// The keys this system writes on objects of others (annotations, labels,
// taints, finalizers) are valid keys, carry its prefix and are distinct.
func TestOwnKeys(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range []string{
		SafeDetachAnnotation, QuarantineTaintKey, FencesOnOutOfServiceAnnotation, OutOfServiceProvenanceAnnotation,
		FailoverLabel, FenceAgentCredentialsLabel, TerminationReasonAnnotation, RecordFinalizer, PreviousNodeIDAnnotation,
	} {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%q: %v", k, errs)
		}
		if !strings.HasPrefix(k, Prefix+"/") {
			t.Errorf("%q lacks the prefix %s/", k, Prefix)
		}
		if seen[k] {
			t.Errorf("%q named twice", k)
		}
		seen[k] = true
	}
}
