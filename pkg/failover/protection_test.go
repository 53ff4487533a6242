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

package failover

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// The gauge of pods not protected counts, by reason, what
// protection.Assess says of each running pod from the controller's caches:
// the pod using a ReadWriteOnce volume of the fencing driver is protected,
// one that tolerates the unreachable taint for ever and one with a
// ReadWriteMany volume are not, each under its reason; a pod of no node is
// not counted.
func TestUnprotectedPodsGauge(t *testing.T) {
	objs := objects(v1.ConditionTrue, false)
	forever := volumeUser{node: "n1", driver: driver, pod: "pinned-0", uid: "u2", claim: "pinned", pv: "pv2", handle: "h2", va: "va2"}.objects()
	forever[0].(*v1.Pod).Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}}
	shared := volumeUser{node: "n2", driver: driver, pod: "shared-0", uid: "u3", claim: "shared", pv: "pv3", handle: "h3", va: "va3"}.objects()
	shared[2].(*v1.PersistentVolume).Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "ns"}, Spec: v1.PodSpec{Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}}}}
	objs = append(append(append(objs, forever...), shared...), runtime.Object(pending))
	e := newEnv(t, objs, true)
	_, ctx := ktesting.NewTestContext(t)
	e.c.updateProtection(ctx)
	want := map[protection.Reason]float64{protection.ReasonToleratesUnreachable: 1, protection.ReasonRWX: 1}
	for _, r := range protection.Reasons {
		got, err := testutil.GetGaugeMetricValue(unprotectedPods.WithLabelValues(string(r)))
		if err != nil {
			t.Fatal(err)
		}
		if got != want[r] {
			t.Errorf("csi_fence_unprotected_pods{reason=%q} = %v, want %v", r, got, want[r])
		}
	}

	// The gate off: every running pod on a node is unprotected for it.
	off := newEnv(t, objs, false)
	off.c.updateProtection(ctx)
	if got, _ := testutil.GetGaugeMetricValue(unprotectedPods.WithLabelValues(string(protection.ReasonGateOff))); got != 3 {
		t.Errorf("gate off: %v pods unprotected for %s, want 3", got, protection.ReasonGateOff)
	}
}
