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

// ReconcileVA running while the cache still lags behind an attach or a
// detach this handler just completed must not force it a second time.
func TestReconcileVAIgnoresOurOwnFreshWork(t *testing.T) {
	e := newEnv(t, envConfig{listVolumes: true, objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1")), csiCalls: []csiCall{attachCall("vol-1", "node-1-id")}})
	staleVAs := e.factory.Storage().V1().VolumeAttachments().Informer().GetStore().List()
	e.syncVA("va1")
	// Back to the cache of before the attach: status says not attached.
	if err := e.factory.Storage().V1().VolumeAttachments().Informer().GetStore().Replace(staleVAs, ""); err != nil {
		t.Fatal(err)
	}
	e.lister.published = map[string][]string{"vol-1": {"node-1-id"}}
	if err := e.handler.ReconcileVA(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.ctrl.vaQueue.Len(); n != 0 {
		t.Errorf("reconcile queued %d VolumeAttachments for a forced sync", n)
	}
}

func TestReconcileVALeavesInFlightSyncsAlone(t *testing.T) {
	e := newEnv(t, envConfig{listVolumes: true, objects: healthy(pv("pv1", "vol-1"), va("va1", "pv1", "node-1"))})
	h := e.handler.(*CSIHandler)
	h.setInFlight("va1", true)
	e.lister.published = map[string][]string{"vol-1": {"node-1-id"}}
	if err := h.ReconcileVA(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.ctrl.vaQueue.Len(); n != 0 {
		t.Fatalf("reconcile queued a VolumeAttachment a worker is syncing")
	}
	h.setInFlight("va1", false)
	if err := h.ReconcileVA(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.ctrl.vaQueue.Len(); n != 1 {
		t.Errorf("reconcile did not queue the disagreeing VolumeAttachment once idle")
	}
}
