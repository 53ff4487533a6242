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

package v1alpha1

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

func TestClientRoundTrip(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: "FencingRequestList"})
	c := NewClient(dyn)
	ctx := context.Background()
	now := metav1.Now()
	fr := &FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:       FencingRequestSpec{NodeName: "node-1", Origin: OriginAutomatic, Reason: "NodeUnreachable"},
		Status: FencingRequestStatus{Phase: PhaseFenced, StartTime: &now, Volumes: []FencedVolume{
			{Driver: "d", VolumeHandle: "v1", NodeID: "n1", FencedTime: &now},
		}},
	}
	created, err := c.Create(ctx, fr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Spec, fr.Spec) || len(got.Status.Volumes) != 1 || got.Status.Volumes[0].VolumeHandle != "v1" {
		t.Errorf("round trip lost data: %+v", got)
	}
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list = %v, %v", list, err)
	}
	cp := created.DeepCopy()
	cp.Status.Volumes[0].CleanupError = "boom"
	if created.Status.Volumes[0].CleanupError != "" {
		t.Error("DeepCopy shares volumes")
	}
}

func TestFromUnstructuredRejectsGarbage(t *testing.T) {
	if _, err := FromUnstructured("not an object"); err == nil {
		t.Error("want error for a non-unstructured object")
	}
}
