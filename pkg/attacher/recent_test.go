package attacher

import (
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A sync that runs from a cache which has not seen our own write yet must
// not publish, or unpublish and fence, a second time.
func TestStaleCacheDoesNotRepeatOperations(t *testing.T) {
	notReady := node("node-1", readyStatus("False"))
	tests := []struct {
		name  string
		cfg   envConfig
		check func(*testing.T, *storagev1.VolumeAttachment)
	}{
		{name: "attach", cfg: envConfig{objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}}, check: isAttached},
		{name: "fenced detach", cfg: envConfig{caps: Capabilities{Fence: true}, objects: objs(notReady, csiNode("node-1"), pv("pv1", "vol-1"), detachingVA("va1", "pv1", "node-1")), csiCalls: []csiCall{detachCall("vol-1", "node-1-id", true)}}, check: isDetached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			e.syncVA("va1")
			// Again, with the cache as it was before the first sync.
			e.ctrl.vaQueue.Add("va1")
			e.ctrl.syncVA(e.ctx)
			tc.check(t, e.getVA("va1"))
			if n := e.ctrl.vaQueue.NumRequeues("va1"); n != 0 {
				t.Errorf("NumRequeues %d: the second sync failed instead of seeing the work done", n)
			}
			if evs := e.events(); len(evs) > 1 {
				t.Errorf("events %q", evs)
			}
		})
	}
}

func TestRecentlyDoneExpires(t *testing.T) {
	now := time.Unix(0, 0)
	r := newRecentlyDone(time.Minute, func() time.Time { return now })
	a := va("va1", "pv1", "n")
	a.UID = types.UID("uid-1")
	recreated := a.DeepCopy()
	recreated.UID = "uid-2"
	r.add(a, opDetach)
	if !r.has(a, opDetach) || r.has(a, opAttach) || r.has(recreated, opDetach) {
		t.Fatal("wrong memory")
	}
	now = now.Add(2 * time.Minute)
	if r.has(a, opDetach) {
		t.Error("not forgotten after the TTL")
	}
	r.add(recreated, opAttach) // also sweeps the expired entry
	if len(r.entries) != 1 {
		t.Errorf("entries %v", r.entries)
	}
}
