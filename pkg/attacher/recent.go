package attacher

import (
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
)

// recentlyDoneTTL is how long a completed attach or detach is remembered: far
// longer than an informer takes to deliver our own write, far shorter than
// anything a user would notice.
const recentlyDoneTTL = 2 * time.Minute

type doneOp string

const (
	opAttach doneOp = "attach"
	opDetach doneOp = "detach"
)

// recentlyDone is a small TTL memory of the operations the handler
// completed, keyed by the VolumeAttachment's UID and name (a VA recreated
// under the same name is another object). After a detach our finalizer is
// gone for good from that object, and after an attach only ReconcileVA's
// forced sync (which bypasses this memory) may publish it again, so a hit
// always means "the cache is behind, skip".
type recentlyDone struct {
	mu      sync.Mutex
	ttl     time.Duration
	now     func() time.Time
	entries map[string]time.Time
}

func newRecentlyDone(ttl time.Duration, now func() time.Time) *recentlyDone {
	return &recentlyDone{ttl: ttl, now: now, entries: map[string]time.Time{}}
}

func doneKey(va *storagev1.VolumeAttachment, op doneOp) string {
	return string(va.UID) + "/" + va.Name + "/" + string(op)
}

func (r *recentlyDone) add(va *storagev1.VolumeAttachment, op doneOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for k, t := range r.entries {
		if now.Sub(t) > r.ttl {
			delete(r.entries, k)
		}
	}
	r.entries[doneKey(va, op)] = now
}

func (r *recentlyDone) has(va *storagev1.VolumeAttachment, op doneOp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.entries[doneKey(va, op)]
	return ok && r.now().Sub(t) <= r.ttl
}
