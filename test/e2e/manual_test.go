//go:build e2e

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

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// An admin's FencingRequest is the only thing that fences a Ready node (S4):
// the node is quarantined and its volumes fenced; deleting the request (once
// the node agent has cleaned up) lifts the quarantine.
func TestManualFencingRequest(t *testing.T) {
	ctx := context.Background()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "mf", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if _, err := frs.Create(ctx, &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: node, Origin: fencingv1alpha1.OriginManual, Reason: "suspected disk controller fault"},
	}); err != nil {
		t.Fatal(err)
	}
	quarantined := func(ctx context.Context) (bool, error) {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == contract.QuarantineTaintKey {
				return true, nil
			}
		}
		return false, nil
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the Ready node quarantined and its volume fenced", func(ctx context.Context) (bool, error) {
		q, err := quarantined(ctx)
		if !q || err != nil {
			return false, err
		}
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		return fr.Status.Phase == fencingv1alpha1.PhaseFenced || fr.Status.Phase == fencingv1alpha1.PhaseComplete, nil
	}); err != nil {
		// Say what was reached: this wait failed now and then in CI
		// (after other tests), never alone.
		bg := context.Background()
		if fr, ferr := frs.Get(bg, node); ferr == nil {
			t.Logf("request %s: phase %q, conditions %+v, volumes %+v", node, fr.Status.Phase, fr.Status.Conditions, fr.Status.Volumes)
		}
		if n, nerr := cluster.Client.CoreV1().Nodes().Get(bg, node, metav1.GetOptions{}); nerr == nil {
			t.Logf("node %s: taints %+v, conditions %+v", node, n.Spec.Taints, n.Status.Conditions)
		}
		t.Fatal(err)
	}
	// The workload on the fenced node can no longer write.
	if err := product.Nodes[node].Write(ctx, env.Volumes[0]); err == nil {
		t.Errorf("a write from the fenced node went through")
	}
	// The node agent cleans up the fenced volume on the (alive) node.
	if err := framework.WaitFor(ctx, 60*time.Second, "the node agent's cleanup recorded", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		for _, v := range fr.Status.Volumes {
			if v.VolumeHandle == env.Volumes[0] && v.CleanedTime != nil {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := frs.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "the quarantine lifted after the request was withdrawn", func(ctx context.Context) (bool, error) {
		q, err := quarantined(ctx)
		return !q && err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	expectNoViolations(t)
}
