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
	"encoding/json"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// The failover's policy on the real control plane: while a policy holds
// (the pause switch, a pod labelled out of failover, a cordoned node) a dead
// node is neither quarantined nor fenced and its pod stays; the product
// says why in an Event; once the policy is lifted the same node fails over
// and is released when it returns.
func TestFailoverPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		// hold puts the policy in place on the pod's node; lift removes it.
		hold, lift func(ctx context.Context, env *scenario.Env, node string) error
		// event is the reason of the Event that says why nothing happens,
		// on the node (or on the pod when onPod).
		event string
		onPod bool
	}{
		{
			name: "pause switch", prefix: "pp", event: "FencingDeferred",
			hold: func(ctx context.Context, _ *scenario.Env, _ string) error { return setPaused(ctx, "e2e pause") },
			lift: func(ctx context.Context, _ *scenario.Env, _ string) error { return setPaused(ctx, "") },
		},
		{
			name: "pod opted out", prefix: "po", event: "FailoverDisabled", onPod: true,
			hold: func(ctx context.Context, env *scenario.Env, _ string) error {
				return labelPod(ctx, env, contract.FailoverDisabled)
			},
			lift: func(ctx context.Context, env *scenario.Env, _ string) error { return labelPod(ctx, env, "") },
		},
		{
			name: "cordoned node", prefix: "pc", event: "FencingSkipped",
			hold: func(ctx context.Context, _ *scenario.Env, node string) error { return cordon(ctx, node, true) },
			lift: func(ctx context.Context, _ *scenario.Env, node string) error { return cordon(ctx, node, false) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, tc.prefix, 3, 1)
			if err != nil {
				t.Fatal(err)
			}
			victim, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.hold(ctx, env, victim); err != nil {
				t.Fatal(err)
			}
			lifted := false
			defer func() {
				if !lifted {
					_ = tc.lift(ctx, env, victim)
				}
			}()
			if err := env.PowerOff(ctx, victim); err != nil {
				t.Fatal(err)
			}
			kind, name := "Node", victim
			if tc.onPod {
				kind, name = "Pod", env.PodName(0)
			}
			// The Event is written in the pass that decides not to fence:
			// once it is there, that pass has happened.
			if err := framework.WaitFor(ctx, 120*time.Second, tc.event+" on "+kind+" "+name, func(ctx context.Context) (bool, error) {
				evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
					FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=" + tc.event})
				return err == nil && len(evs.Items) > 0, err
			}); err != nil {
				t.Fatal(err)
			}
			n, err := cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) {
				t.Fatalf("%s quarantined while the policy holds", victim)
			}
			if _, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				t.Fatalf("pod %s deleted while the policy holds", env.PodName(0))
			}
			if err := tc.lift(ctx, env, victim); err != nil {
				t.Fatal(err)
			}
			lifted = true
			if _, err := env.WaitAttached(ctx, 0, victim, 120*time.Second); err != nil {
				t.Fatalf("no failover once the policy was lifted: %v", err)
			}
			if err := env.PowerOn(ctx, victim); err != nil {
				t.Fatal(err)
			}
			expectReleased(ctx, t, victim, fencedVolume{driver: product.Driver, handle: env.Volumes[0]})
			expectNoViolations(t)
		})
	}
}

// metadataPatch is a JSON merge patch that sets metadata.<field>[key] to
// value, or removes it when value is "".
func metadataPatch(field, key, value string) ([]byte, error) {
	var v interface{}
	if value != "" {
		v = value
	}
	return json.Marshal(map[string]interface{}{"metadata": map[string]interface{}{field: map[string]interface{}{key: v}}})
}

// setPaused sets (or, with "", removes) the pause switch on the storm
// guard's Lease, creating the Lease if no node was admitted yet.
func setPaused(ctx context.Context, why string) error {
	leases := cluster.Client.CoordinationV1().Leases(sidecar.DefaultStormGuardNamespace)
	patch, err := metadataPatch("annotations", failover.PausedAnnotation, why)
	if err != nil {
		return err
	}
	_, err = leases.Patch(ctx, contract.StormGuardLeaseName, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) && why != "" {
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: contract.StormGuardLeaseName,
			Annotations: map[string]string{failover.PausedAnnotation: why}}}, metav1.CreateOptions{})
	}
	return err
}

// labelPod sets (or, with "", removes) the failover label of replica 0.
func labelPod(ctx context.Context, env *scenario.Env, value string) error {
	patch, err := metadataPatch("labels", contract.FailoverLabel, value)
	if err != nil {
		return err
	}
	_, err = cluster.Client.CoreV1().Pods(env.NS).Patch(ctx, env.PodName(0), types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// cordon marks the node unschedulable, as kubectl cordon (and drain) does.
func cordon(ctx context.Context, node string, on bool) error {
	patch, err := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"unschedulable": on}})
	if err != nil {
		return err
	}
	_, err = cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}
