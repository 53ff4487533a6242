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

package termreason

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestTerminate(t *testing.T) {
	now := metav1.Now()
	live := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, UID: "u1"}}
	terminating := live.DeepCopy()
	terminating.DeletionTimestamp = &now
	for _, tc := range []struct {
		name, reason string
		pod          *v1.Pod
		wantErr      string
		// wantActions are the verbs after the get, in order.
		wantActions []string
		// dryRun is TerminatePod's: both writes carry it.
		dryRun []string
	}{
		{name: "records, then deletes", reason: "Moving to rack B", pod: live, wantActions: []string{"patch", "delete"}},
		{name: "an invalid reason touches nothing", reason: "two\nlines", pod: live, wantErr: "not printable"},
		{name: "an empty reason touches nothing", reason: "", pod: live, wantErr: "empty"},
		{name: "a terminating pod is refused", reason: "x", pod: terminating, wantErr: "already terminating"},
		{name: "no pod", reason: "x", wantErr: "not found"},
		{name: "a server dry run sends both writes with DryRun", reason: "Moving to rack B", pod: live, wantActions: []string{"patch", "delete"}, dryRun: []string{metav1.DryRunAll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod.DeepCopy())
			}
			client := fake.NewClientset(objs...)
			var err error
			if tc.dryRun == nil {
				err = Terminate(context.Background(), client, ns, "p", tc.reason, -1)
			} else {
				_, err = TerminatePod(context.Background(), client, ns, "p", tc.reason, -1, tc.dryRun)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					verbs = append(verbs, a.GetVerb())
				}
			}
			if strings.Join(verbs, ",") != strings.Join(tc.wantActions, ",") {
				t.Fatalf("actions %v, want %v", verbs, tc.wantActions)
			}
			for _, a := range client.Actions() {
				switch a := a.(type) {
				case k8stesting.PatchAction:
					if !strings.Contains(string(a.GetPatch()), `"uid":"u1"`) || !strings.Contains(string(a.GetPatch()), tc.reason) {
						t.Errorf("patch %s lacks the uid precondition or the reason", a.GetPatch())
					}
					if got := a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun; !slices.Equal(got, tc.dryRun) {
						t.Errorf("patch with DryRun %v, want %v", got, tc.dryRun)
					}
				case k8stesting.DeleteAction:
					if p := a.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != "u1" {
						t.Errorf("delete without the uid precondition: %+v", a.GetDeleteOptions())
					}
					if got := a.GetDeleteOptions().DryRun; !slices.Equal(got, tc.dryRun) {
						t.Errorf("delete with DryRun %v, want %v", got, tc.dryRun)
					}
				}
			}
		})
	}
}
