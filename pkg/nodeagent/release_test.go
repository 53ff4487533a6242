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

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// gatedDynamic is a dynamic client whose reads and status writes of
// FencingRequests first call before, outside the fake's lock (its reactors
// run under it): a request held there holds no other. A status write
// calls gate then too; their errors are the request's.
type gatedDynamic struct {
	dynamic.Interface
	// before, if set, is called before each Get and UpdateStatus.
	before func(ctx context.Context) error
	// gate, if set, is called before each UpdateStatus with what it writes.
	gate func(written *unstructured.Unstructured) error
}

// IsWatchListSemanticsUnSupported tells the informer, as the fake does,
// that its watch sends no initial events.
func (g gatedDynamic) IsWatchListSemanticsUnSupported() bool { return true }

func (g gatedDynamic) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return gatedResource{g.Interface.Resource(r), g}
}

type gatedResource struct {
	dynamic.NamespaceableResourceInterface
	g gatedDynamic
}

func (r gatedResource) Get(ctx context.Context, name string, opts metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	if r.g.before != nil {
		if err := r.g.before(ctx); err != nil {
			return nil, err
		}
	}
	return r.NamespaceableResourceInterface.Get(ctx, name, opts, sub...)
}

func (r gatedResource) UpdateStatus(ctx context.Context, obj *unstructured.Unstructured, opts metav1.UpdateOptions) (*unstructured.Unstructured, error) {
	if r.g.before != nil {
		if err := r.g.before(ctx); err != nil {
			return nil, err
		}
	}
	if r.g.gate != nil {
		if err := r.g.gate(obj); err != nil {
			return nil, err
		}
	}
	return r.NamespaceableResourceInterface.UpdateStatus(ctx, obj, opts)
}

// barrier holds every call of method until n of them have arrived, then
// lets them all (and any later one) through.
func barrier(method string, n int) grpc.UnaryServerInterceptor {
	var mu sync.Mutex
	arrived := 0
	open := make(chan struct{})
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == method {
			mu.Lock()
			if arrived++; arrived == n {
				close(open)
			}
			mu.Unlock()
			select {
			case <-open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return handler(ctx, req)
	}
}

// fencedVolumes lays out n volumes on the node, each staged and published
// to a pod of its own through the mock plugin, and fences them all.
func (e *env) fencedVolumes(n int) (handles, pvs []string) {
	e.t.Helper()
	for i := range n {
		h, pv := fmt.Sprintf("vol-%03d", i), fmt.Sprintf("pv-%03d", i)
		e.attach(h)
		e.mount(h, pv, true, fmt.Sprintf("pod-%03d", i))
		handles, pvs = append(handles, h), append(pvs, pv)
	}
	e.fenceAll(handles, pvs)
	return handles, pvs
}

// burst is a node that came back with n fenced volumes, each staged and
// published to a pod of its own, and an agent with a worker per volume
// whose status writes go through gate.
type burst struct {
	*env
	handles, pvs []string
}

func newBurst(t *testing.T, n int) *burst {
	e := newEnv(t)
	// Each worker asks the plugin for its node ID after its fresh read of
	// the record: none is done cleaning before every read is done, and no
	// read waits behind the first write, which waits for every cleanup.
	e.interceptor = barrier("/csi.v1.Node/NodeGetInfo", n)
	e.startMockDriver(driver.Config{})
	handles, pvs := e.fencedVolumes(n)
	return &burst{env: e, handles: handles, pvs: pvs}
}

// leftovers are the kubelet's directories of volume i.
func (b *burst) leftovers(i int) []string {
	return []string{b.layout.PodVolumeDir(fmt.Sprintf("pod-%03d", i), b.pvs[i]), b.layout.StagingDir(testDriver, b.handles[i])}
}

// clean reports whether volume i is cleaned up: no leftovers, no
// quarantine on the array.
func (b *burst) clean(i int) bool {
	for _, p := range b.leftovers(i) {
		if _, err := os.Lstat(p); err == nil {
			return false
		}
	}
	return b.publication(b.handles[i]) == nil
}

// carried returns the volumes that written records cleaned and the stored
// request does not: the cleanups the write carries. Each must be clean
// already (write-ahead, S8).
func (b *burst) carried(written *unstructured.Unstructured) []string {
	// Called by the agent's writer: errors are reported, not fatal.
	w, err := fencingv1alpha1.FromUnstructured(written)
	if err != nil {
		b.t.Error(err)
		return nil
	}
	stored, err := b.records.Get(b.ctx, testNode)
	if err != nil {
		b.t.Error(err)
		return nil
	}
	var out []string
	for i, h := range b.handles {
		v := fencerecord.Find(w, testDriver, h)
		if v == nil || v.CleanedTime == nil || !fencerecord.MayBeQuarantined(stored, testDriver, h) {
			continue
		}
		if !b.clean(i) {
			b.t.Errorf("%s recorded clean before its cleanup was done (S8)", h)
		}
		out = append(out, h)
	}
	return out
}

// run runs the agent, its first status write held until every volume is
// clean, as a write slowed down by the API or the client's rate limiter
// would be while the workers go on cleaning; then gate decides.
func (b *burst) run(gate func(write int, carried []string) error) {
	var mu sync.Mutex
	writes := 0
	opts := b.options()
	opts.Workers = len(b.handles)
	opts.Dynamic = gatedDynamic{Interface: b.dyn, gate: func(written *unstructured.Unstructured) error {
		mu.Lock()
		defer mu.Unlock()
		if writes++; writes == 1 {
			err := wait.PollUntilContextTimeout(b.ctx, 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
				for i := range b.handles {
					if !b.clean(i) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				b.t.Errorf("not every volume was cleaned while the first write waited: %v", err)
			}
		}
		return gate(writes, b.carried(written))
	}}
	b.env.run(opts)
	for _, h := range b.handles {
		b.waitCleaned(h)
	}
}

// A node that comes back with many fenced volumes: its workers clean them
// at once and record their cleanups together, in a few writes of the
// node's FencingRequest, not one each and their conflicts (issue 38, item
// 11). Every volume is cleaned and recorded clean.
func TestCleanupsOfOneNodeShareWrites(t *testing.T) {
	const n = 12
	b := newBurst(t, n)
	writes0, ok0 := b.writes.writes.Load(), counter(t, resultSuccess)

	b.run(func(int, []string) error { return nil })

	b.waitFor("the cleanups counted", func() bool { return counter(t, resultSuccess)-ok0 >= n })
	writes := b.writes.writes.Load() - writes0
	t.Logf("%d cleanups: %d writes of the FencingRequest, %d conflicts", n, writes, b.writes.conflicts.Load())
	// The first write carries what was queued when it started, the next
	// one what was queued meanwhile: every cleanup but a straggler's.
	if writes > n/3 {
		t.Errorf("%d cleanups cost %d writes of the FencingRequest, want at most %d", n, writes, n/3)
	}
}

// A write that fails fails every cleanup it carried: none is recorded, each
// worker counts the failure and cleans its volume again, and then every
// volume is recorded clean.
func TestSharedCleanupWriteFails(t *testing.T) {
	const n = 12
	b := newBurst(t, n)
	update0 := recordErrorCount(t, opUpdate)
	var failed []string

	b.run(func(_ int, carried []string) error {
		if failed != nil || len(carried) < 2 {
			return nil
		}
		failed = carried
		return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})

	if len(failed) < 2 {
		t.Fatalf("no write carried several cleanups: %v", failed)
	}
	b.waitFor("every failed cleanup counted", func() bool { return recordErrorCount(t, opUpdate)-update0 >= float64(len(failed)) })
	if got := recordErrorCount(t, opUpdate) - update0; got != float64(len(failed)) {
		t.Errorf("csi_fence_node_cleanup_record_errors_total{operation=update} grew by %v, want %d: one per cleanup the failed write carried (%v)", got, len(failed), failed)
	}
}

// BenchmarkReleaseNode110 measures how long a node that comes back with 110
// fenced volumes (a full node's worth of pods) takes until every cleanup is
// recorded, which is what its release waits for: the node role's default
// of 10 workers, the mock plugin over gRPC, the fake API, unthrottled and
// behind the node agent's default client-side rate limit (client-go's
// token bucket, 5 QPS, burst 10), which paces it on a real cluster. The
// API requests of one release are reported with it.
func BenchmarkReleaseNode110(b *testing.B) {
	for _, bc := range []struct {
		name string
		qps  float32 // 0: unthrottled
	}{{"api=unthrottled", 0}, {"api=5qps", 5}} {
		b.Run(bc.name, func(b *testing.B) { benchmarkRelease(b, 110, 10, bc.qps) })
	}
}

func benchmarkRelease(b *testing.B, n, workers int, qps float32) {
	var writes, conflicts, gets int64
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		e.startMockDriver(driver.Config{})
		e.fencedVolumes(n)
		w0, c0, g0 := e.writes.writes.Load(), e.writes.conflicts.Load(), e.writes.gets.Load()
		opts := e.options()
		opts.Workers = workers
		if qps > 0 {
			limiter := flowcontrol.NewTokenBucketRateLimiter(qps, 10)
			opts.Dynamic = gatedDynamic{Interface: e.dyn, before: limiter.Wait}
		}
		b.StartTimer()

		_, stop := e.start(opts)
		err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
			// From the tracker: not an API request of the agent's.
			o, err := e.dyn.Tracker().Get(fencingv1alpha1.Resource, "", testNode)
			if err != nil {
				return false, err
			}
			fr, err := fencingv1alpha1.FromUnstructured(o)
			return err == nil && !fencerecord.Pending(fr), err
		})

		b.StopTimer()
		stop()
		if err != nil {
			b.Fatal(err)
		}
		writes += e.writes.writes.Load() - w0
		conflicts += e.writes.conflicts.Load() - c0
		gets += e.writes.gets.Load() - g0
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	b.ReportMetric(float64(conflicts)/float64(b.N), "conflicts/op")
	b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
}
