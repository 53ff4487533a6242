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

package trials

// The schedules of issue 37's proof: a driver without UNPUBLISH_FENCE whose
// CSIDriver declares that a plain ControllerUnpublishVolume revokes the
// node's access (the mock in --detach=revokes) is fenced by its own detach,
// under every rule a fence keeps. The controller that fences it is killed
// (-9) between the intent in the record and the detach being carried out;
// the node comes back while the detach is in flight; the detach hangs past
// the controller's --timeout a random number of times. Beside the checks of
// every trial (the array's S1 and S2, S3, S4 with the plain unpublish of
// such a driver counted as its fence, S6), each checks what is particular
// to a fence by detach: the unpublish never reaches the driver without its
// intent recorded, and the entry stays until the node agent cleaned the
// volume (S8); nothing is recorded fenced before the driver detached the
// volume, and nothing moves before (S1, S3: a detach that failed, hung or
// timed out is no fence); the node stays quarantined from the detach until
// its cleanup (S2).

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// detachDriverName is the driver of the fence-by-detach schedules; added
// once per run, it stays (as the second driver of two-drivers does).
const detachDriverName = "trialdetach.csi-fence.io"

// controllerTimeout is the controller's --timeout in the harness
// (framework: --timeout=5s): a detach that takes longer fails for it.
const controllerTimeout = 5 * time.Second

// detachRun is the detach driver's part of a trial: its volume on the
// victim, and what the watch of its fence saw.
type detachRun struct {
	driver *framework.Driver
	volume string
	since  time.Time

	// back: when the node was Ready again mid-unpublish
	// (detachReturnMidUnpublish); zero otherwise.
	back time.Time

	mu sync.Mutex
	// reported: the invariants the watch reported already (each once).
	reported map[string]bool
}

// detachDriver returns the driver whose CSIDriver declares that its
// unpublish revokes access, added on first use: its mock plays a cloud disk
// driver (--detach=revokes: no UNPUBLISH_FENCE, no FORCE_UNPUBLISH, a
// successful plain unpublish cuts the node's data path), with a sidecar of
// its own. A fault another trial left on it is cleared.
func (t *Trial) detachDriver(ctx context.Context) (*framework.Driver, error) {
	for _, d := range t.p.Drivers {
		if d.Name == detachDriverName {
			return d, faults.NewStore(d.StateDir).Clear()
		}
	}
	t.procMu.Lock()
	defer t.procMu.Unlock()
	return t.p.AddDriver(ctx, framework.DriverOptions{
		Name:        detachDriverName,
		MockArgs:    append(slices.Clone(MockArgs), "--detach=revokes"),
		Annotations: map[string]string{contract.UnpublishRevokesAccessAnnotation: "true"},
	})
}

// detachCalls is what the detach driver's mock controller logged of the
// trial's volume since the trial's start: the ControllerUnpublishVolume
// requests of it from the victim (when each arrived, before any injected
// latency), the unpublishes of it from the victim the driver carried out
// ("Unpublished": the array detached it, or had nothing left to detach),
// and its publishes to other nodes.
type detachCalls struct {
	requests, applied []time.Time
	elsewhere         []controllerRPC
}

// readDetachCalls reads the detachCalls of volume and node from the mock
// controller's log (--v=5).
func readDetachCalls(logPath string, since time.Time, volume, node string) (detachCalls, error) {
	var c detachCalls
	f, err := os.Open(logPath)
	if err != nil {
		return c, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		at, ok := klogTime(line, since)
		if !ok || at.Before(since) {
			continue
		}
		request := strings.Contains(line, `"GRPC request"`)
		switch {
		case request && strings.Contains(line, `method="ControllerUnpublishVolume"`):
			if requestField(line, "volume_id") == volume && requestField(line, "node_id") == node {
				c.requests = append(c.requests, at)
			}
		case request && strings.Contains(line, `method="ControllerPublishVolume"`):
			if id := requestField(line, "node_id"); requestField(line, "volume_id") == volume && id != node {
				c.elsewhere = append(c.elsewhere, controllerRPC{Received: at, Volume: volume, NodeID: id})
			}
		case strings.Contains(line, `"Unpublished"`):
			if klogValue(line, "volume") == volume && klogValue(line, "node") == node {
				c.applied = append(c.applied, at)
			}
		}
	}
	return c, sc.Err()
}

// calls reads the detachCalls of the trial's detach volume from the victim.
func (r *detachRun) calls(victim string) (detachCalls, error) {
	return readDetachCalls(r.driver.Mock.LogPath, r.since, r.volume, victim)
}

// reportDetach records a broken invariant of the fence by detach, once per
// kind.
func (t *Trial) reportDetach(kind, format string, args ...interface{}) {
	r := t.detach
	r.mu.Lock()
	seen := r.reported[kind]
	if r.reported == nil {
		r.reported = map[string]bool{}
	}
	r.reported[kind] = true
	r.mu.Unlock()
	if !seen {
		t.broken(format, args...)
	}
}

// detachEntry reads the victim's record entry of the detach volume (nil:
// none, or no record); an error is a read that failed.
func (t *Trial) detachEntry(ctx context.Context) (*fencingv1alpha1.FencedVolume, error) {
	fr, err := fencingv1alpha1.NewClient(t.c.Dynamic).Get(ctx, t.Victim)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return fencerecord.Find(fr, t.detach.driver.Name, t.detach.volume), nil
}

// watchDetach follows the fence by detach of the trial's volume from the
// victim until the trial ends, every 100 ms, and reports (t.broken) what a
// fence by detach must never do. Each rule reads what it relies on in the
// order that makes it race-free:
//
//   - S8, write-ahead and sticky: once an unpublish of the volume from the
//     victim reached the driver (the log, read first), the record (read
//     after) holds its entry; an intent written after the request, or an
//     entry dropped while the detach may have happened, breaks it. A
//     cleaned entry stays in the record until the node is fenced again,
//     which no schedule here does.
//   - S1, S8, what is not a fence: an entry recorded fenced (the record,
//     read first) while the driver had carried out no unpublish of the
//     volume (the log, read after): an unpublish that failed, hung or
//     outlasted --timeout taken for a fence.
//   - S2: the node not quarantined (the Node, read first) while the driver
//     had detached the volume (the log, read before it) and the entry is
//     not cleaned (the record, read after): the node still holds stale
//     mounts of a volume taken away under it. Not for a Node registered
//     again since the watch began (another UID): it comes without the
//     taint, which the product puts back a moment later, and meanwhile the
//     record alone keeps the volume from being published there (the
//     array's S2, every trial's check).
func (t *Trial) watchDetach(ctx context.Context) {
	r := t.detach
	var first types.UID
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			before, err := r.calls(t.Victim)
			if err != nil {
				continue
			}
			node, err := t.c.Client.CoreV1().Nodes().Get(ctx, t.Victim, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if first == "" {
				first = node.UID
			}
			e, err := t.detachEntry(ctx)
			if err != nil {
				continue
			}
			after, err := r.calls(t.Victim)
			if err != nil {
				continue
			}
			if len(before.requests) > 0 && e == nil {
				t.reportDetach("S8", "S8: the unpublish of %s from %s reached the driver at %s (its fence: its CSIDriver declares that it revokes access) and the FencingRequest holds no entry of it: the intent was not recorded before, or was dropped while the detach may have happened",
					r.volume, t.Victim, before.requests[0].Format("15:04:05.000"))
			}
			if e != nil && e.FencedTime != nil && len(after.applied) == 0 {
				t.reportDetach("S1", "S1, S8: %s recorded fenced from %s at %s before the driver carried out any unpublish of it (%d sent): an unpublish that failed, hung or outlasted --timeout is no fence",
					r.volume, t.Victim, e.FencedTime.Format("15:04:05"), len(after.requests))
			}
			if len(before.applied) > 0 && node.UID == first && !framework.HasTaint(node, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) && e != nil && e.CleanedTime == nil {
				t.reportDetach("S2", "S2: %s not quarantined while %s, detached from it at %s, was not cleaned there: the node holds stale mounts of a volume taken away under it",
					t.Victim, r.volume, before.applied[0].Format("15:04:05.000"))
			}
		}
	}()
}

// checkDetachFence: nothing moved before the driver detached the volume
// from the victim: the product force-deleted the replica (S3, S1) and the
// volume was published to another node (S1) only after the first unpublish
// the driver carried out. The detach driver's faults go with the trial.
func checkDetachFence(_ context.Context, t *Trial) []string {
	r := t.detach
	if r == nil {
		return nil
	}
	defer func() { _ = faults.NewStore(r.driver.StateDir).Clear() }()
	calls, err := r.calls(t.Victim)
	if err != nil {
		return []string{err.Error()}
	}
	if len(calls.applied) == 0 {
		return []string{fmt.Sprintf("the driver never detached %s from %s, yet the trial ended", r.volume, t.Victim)}
	}
	detached := calls.applied[0]
	var out []string
	events, err := t.c.AuditEvents()
	if err != nil {
		return []string{err.Error()}
	}
	pod := t.Env.PodName(t.victims[0].replica)
	for _, e := range events {
		if e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.Env.NS && e.Name == pod &&
			e.Time.After(r.since) && e.Time.Before(detached) && e.Code < 300 {
			out = append(out, fmt.Sprintf("S3, S1: pod %s force-deleted by the product at %s, before the driver detached %s from %s (%s): its fence had not happened",
				pod, e.Time.Format("15:04:05.000"), r.volume, t.Victim, detached.Format("15:04:05.000")))
		}
	}
	for _, e := range events {
		if !r.back.IsZero() && e.User == productUser && e.Verb == "delete" && e.Resource == "pods" && e.Namespace == t.Env.NS && e.Name == pod &&
			e.Time.After(r.back) && e.Code < 300 {
			out = append(out, fmt.Sprintf("S3: pod %s force-deleted by the product at %s, after its node %s was Ready again (%s) mid-unpublish: the detach answered with the node back fences the volume, it does not make the pod the product's",
				pod, e.Time.Format("15:04:05.000"), t.Victim, r.back.Format("15:04:05.000")))
		}
	}
	for _, p := range calls.elsewhere {
		if p.Received.Before(detached) {
			out = append(out, fmt.Sprintf("S1: %s published to %s at %s, before the driver detached it from %s (%s)",
				r.volume, p.NodeID, p.Received.Format("15:04:05.000"), t.Victim, detached.Format("15:04:05.000")))
		}
	}
	return out
}

// waitDetached waits until the driver carried out an unpublish of the
// detach volume from the victim, and returns the calls then.
func (t *Trial) waitDetached(ctx context.Context, timeout time.Duration, what string) (detachCalls, error) {
	var calls detachCalls
	err := framework.WaitFor(ctx, timeout, what, func(context.Context) (bool, error) {
		c, err := t.detach.calls(t.Victim)
		if err != nil {
			return false, nil
		}
		calls = c
		return len(c.applied) > 0, nil
	})
	return calls, err
}

// slowDetach makes the detach driver's next count ControllerUnpublishVolume
// calls wait latency before they are handled (or fail, if the caller gives
// up first: nothing is carried out then). The returned func clears it.
func (t *Trial) slowDetach(latency time.Duration, count int) (func(), error) {
	store := faults.NewStore(t.detach.driver.StateDir)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Latency: latency, Count: count}); err != nil {
		return nil, err
	}
	return func() { _ = store.Clear() }, nil
}

// detachKillAfterIntent kills (-9) the controller of the detach driver
// between the intent recorded in the FencingRequest and the detach being
// carried out: the detach is slow (below --timeout), and the kill comes a
// random moment after the trial sees the intent, before the detach can have
// been carried out, its request in flight at the driver or not sent yet.
// The killed call is never carried out (the driver stops waiting when its
// caller goes). The controller starts again after a random delay. The
// record must still hold the entry then (S8), nothing may move before a
// detach is carried out and recorded (checkDetachFence, watchDetach), and
// the detach that fences must come from the restarted controller.
func detachKillAfterIntent(ctx context.Context, t *Trial) ([]string, error) {
	r := t.detach
	if r == nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: no volume of %s on the node", detachDriverName)
	}
	t.watchDetach(ctx)
	latency := t.between(2500*time.Millisecond, 4500*time.Millisecond)
	clear, err := t.slowDetach(latency, 1)
	if err != nil {
		return nil, err
	}
	defer clear()
	steps := []string{fmt.Sprintf("detach latency %.2fs", latency.Seconds())}
	// The intent, or the detach at the driver without one (watchDetach
	// reports that): either way the controller dies now, with the detach
	// not carried out.
	seen := "intent recorded"
	err = framework.WaitFor(ctx, 90*time.Second, "the intent to fence "+r.volume+" by its detach recorded", func(ctx context.Context) (bool, error) {
		e, err := t.detachEntry(ctx)
		if err == nil && e != nil && e.StartedTime != nil && e.FencedTime == nil {
			return true, nil
		}
		if c, err := r.calls(t.Victim); err == nil && len(c.requests) > 0 {
			seen = "detach at the driver"
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	d1, d2 := t.between(0, latency/2), t.between(0, 3*time.Second)
	if err := sleep(ctx, d1); err != nil {
		return steps, err
	}
	t.procMu.Lock()
	calls, err := r.calls(t.Victim)
	r.driver.KillAttacher()
	killed := time.Now()
	if err == nil {
		err = sleep(ctx, d2)
	}
	if err == nil {
		// S8: the process that recorded the intent is gone without an
		// outcome; the entry must outlive it.
		e, rerr := t.detachEntry(ctx)
		if rerr == nil && e == nil {
			t.reportDetach("S8", "S8: the FencingRequest of %s lost the entry of %s once the controller that recorded its intent was killed before the detach", t.Victim, r.volume)
		}
		err = r.driver.StartAttacher(ctx)
	}
	restarted := time.Now()
	t.procMu.Unlock()
	where := "not sent yet"
	if len(calls.requests) > 0 {
		where = "in flight at the driver"
	}
	steps = append(steps, fmt.Sprintf("%s; kill -9 the controller of %s %.2fs later (the detach %s), restart %.2fs later", seen, r.driver.Name, d1.Seconds(), where, d2.Seconds()))
	if err != nil {
		return steps, err
	}
	if len(calls.applied) > 0 {
		return steps, fmt.Errorf("the schedule cannot reach its path: the detach was carried out at %s, before the kill", calls.applied[0].Format("15:04:05.000"))
	}
	calls, err = t.waitDetached(ctx, 120*time.Second, "the detach of "+r.volume+" carried out after the restart")
	if err != nil {
		return steps, err
	}
	if at := calls.applied[0]; at.Before(restarted) {
		// The killed caller's call went through: the harness's fault
		// did not hold it (or the kill came late), not the product's.
		return steps, fmt.Errorf("the schedule cannot reach its path: the detach was carried out at %s, %.2fs after the kill, before the restart", at.Format("15:04:05.000"), at.Sub(killed).Seconds())
	}
	return append(steps, fmt.Sprintf("detach carried out %.2fs after the restart", calls.applied[0].Sub(restarted).Seconds())), nil
}

// detachInFlight starts following the fence by detach (watchDetach), makes
// the detach slow (3 to 4.5 s, below --timeout) and returns once it is in
// flight at the driver, with its latency, the trial's first step that says
// it, and the func that clears the fault (never nil: defer it at once).
func (t *Trial) detachInFlight(ctx context.Context) ([]string, time.Duration, func(), error) {
	noFault := func() {}
	r := t.detach
	if r == nil {
		return nil, 0, noFault, fmt.Errorf("the schedule cannot reach its path: no volume of %s on the node", detachDriverName)
	}
	t.watchDetach(ctx)
	latency := t.between(3*time.Second, 4500*time.Millisecond)
	steps := []string{fmt.Sprintf("detach latency %.2fs", latency.Seconds())}
	clear, err := t.slowDetach(latency, 1)
	if err != nil {
		return steps, latency, noFault, err
	}
	err = framework.WaitFor(ctx, 90*time.Second, "the detach of "+r.volume+" in flight at the driver", func(context.Context) (bool, error) {
		c, err := r.calls(t.Victim)
		return err == nil && len(c.requests) > 0, nil
	})
	if err != nil {
		return steps, latency, clear, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	return steps, latency, clear, nil
}

// detachReturnMidUnpublish powers the node on while the detach that fences
// the volume is in flight at the driver (slow, below --timeout), a random
// moment after it arrived: the detach is carried out and answered with the
// node back. It is a fence all the same (the volume was taken away under
// the node's mounts): recorded fenced, kept until the node agent cleaned
// it, the node quarantined meanwhile (watchDetach), and the pod, on a node
// that is back, not force-deleted (S3, every trial's check).
func detachReturnMidUnpublish(ctx context.Context, t *Trial) ([]string, error) {
	steps, _, clear, err := t.detachInFlight(ctx)
	defer clear()
	if err != nil {
		return steps, err
	}
	r := t.detach
	d := t.between(0, time.Second)
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("power on %.2fs into the detach", d.Seconds()))
	if err := t.Env.PowerOn(ctx, t.Victim); err != nil {
		return steps, err
	}
	ready := time.Now()
	r.back = ready
	calls, err := t.waitDetached(ctx, 60*time.Second, "the detach of "+r.volume+" carried out")
	if err != nil {
		return steps, err
	}
	if at := calls.applied[0]; at.After(ready) {
		steps = append(steps, fmt.Sprintf("detach carried out %.2fs after the node was Ready", at.Sub(ready).Seconds()))
	} else {
		steps = append(steps, fmt.Sprintf("detach carried out %.2fs before the node was Ready (back, not yet Ready)", ready.Sub(at).Seconds()))
	}
	// A detach carried out is a fence, answered while the node is back or
	// not: the record must say so (watchDetach reports an entry dropped).
	return append(steps, t.detachRecorded(ctx, calls)...), nil
}

// detachNodeDeletedMidUnpublish deletes the Node (and its CSINode) while
// the detach that fences the volume is in flight at the driver (slow,
// below --timeout), a random moment after it arrived, as an admin does who
// takes the machine for gone; the node registers again a random moment
// later and boots. The record must keep the entry throughout (S8), the
// detach carried out must be recorded as the fence, nothing may move before
// it (watchDetach, checkDetachFence), and the node's cleanup must complete
// (the trial's own end).
func detachNodeDeletedMidUnpublish(ctx context.Context, t *Trial) ([]string, error) {
	steps, latency, clear, err := t.detachInFlight(ctx)
	defer clear()
	if err != nil {
		return steps, err
	}
	r := t.detach
	d := t.between(0, latency/2)
	if err := sleep(ctx, d); err != nil {
		return steps, err
	}
	more, err := t.reregisterVictim(ctx, fmt.Sprintf("%.2fs into the detach", d.Seconds()), t.detachSurvives)
	steps = append(steps, more...)
	if err != nil {
		return steps, err
	}
	calls, err := t.waitDetached(ctx, 60*time.Second, "the detach of "+r.volume+" carried out")
	if err != nil {
		return steps, err
	}
	steps = append(steps, fmt.Sprintf("detach carried out at %s", calls.applied[0].Format("15:04:05.000")))
	return append(steps, t.detachRecorded(ctx, calls)...), nil
}

// detachSurvives checks that the victim's record still holds the entry of
// the detach volume, once its intent was recorded (S8: deleting a Node
// loses no record).
func (t *Trial) detachSurvives(ctx context.Context, when string) {
	e, err := t.detachEntry(ctx)
	if err != nil {
		t.reportDetach("S8", "S8: the FencingRequest of %s %s: %v", t.Victim, when, err)
		return
	}
	if c, cerr := t.detach.calls(t.Victim); cerr == nil && len(c.requests) > 0 && e == nil {
		t.reportDetach("S8", "S8: the FencingRequest of %s lost the entry of %s %s, its detach sent", t.Victim, t.detach.volume, when)
	}
}

// detachRecorded waits until the detach the driver carried out (calls) is
// recorded as the fence of the detach volume, and reports S8 if it never is.
func (t *Trial) detachRecorded(ctx context.Context, calls detachCalls) []string {
	r := t.detach
	var e *fencingv1alpha1.FencedVolume
	err := framework.WaitFor(ctx, 30*time.Second, "the detach of "+r.volume+" recorded as its fence", func(ctx context.Context) (bool, error) {
		var err error
		e, err = t.detachEntry(ctx)
		return err == nil && (e == nil || e.FencedTime != nil), nil
	})
	switch {
	case err != nil:
		t.reportDetach("S8", "S8: the detach of %s from %s, carried out at %s, was never recorded as its fence", r.volume, t.Victim, calls.applied[0].Format("15:04:05.000"))
	case e != nil:
		return []string{"recorded fenced"}
	}
	return nil
}

// detachHangsPastTimeout makes the detach hang past the controller's
// --timeout a random number of times (1 to 3), then answer: each hung call
// fails for the controller and is not carried out by the driver. Nothing
// may move meanwhile: the record keeps the entry unfenced with the error,
// the pod is not force-deleted and the volume is published nowhere else
// (watchDetach, checkDetachFence); the next call after the hangs fences,
// and the failover completes (the trial's own end).
func detachHangsPastTimeout(ctx context.Context, t *Trial) ([]string, error) {
	r := t.detach
	if r == nil {
		return nil, fmt.Errorf("the schedule cannot reach its path: no volume of %s on the node", detachDriverName)
	}
	t.watchDetach(ctx)
	latency := t.between(controllerTimeout+time.Second, controllerTimeout+3*time.Second)
	n := 1 + t.Rng.Intn(3)
	clear, err := t.slowDetach(latency, n)
	if err != nil {
		return nil, err
	}
	defer clear()
	steps := []string{fmt.Sprintf("detach hangs %.2fs (past --timeout=%s) %d times, then answers", latency.Seconds(), controllerTimeout, n)}
	var e *fencingv1alpha1.FencedVolume
	err = framework.WaitFor(ctx, 90*time.Second, "the hung detach of "+r.volume+" recorded failed", func(ctx context.Context) (bool, error) {
		var err error
		e, err = t.detachEntry(ctx)
		return err == nil && e != nil && (e.FenceError != "" || e.FencedTime != nil), nil
	})
	if err != nil {
		return steps, fmt.Errorf("the schedule cannot reach its path: %w", err)
	}
	if e.FenceError != "" {
		steps = append(steps, "recorded: "+e.FenceError)
	}
	calls, err := t.waitDetached(ctx, 120*time.Second, "the detach of "+r.volume+" carried out once the driver answers")
	if err != nil {
		return steps, err
	}
	hung := 0
	for _, at := range calls.requests {
		if at.Before(calls.applied[0]) {
			hung++
		}
	}
	// The call carried out arrived before its "Unpublished" line too.
	if hung--; hung < 1 {
		return steps, fmt.Errorf("the schedule cannot reach its path: no unpublish call hung before the first one carried out")
	}
	return append(steps, fmt.Sprintf("%d calls hung past --timeout; the next carried out %.2fs after the first arrived", hung, calls.applied[0].Sub(calls.requests[0]).Seconds())), nil
}
