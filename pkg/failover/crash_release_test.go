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

package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/nodestate"
)

// S6 and "every mark added is removed", across crashes: a node that failed
// over, came back and was cleaned is released by a process that is killed
// (kill -9: no write of it reaches the API any more) after its first k
// writes, for every k up to the number a release takes, and then restarted.
// At the crash the node is never unquarantined while its record has a
// volume not cleaned; after the restart it ends released: no taint or
// condition of this system on the Node, the request Complete without its
// finalizer, the storm guard's admission gone.
func TestCrashAtEveryWriteOfTheRelease(t *testing.T) {
	crashAtEveryWrite(t, "release", readyToRelease,
		func(t *testing.T, e *env, kill *killSwitch) {
			if n := e.node(t, "n1"); nodestate.Taint(n, contract.QuarantineTaintKey) == nil && fencerecord.Pending(e.record(t)) {
				t.Fatalf("killed after %d writes (%v): quarantine lifted with a volume not cleaned", kill.after, kill.done())
			}
		},
		func(t *testing.T, e *env, _ *killSwitch) { expectReleased(t, e) })
}

// The same for an admin's release that lets a fenced attachment stay,
// which the release marks not attached for its driver to publish again
// (republishFencedAttachments): at no crash is the attachment marked while
// the node is still quarantined (its publish would be refused, and the
// mark comes after the taint by design), and after the restart the node is
// released and the attachment marked.
func TestCrashAtEveryWriteOfAReleaseThatRepublishes(t *testing.T) {
	setup := func(t *testing.T) *env {
		e := readyToRelease(t)
		e.releaseByAdmin(t)
		e.podAndAttachment(t, true, true)
		e.restart(t)
		return e
	}
	marked := func(t *testing.T, e *env) bool {
		t.Helper()
		va, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return !va.Status.Attached
	}
	crashAtEveryWrite(t, "release", setup,
		func(t *testing.T, e *env, kill *killSwitch) {
			if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) != nil && marked(t, e) {
				t.Fatalf("killed after %d writes (%v): the attachment marked for publishing while the node is quarantined", kill.after, kill.done())
			}
		},
		func(t *testing.T, e *env, _ *killSwitch) {
			expectReleased(t, e)
			if !marked(t, e) {
				t.Errorf("the released node's fenced attachment still says attached")
			}
		})
}

// crashAtEveryWrite runs the step of n1 that what names (a sync of a
// controller on the env setup returns) once for every k from 0 up: the
// process is killed after its first k writes, atCrash checks what reached
// the API, a new process syncs n1 again, and afterRestart checks the end.
// It stops at the first k the step completes within, and fails when that
// takes more than 40 writes (the loop must end) or none (nothing to break).
func crashAtEveryWrite(t *testing.T, what string, setup func(*testing.T) *env, atCrash, afterRestart func(*testing.T, *env, *killSwitch)) {
	t.Helper()
	const most = 40
	for k := 0; k <= most; k++ {
		var completed bool
		t.Run(fmt.Sprintf("killed after %d writes", k), func(t *testing.T) {
			e := setup(t)
			kill := &killSwitch{after: k}
			e.client.PrependReactor("*", "*", kill.react)
			e.dyn.PrependReactor("*", "*", kill.react)
			err := e.sync(t)
			completed = !kill.fired()
			if completed && err != nil {
				t.Fatalf("the %s failed without a crash: %v", what, err)
			}
			atCrash(t, e, kill)

			// A new process on what reached the API.
			e.client.ReactionChain = e.client.ReactionChain[1:]
			e.dyn.ReactionChain = e.dyn.ReactionChain[1:]
			e.restart(t)
			if err := e.sync(t); err != nil {
				t.Fatalf("killed after %d writes (%v), the restarted %s: %v", k, kill.done(), what, err)
			}
			afterRestart(t, e, kill)
		})
		if completed {
			if k == 0 {
				t.Fatalf("the %s wrote nothing: there was nothing to break", what)
			}
			return
		}
	}
	t.Fatalf("a %s takes more than %d writes", what, most)
}

// readyToRelease is n1 after a failover (fenced, its pod deleted, the
// attachment gone) that is Ready again and whose agent cleaned the volume,
// under a freshly started controller.
func readyToRelease(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, objects(v1.ConditionUnknown, true), true)
	if err := e.sync(t); err != nil {
		t.Fatal(err)
	}
	if e.csi.fenced("h1") == 0 || e.steps.index("delete db-0") < 0 {
		t.Fatalf("no failover to start from: %v", e.steps.log)
	}
	ctx := context.Background()
	e.attachmentReleased(t, "va1")
	e.setReady(t, "n1", v1.ConditionTrue)
	fr := e.record(t)
	now := metav1.Now()
	fencerecord.Find(fr, driver, "h1").CleanedTime = &now
	if _, err := e.fr.UpdateStatus(ctx, fr); err != nil {
		t.Fatal(err)
	}
	e.restart(t)
	return e
}

// expectReleased checks that nothing this system marks a failed node with
// is left on n1.
func expectReleased(t *testing.T, e *env) {
	t.Helper()
	n := e.node(t, "n1")
	for _, key := range []string{contract.QuarantineTaintKey, contract.FencingTriagedTaintKey, contract.FencingRequiredTaintKey, contract.OutOfServiceTaintKey} {
		if nodestate.Taint(n, key) != nil {
			t.Errorf("taint %s left on the released node: %v", key, n.Spec.Taints)
		}
	}
	if hasFencingCondition(n) {
		t.Errorf("a fencing condition left on the released node: %+v", n.Status.Conditions)
	}
	fr, err := e.fr.Get(context.Background(), "n1")
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	case fr.Status.Phase != fencingv1alpha1.PhaseComplete || slices.Contains(fr.Finalizers, contract.RecordFinalizer):
		t.Errorf("the record of the released node: phase %s, finalizers %v", fr.Status.Phase, fr.Finalizers)
	}
	l, err := e.client.CoordinationV1().Leases("kube-system").Get(context.Background(), contract.StormGuardLeaseName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err == nil && slices.Contains(strings.Split(l.Annotations[stormGuardAnnotation], ","), "n1") {
		t.Errorf("the storm guard still admits the released node: %q", l.Annotations[stormGuardAnnotation])
	}
}

// killSwitch lets the first after writes through, then fails every write
// as a killed process's would never arrive; reads go on.
type killSwitch struct {
	mu     sync.Mutex
	after  int
	writes []string
	killed bool
}

func (k *killSwitch) react(a k8stesting.Action) (bool, runtime.Object, error) {
	switch a.GetVerb() {
	case "get", "list", "watch":
		return false, nil, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.writes) >= k.after {
		k.killed = true
		return true, nil, errors.New("process killed")
	}
	what := a.GetVerb() + " " + a.GetResource().Resource
	if s := a.GetSubresource(); s != "" {
		what += "/" + s
	}
	k.writes = append(k.writes, what)
	return false, nil, nil
}

func (k *killSwitch) fired() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killed
}

// done lists the writes that reached the API before the kill.
func (k *killSwitch) done() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.writes)
}

// The failover's half of the same: the process that fails n1 over is killed
// after its first k writes, for every k up to the number a failover takes.
// At the crash the pod and its attachment are gone only if its volume is
// recorded fenced and the node quarantined (S1, S8); the restarted process
// finishes the failover (the pod deleted, the attachment released, also
// when the crash came between the release and the pod's writes) with one
// more fence at most for the volume (fenced at most once per process).
func TestCrashAtEveryWriteOfTheFailover(t *testing.T) {
	crashAtEveryWrite(t, "failover", func(t *testing.T) *env { return newEnv(t, objects(v1.ConditionUnknown, true), true) },
		func(t *testing.T, e *env, kill *killSwitch) {
			_, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{})
			if e.steps.index("delete db-0") < 0 && !apierrors.IsNotFound(err) {
				return
			}
			fr, err := e.fr.Get(context.Background(), "n1")
			if err != nil || !fencerecord.IsFenced(fr, driver, "h1") || nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
				t.Fatalf("killed after %d writes (%v): the pod was deleted without its volume recorded fenced on a quarantined node (%v)", kill.after, kill.done(), err)
			}
		},
		func(t *testing.T, e *env, kill *killSwitch) {
			if fr := e.record(t); !fencerecord.IsFenced(fr, driver, "h1") || e.steps.index("delete db-0") < 0 {
				t.Fatalf("killed after %d writes (%v): not failed over after the restart: %v", kill.after, kill.done(), e.steps.log)
			}
			if _, err := e.client.StorageV1().VolumeAttachments().Get(context.Background(), "va1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("killed after %d writes (%v): the fenced attachment not released after the restart: %v", kill.after, kill.done(), err)
			}
			if n := e.csi.fenced("h1"); n > 2 {
				t.Errorf("h1 fenced %d times", n)
			}
			if nodestate.Taint(e.node(t, "n1"), contract.QuarantineTaintKey) == nil {
				t.Errorf("the failed node is not quarantined after the restart")
			}
		})
}
