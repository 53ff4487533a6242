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

package attacher

import (
	"testing"

	upstream "github.com/kubernetes-csi/external-attacher/v4/pkg/attacher"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/csi-fence/fence-attacher/pkg/csiclient"
)

// A fresh attacher's /metrics shows every counter of the fence path for its
// driver and every reason at zero, before any fence: alerts on them can be
// set up in advance, and increase() sees the first fence.
func TestCountersAtZeroBeforeTheFirstFence(t *testing.T) {
	const driver = "fresh.csi.example.com" // no other test fences for it
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	nodeIDs, err := NewNodeIDs(driver, factory.Storage().V1().CSINodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAttacher(Config{
		DriverName: driver, CSI: upstream.NewAttacher(nil), FenceCSI: csiclient.New(nil, 0), Recorder: record.NewFakeRecorder(1),
		NodeIDs: nodeIDs, PVs: factory.Core().V1().PersistentVolumes().Lister(), VAs: factory.Storage().V1().VolumeAttachments().Lister(),
		VolumeAttachments: client.StorageV1().VolumeAttachments(),
	}); err != nil {
		t.Fatal(err)
	}
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]float64{} // metric -> reason -> value
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver_name"] != driver {
				continue
			}
			if seen[f.GetName()] == nil {
				seen[f.GetName()] = map[string]float64{}
			}
			seen[f.GetName()][labels["reason"]] = m.GetCounter().GetValue()
		}
	}
	for _, name := range []string{"csi_fence_fenced_unpublishes_total", "csi_fence_fenced_unpublish_errors_total", "csi_fence_unfenced_detaches_total", "csi_fence_forced_detaches_total"} {
		for _, reason := range fenceReasons {
			v, ok := seen[name][reason]
			switch {
			case !ok:
				t.Errorf("%s{driver_name=%q,reason=%q} is not on /metrics before the first fence", name, driver, reason)
			case v != 0:
				t.Errorf("%s{reason=%q} = %v, want 0", name, reason, v)
			}
		}
	}
}
