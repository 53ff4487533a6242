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

package nodehealth

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
)

// The pod GC's parallel force-deletes of one node's pods read the node
// live once per wave of callers, not once each: the callers that ask while
// a read is under way share the next one, begun after they asked.
func TestConcurrentDecisionsShareTheLiveRead(t *testing.T) {
	const callers = 20
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: LeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-time.Minute))), LeaseDurationSeconds: ptr.To[int32](10)}})
	var nodeGets, leaseGets atomic.Int64
	release := make(chan struct{})
	client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		if nodeGets.Add(1) == 1 {
			<-release // the first read is under way while the others ask
		}
		return false, nil, nil
	})
	client.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		leaseGets.Add(1)
		return false, nil, nil
	})
	clk := clocktesting.NewFakePassiveClock(now)
	o := NewObserverWithClock(client, clk)
	clk.SetTime(now.Add(time.Minute)) // first seen a minute ago: expired
	o.seen["n1"] = observation{renew: now.Add(-time.Minute), since: now, duration: 10 * time.Second}
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, err := o.Check(context.Background(), "n1"); err != nil || !h.Down() {
				t.Errorf("Check = %+v, %v, want down", h, err)
			}
		}()
	}
	testpoll.Until(t, "one read under way and every other caller waiting for the next", func() bool {
		return nodeGets.Load() == 1 && o.reads.Gathering("n1") == callers-1
	})
	close(release)
	wg.Wait()
	if n, l := nodeGets.Load(), leaseGets.Load(); n != 2 || l != 2 {
		t.Errorf("%d live reads of the Node and %d of its Lease for %d callers at once, want 2 each", n, l, callers)
	}
}
