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

package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// expectLines fails t for each of wants that got (a table) does not hold.
func expectLines(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("no %q in\n%s", w, got)
		}
	}
}

// trialAt is a trial's milestones at the given seconds after t0.
func trialAt(marks map[string]float64) []timeline.Event {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var out []timeline.Event
	for what, s := range marks {
		out = append(out, timeline.Event{At: t0.Add(time.Duration(s * float64(time.Second))), What: what})
	}
	return out
}

// The budget says when each step ended after the pod was eligible, and how
// long it took from the latest milestone it waited for: the new attachment
// waits for both the old one's removal and the replacement's scheduling.
// A step a path does not take is left out.
func TestBudgetTable(t *testing.T) {
	automatic := pathResult{path: "automatic", timelines: [][]timeline.Event{
		trialAt(map[string]float64{timeline.PodEvicted: 10, timeline.StorageFenced: 10.1, timeline.PodForceDeleted: 10.2,
			timeline.PodRecreated: 10.25, timeline.PodReplaced: 10.3, timeline.OldVADeleted: 10.7,
			timeline.NewAttachment: 10.9, timeline.AttachedElsewhere: 11.0}),
		// The scheduler last: the new attachment waits for it.
		trialAt(map[string]float64{timeline.PodEvicted: 0, timeline.StorageFenced: 0.2, timeline.PodForceDeleted: 0.3,
			timeline.PodRecreated: 0.4, timeline.PodReplaced: 0.9, timeline.OldVADeleted: 0.5,
			timeline.NewAttachment: 1.0, timeline.AttachedElsewhere: 1.2}),
	}}
	got := budgetTable(automatic)
	expectLines(t, got,
		"automatic path (2 trials",
		// at p50 0.10 s (nearest rank of 0.1, 0.2), p95 0.20 s.
		"storage fenced                    0.10s    0.20s |    0.10s    0.20s",
		"old attachment removed            0.50s    0.70s |    0.20s    0.50s",
		// 0.9-0.7 = 0.2 after the old one's removal; 1.0-0.9 = 0.1 after
		// the scheduling.
		"new attachment created            0.90s    1.00s |    0.10s    0.20s",
		"volume attached elsewhere         1.00s    1.20s |    0.10s    0.20s",
	)

	inTree := pathResult{path: "out-of-service", timelines: [][]timeline.Event{
		trialAt(map[string]float64{timeline.PodEvicted: 0, timeline.PodForceDeleted: 16, timeline.AttachedElsewhere: 17}),
	}}
	got = budgetTable(inTree)
	if strings.Contains(got, timeline.StorageFenced) || !strings.Contains(got, timeline.PodForceDeleted) {
		t.Errorf("the in-tree path's budget:\n%s", got)
	}
}
