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
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
	"github.com/csi-fence/fence-attacher/test/kubeletsim"
)

// attacherUser is the user of csi-fence-attacher in the controller role
// (every driver's), the only one that may force-delete a pod.
const attacherUser = productServiceAccounts + "csi-fence-attacher"

// nodeWatch keeps every state of a node's Ready and FencingComplete
// conditions that a watch delivered, with when it did: a test can tell
// whether a condition was set at any moment of a window, not only what it
// is when the test looks.
type nodeWatch struct {
	mu     sync.Mutex
	states []nodeState
}

type nodeState struct {
	at              time.Time
	ready, complete bool
}

// watchNode watches the node until the test ends.
func watchNode(t *testing.T, name string) *nodeWatch {
	t.Helper()
	w := &nodeWatch{}
	f := informers.NewSharedInformerFactoryWithOptions(cluster.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}))
	record := func(o interface{}) {
		if n, ok := o.(*corev1.Node); ok {
			w.mu.Lock()
			w.states = append(w.states, nodeState{at: time.Now(), ready: framework.NodeReady(n), complete: conditionTrue(n, contract.ConditionFencingComplete)})
			w.mu.Unlock()
		}
	}
	if _, err := f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, o interface{}) { record(o) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); f.Shutdown() })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return w
}

// first returns the first state observed at or after since that matches.
func (w *nodeWatch) first(since time.Time, match func(nodeState) bool) (nodeState, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.states {
		if !s.at.Before(since) && match(s) {
			return s, true
		}
	}
	return nodeState{}, false
}

func conditionTrue(n *corev1.Node, t string) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// forceDeletes returns the requests by which csi-fence-attacher deleted pod
// ns/name, or marked it for that (the pod GC's patches of its annotations
// and status), received at or after since, as the apiserver's audit log
// holds them.
func forceDeletes(t *testing.T, ns, name string, since time.Time) []framework.AuditEvent {
	t.Helper()
	events, err := cluster.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var out []framework.AuditEvent
	for _, e := range events {
		if e.User == attacherUser && e.Resource == "pods" && e.Namespace == ns && e.Name == name &&
			(e.Verb == "delete" || e.Verb == "patch") && !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// fencedVolume is a volume of a driver fenced on a node in a test.
type fencedVolume struct {
	driver *framework.Driver
	handle string
}

// expectReleased waits until the node agents of node have cleaned each of
// vols and the node's FencingRequest is Complete without its finalizer, and
// then checks that nothing of the failover is left: the controller lifts
// the quarantine and the fencing conditions before it completes the record,
// no array holds any of vols quarantined there, and (once the node's
// kubelets have caught up) none is still in the node's volumesInUse.
func expectReleased(ctx context.Context, t *testing.T, node string, vols ...fencedVolume) {
	t.Helper()
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := framework.WaitFor(ctx, 180*time.Second, fmt.Sprintf("every volume fenced on %s cleaned and the request complete", node), func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		for _, v := range vols {
			if e := fencerecord.Find(fr, v.driver.Name, v.handle); e == nil || e.CleanedTime == nil {
				return false, fmt.Errorf("%s of %s: %+v", v.handle, v.driver.Name, e)
			}
		}
		return fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.HasTaint(n, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule) {
		t.Errorf("quarantine taint left on %s", node)
	}
	for _, c := range n.Status.Conditions {
		if strings.HasPrefix(string(c.Type), "Fencing") {
			t.Errorf("condition %s=%s left on %s", c.Type, c.Status, node)
		}
	}
	var inUse []corev1.UniqueVolumeName
	for _, v := range vols {
		s, err := v.driver.Array.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if p := s.Volumes[v.handle].Publications[node]; p != nil && p.Access == array.AccessFenced {
			t.Errorf("the array of %s still holds %s quarantined on %s: %+v", v.driver.Name, v.handle, node, p)
		}
		inUse = append(inUse, kubeletsim.UniqueVolumeName(v.driver.Name, v.handle))
	}
	if err := framework.WaitFor(ctx, 30*time.Second, fmt.Sprintf("%v out of the volumesInUse of %s", inUse, node), func(ctx context.Context) (bool, error) {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && !slices.ContainsFunc(n.Status.VolumesInUse, func(u corev1.UniqueVolumeName) bool { return slices.Contains(inUse, u) }), err
	}); err != nil {
		t.Error(err)
	}
}

// podSummary says which pod a Get found, for a failure message.
func podSummary(p *corev1.Pod, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("UID %s on %s, phase %s, deletionTimestamp %v", p.UID, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp)
}

// twoDriverPod is a scenario of one pod with a volume of the product's
// driver and one of a second driver, added with opts: the nodes (prefix,
// count) run both; prepare runs between the driver's start and the nodes'.
type twoDriverPod struct {
	env        *scenario.Env
	d1, d2     *framework.Driver
	victim     string // the node the pod runs on
	vol1, vol2 string
}

func setupTwoDriverPod(ctx context.Context, t *testing.T, opts framework.DriverOptions, prefix string, nodes int, prepare func(d2 *framework.Driver)) twoDriverPod {
	t.Helper()
	d2, err := product.AddDriver(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { product.RemoveDriver(d2) })
	if prepare != nil {
		prepare(d2)
	}
	s := twoDriverPod{d1: product.Driver, d2: d2}
	s.env, err = scenario.SetupWith(ctx, cluster, product, tLogger{t}, scenario.Options{
		Prefix: prefix, Nodes: nodes, Replicas: 1, Drivers: []*framework.Driver{s.d1, d2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.victim, err = s.env.WaitAttached(ctx, 0, "", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.vol1, s.vol2 = s.env.DriverVolumes[s.d1.Name][0], s.env.DriverVolumes[d2.Name][0]
	return s
}

// watchTimeline records the milestones of the failover of replica 0 of env
// from victim (volume pv), logging each, until the test ends.
func watchTimeline(t *testing.T, env *scenario.Env, victim, pv string) *timeline.Recorder {
	t.Helper()
	rec := timeline.New(timeline.Target{Node: victim, Namespace: env.NS, Pod: env.PodName(0), PVName: pv},
		func(e timeline.Event) { t.Logf("milestone: %s %s", e.What, e.Detail) })
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	if err := rec.Watch(cluster.Client, cluster.Dynamic, stop); err != nil {
		t.Fatal(err)
	}
	return rec
}
