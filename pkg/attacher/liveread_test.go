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
	"context"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
)

// A burst of detaches from one node reads its Node live once per wave of
// callers, not once per caller: the workers that ask while a read is under
// way share the next one (pkg/liveread).
func TestBurstOfDetachesSharesTheLiveNodeRead(t *testing.T) {
	const callers = 20
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	var gets atomic.Int64
	release := make(chan struct{})
	client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) == 1 {
			<-release // the first read is under way while the others ask
		}
		return false, nil, nil
	})
	a := &Attacher{Config: Config{Client: client}}
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := a.liveNode(context.Background(), "node-1")
			if err != nil || n == nil || n.Name != "node-1" {
				t.Errorf("liveNode: %v, %v", n, err)
			}
		}()
	}
	// The first read is under way; every other caller has asked and
	// waits for the next one.
	testpoll.Until(t, "one read under way and every other caller waiting for the next", func() bool {
		return gets.Load() == 1 && a.nodeReads.Gathering("node-1") == callers-1
	})
	close(release)
	wg.Wait()
	if n := gets.Load(); n != 2 {
		t.Errorf("%d live reads of the Node for %d callers at once, want 2", n, callers)
	}
}
