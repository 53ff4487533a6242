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
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// quarantineWatch follows the quarantine taint on a set of nodes and keeps
// the largest number of them quarantined at the same time.
type quarantineWatch struct {
	t    *testing.T
	mu   sync.Mutex
	now  map[string]bool
	most int
}

func (q *quarantineWatch) seen(n *corev1.Node) {
	q.mu.Lock()
	defer q.mu.Unlock()
	on := framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule)
	if on != q.now[n.Name] {
		q.t.Logf("%s quarantined: %v", n.Name, on)
	}
	q.now[n.Name] = on
	count := 0
	for _, on := range q.now {
		if on {
			count++
		}
	}
	if count > q.most {
		q.most = count
	}
}

func (q *quarantineWatch) max() int { q.mu.Lock(); defer q.mu.Unlock(); return q.most }

// S5 end to end: two nodes fail in the same second under
// --max-fenced-nodes=1. One is fenced and fails over; the other waits
// (FencingDeferred) until the first is back and released, and is fenced
// then. At no moment are two nodes quarantined.
func TestStormGuardTwoNodesAtOnce(t *testing.T) {
	ctx := context.Background()
	if err := product.RestartAttacher(ctx, "--max-fenced-nodes=1", "--max-fenced-node-percent=0"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := product.RestartAttacher(ctx); err != nil {
			t.Errorf("restoring csi-fence-attacher's flags: %v", err)
		}
	}()
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "sg", 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	var victims []string
	for i := 0; i < 2; i++ {
		n, err := env.WaitAttached(ctx, i, "", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		victims = append(victims, n)
	}
	q := &quarantineWatch{t: t, now: map[string]bool{}}
	w, err := cluster.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: scenario.GroupLabel + "=sg"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type != watch.Error {
				q.seen(n)
			}
		}
	}()
	for _, v := range victims {
		if err := env.PowerOff(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	// One of the two fails over; which one is the guard's choice.
	var first, second string
	if err := framework.WaitFor(ctx, 120*time.Second, "one replica attached elsewhere", func(ctx context.Context) (bool, error) {
		for i, v := range victims {
			if n, err := env.WaitAttached(ctx, i, v, time.Second); err == nil && n != "" {
				first, second = v, victims[1-i]
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The node lifecycle controller evicts pods one node at a time
	// (--node-eviction-rate); wait until the second node's pod qualifies too
	// and the guard has either deferred it or (a bug) let it through.
	if err := framework.WaitFor(ctx, 90*time.Second, "the second node deferred or quarantined", func(ctx context.Context) (bool, error) {
		evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + second + ",reason=FencingDeferred"})
		if err != nil {
			return false, err
		}
		return len(evs.Items) > 0 || q.max() > 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	if q.max() > 1 {
		t.Fatalf("%d nodes quarantined at once under --max-fenced-nodes=1", q.max())
	}
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, second, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) {
		t.Fatalf("%s quarantined while %s is", second, first)
	}
	// The first node comes back and is released: the second is fenced now.
	if err := env.PowerOn(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitTaint(ctx, first, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule, false, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	idx := 0
	if victims[1] == second {
		idx = 1
	}
	if _, err := env.WaitAttached(ctx, idx, second, 120*time.Second); err != nil {
		t.Fatalf("the deferred node was not fenced once a slot was free: %v", err)
	}
	if err := env.PowerOn(ctx, second); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitTaint(ctx, second, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule, false, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	if q.max() > 1 {
		t.Fatalf("%d nodes quarantined at once under --max-fenced-nodes=1", q.max())
	}
	expectNoViolations(t)
}
