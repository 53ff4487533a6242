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
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// secondDriver is the name of the driver the multi-driver tests add.
const secondDriver = "fence2.csi-fence.io"

// S9 and S3 end to end with two drivers: a pod with a volume of each of two
// SafeDetach drivers on a node that is powered off, and the second driver
// refuses to fence (it cannot prove the node stopped using its volume). The
// first driver's fence alone must not move anything: its volume is fenced
// and recorded, the second's refusal is recorded, but the node is never
// FencingComplete and the pod is not force-deleted, however often the
// second driver is asked again. Once it agrees, the node is complete, the
// pod fails over with both volumes, and when the node returns both node
// agents clean their volumes and nothing is left.
func TestTwoDriversOnOneNode(t *testing.T) {
	ctx := context.Background()
	s := setupTwoDriverPod(ctx, t, framework.DriverOptions{Name: secondDriver}, "td", 3, nil)
	env, d1, d2, victim, vol1, vol2 := s.env, s.d1, s.d2, s.victim, s.vol1, s.vol2
	pod, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, env.PodName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refuse := faults.NewStore(d2.StateDir)
	if err := refuse.Set("ControllerUnpublishVolume", faults.Fault{Code: codes.FailedPrecondition}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = refuse.Clear() })
	node := watchNode(t, victim)
	down := time.Now()
	if err := env.PowerOff(ctx, victim); err != nil {
		t.Fatal(err)
	}

	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := framework.WaitFor(ctx, 120*time.Second, "the first driver's fence and the second's refusal recorded", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, victim)
		if err != nil {
			return false, err
		}
		e1, e2 := fencerecord.Find(fr, d1.Name, vol1), fencerecord.Find(fr, d2.Name, vol2)
		return e1 != nil && e1.FencedTime != nil && e2 != nil && e2.FenceError != "" && e2.FencedTime == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The window in which nothing may move: the second driver's controller
	// keeps asking (with its backoff) and keeps being refused.
	refusals := func(ctx context.Context) (float64, error) {
		return framework.MetricSum(ctx, d2.AttacherHTTP, "csi_fence_failover_fence_errors_total", map[string]string{"driver_name": d2.Name})
	}
	before, err := refusals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const retries = 4
	if err := framework.WaitFor(ctx, 90*time.Second, "the second driver refusing its fence again", func(ctx context.Context) (bool, error) {
		n, err := refusals(ctx)
		return n >= before+retries, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s refused to fence %s %d more times; checking that nothing moved", d2.Name, vol2, retries)
	if s, ok := node.first(down, func(s nodeState) bool { return s.complete }); ok {
		t.Errorf("%s got FencingComplete=True at %s with %s of %s not fenced", victim, s.at.Format(time.StampMilli), vol2, d2.Name)
	}
	if now, err := cluster.Client.CoreV1().Pods(env.NS).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || now.UID != pod.UID || now.DeletionTimestamp == nil {
		t.Errorf("the pod must still be there (UID %s), Terminating, while a volume of it is not fenced: %v", pod.UID, podSummary(now, err))
	}
	if reqs := forceDeletes(t, env.NS, pod.Name, down); len(reqs) > 0 {
		t.Errorf("csi-fence-attacher force-deleted the pod with a volume not fenced: %+v", reqs)
	}
	fr, err := frs.Get(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Status.Phase == fencingv1alpha1.PhaseFenced || !strings.Contains(fr.Status.ErrorMessage, vol2) {
		t.Errorf("the request must say the node is not fenced, and why: phase %q, error %q", fr.Status.Phase, fr.Status.ErrorMessage)
	}
	evs, err := cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + victim + ",reason=FenceFailed"})
	if err != nil || !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, vol2) }) {
		t.Errorf("no FenceFailed event on %s naming %s: %v, %v", victim, vol2, evs, err)
	}
	expectAccess(t, d1, vol1, victim, array.AccessFenced)
	expectAccess(t, d2, vol2, victim, array.AccessGranted)
	expectNoViolations(t)

	// The second driver agrees now: the whole node is fenced, the pod fails
	// over with both its volumes.
	agreed := time.Now()
	if err := refuse.Clear(); err != nil {
		t.Fatal(err)
	}
	newNode, err := env.WaitAttached(ctx, 0, victim, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the pod runs on %s with both volumes attached", newNode)
	if _, ok := node.first(agreed, func(s nodeState) bool { return s.complete }); !ok {
		t.Errorf("%s never got FencingComplete=True once both drivers fenced it", victim)
	}
	// The old pod was force-deleted by csi-fence-attacher (the node is
	// down: no kubelet deletes it), and nothing the product did after that
	// changed its replacement, which has the same name: both drivers'
	// controllers decide about the pod from their caches.
	reqs := forceDeletes(t, env.NS, pod.Name, agreed)
	for _, r := range reqs {
		t.Logf("csi-fence-attacher: %s pods/%s %s: %d", r.Verb, r.Subresource, r.Time.Format(time.StampMilli), r.Code)
	}
	i := slices.IndexFunc(reqs, func(r framework.AuditEvent) bool { return r.Verb == "delete" && r.Code == http.StatusOK })
	if i < 0 {
		t.Errorf("no force-delete of the pod by csi-fence-attacher: %+v", reqs)
	} else {
		for _, r := range reqs[i+1:] {
			if r.Time.After(reqs[i].Time) && r.Code < 300 {
				t.Errorf("csi-fence-attacher changed the replacement of the pod it force-deleted: %+v after %+v", r, reqs[i])
			}
		}
	}

	if err := env.PowerOn(ctx, victim); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, victim, fencedVolume{d1, vol1}, fencedVolume{d2, vol2})
	expectNoViolations(t)
}

// expectAccess checks what the array of driver d grants node of volume.
func expectAccess(t *testing.T, d *framework.Driver, volume, node, want string) {
	t.Helper()
	s, err := d.Array.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Volumes[volume].Publications[node]; p == nil || p.Access != want {
		t.Errorf("the array of %s shows %s on %s as %+v, want %s", d.Name, volume, node, p, want)
	}
}
