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

package leadership

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

func TestSet(t *testing.T) {
	Register()
	Set("external-attacher-leader-d", false)
	Set("csi-fence-node-fencing", true)
	Set("csi-fence-node-fencing", false)
	Set("external-attacher-leader-d", true)
	want := `
# HELP csi_fence_leader [ALPHA] 1 while this replica holds the Lease, 0 while it runs for it, by Lease name.
# TYPE csi_fence_leader gauge
csi_fence_leader{lease="csi-fence-node-fencing"} 0
csi_fence_leader{lease="external-attacher-leader-d"} 1
`
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), "csi_fence_leader"); err != nil {
		t.Error(err)
	}
}
