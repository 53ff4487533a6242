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
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// The machine backend beside a MachineHealthCheck, on a workload cluster
// built as Cluster API builds one without a control-plane provider: a
// control-plane Machine (so that the control plane counts as initialized,
// without which MHC judges no worker) and the test nodes the instances of
// a MachineSet's Machines, which MHC remediates through their MachineSet.
// With a control-plane Machine, Cluster API also drains the Node of a
// deleted Machine and deletes it once the instance is gone: the failover
// then ends on the deleted-Node path (nodegone.go).

// Cluster API's names the tests read on a Machine (its v1beta2 conditions).
const (
	// capiHealthCheckSucceeded is the condition MHC sets on its targets.
	capiHealthCheckSucceeded = "HealthCheckSucceeded"
	// capiOwnerRemediated is the condition MHC sets False on a Machine it
	// wants remediated, and its MachineSet updates when it deletes it.
	capiOwnerRemediated = "OwnerRemediated"
	// capiHasRemediateAnnotation is MHC's reason for a Machine annotated
	// cluster.x-k8s.io/remediate-machine.
	capiHasRemediateAnnotation = "HasRemediateAnnotation"
	// capiNodeDeleted is MHC's reason for a Machine whose Node is gone.
	capiNodeDeleted = "NodeDeleted"
	// capiMachineDeleting is the MachineSet's OwnerRemediated reason once
	// it deletes the Machine to remediate it.
	capiMachineDeleting = "MachineDeleting"
)

// mhcChecks are a MachineHealthCheck's checks as docs/machine-fencing.md
// recommends with this system deciding: a node merely unreachable (Ready
// Unknown) is left to the failover, a node that says it is not ready
// (Ready False) for long is MHC's.
var mhcChecks = []framework.UnhealthyNodeCondition{{Type: "Ready", Status: "False", Timeout: 300 * time.Second}}

// mhcChecksWithUnknown are common checks of a MachineHealthCheck, that
// remediate an unreachable node too, after five minutes: far later than
// the failover decides.
var mhcChecksWithUnknown = []framework.UnhealthyNodeCondition{
	{Type: "Ready", Status: "Unknown", Timeout: 300 * time.Second},
	{Type: "Ready", Status: "False", Timeout: 300 * time.Second},
}

// machineSeen is what a watch saw of one Machine, each time when it first
// saw it.
type machineSeen struct {
	created, deleting time.Time
	// ownerKind is the kind of its controller (MachineSet for a worker).
	ownerKind string
	// annotated: the remediate-machine annotation.
	annotated time.Time
	// unhealthy: MHC's HealthCheckSucceeded False, with its reasons in
	// the order seen.
	unhealthy        time.Time
	unhealthyReasons []string
	// ownerRemediated: an OwnerRemediated condition, with its reasons in
	// the order seen.
	ownerRemediated        time.Time
	ownerRemediatedReasons []string
	nodeRef                string
}

// machineWatch records the Machines of a namespace.
type machineWatch struct {
	mu   sync.Mutex
	seen map[string]*machineSeen
}

// watchMachines watches the Machines of namespace until the test ends.
func watchMachines(t *testing.T, namespace string) *machineWatch {
	t.Helper()
	w := &machineWatch{seen: map[string]*machineSeen{}}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(cluster.Dynamic, 0, namespace, nil)
	inf := factory.ForResource(machinefence.MachineResource).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, o interface{}) { w.observe(o) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	for r, ok := range factory.WaitForCacheSync(stop) {
		if !ok {
			t.Fatalf("the %s informer did not sync", r.Resource)
		}
	}
	return w
}

func (w *machineWatch) observe(o interface{}) {
	m, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen[m.GetName()]
	if s == nil {
		s = &machineSeen{created: m.GetCreationTimestamp().Time}
		if ref := metav1.GetControllerOf(m); ref != nil {
			s.ownerKind = ref.Kind
		}
		w.seen[m.GetName()] = s
	}
	if s.nodeRef == "" {
		s.nodeRef, _, _ = unstructured.NestedString(m.Object, "status", "nodeRef", "name")
	}
	if s.deleting.IsZero() && m.GetDeletionTimestamp() != nil {
		s.deleting = now
	}
	if _, ok := m.GetAnnotations()[machinefence.RemediateMachineAnnotation]; ok && s.annotated.IsZero() {
		s.annotated = now
	}
	if c := framework.Condition(m, capiHealthCheckSucceeded); c != nil && c["status"] == "False" {
		if s.unhealthy.IsZero() {
			s.unhealthy = now
		}
		s.unhealthyReasons = appendNew(s.unhealthyReasons, c["reason"])
	}
	if c := framework.Condition(m, capiOwnerRemediated); c != nil {
		if s.ownerRemediated.IsZero() {
			s.ownerRemediated = now
		}
		s.ownerRemediatedReasons = appendNew(s.ownerRemediatedReasons, c["reason"])
	}
}

// appendNew appends reason to reasons unless it is the last one.
func appendNew(reasons []string, reason interface{}) []string {
	r, _ := reason.(string)
	if len(reasons) > 0 && reasons[len(reasons)-1] == r {
		return reasons
	}
	return append(reasons, r)
}

// get returns a copy of what was seen of Machine name.
func (w *machineWatch) get(name string) (machineSeen, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.seen[name]
	if !ok {
		return machineSeen{}, false
	}
	c := *s
	c.ownerRemediatedReasons = slices.Clone(s.ownerRemediatedReasons)
	c.unhealthyReasons = slices.Clone(s.unhealthyReasons)
	return c, true
}

// remediations returns the Machines seen deleted, and those created since
// (a creationTimestamp has seconds only), by name.
func (w *machineWatch) remediations(since time.Time) (deleted, created []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, s := range w.seen {
		if !s.deleting.IsZero() {
			deleted = append(deleted, name)
		}
		if !s.created.Before(since.Truncate(time.Second)) {
			created = append(created, name)
		}
	}
	slices.Sort(deleted)
	slices.Sort(created)
	return deleted, created
}

// machineRequests returns the requests the product's ServiceAccounts made
// that changed a Machine of namespace (not reads), since.
func machineRequests(t *testing.T, namespace string, since time.Time) []framework.AuditEvent {
	t.Helper()
	events, err := cluster.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var out []framework.AuditEvent
	for _, e := range events {
		if strings.HasPrefix(e.User, productServiceAccounts) && e.APIGroup == machinefence.Group && e.Resource == "machines" &&
			e.Namespace == namespace && !slices.Contains([]string{"get", "list", "watch"}, e.Verb) && !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// failOverMHC partitions the victim with its workload writing and waits
// until the pod runs elsewhere with both volumes; it returns the new node
// and the partition's time, and logs the times of the failover.
func (s *machineSetup) failOverMHC(ctx context.Context, t *testing.T, rec *timeline.Recorder, mw *machineWatch) (string, time.Time) {
	t.Helper()
	down, _, _ := s.partition(ctx, t)
	newNode, err := s.env.WaitAttached(ctx, 0, s.victim, 300*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	attached := time.Since(down)
	rec.Print(&testWriter{t})
	released, _ := s.infra.Released(s.victim)
	m, _ := mw.get(s.wc.Machines[s.victim])
	at := func(ts time.Time) string {
		if ts.IsZero() {
			return "never"
		}
		return fmt.Sprintf("+%.1fs", ts.Sub(down).Seconds())
	}
	t.Logf("node down -> replacement attached on %s with both volumes: %.1fs (Machine annotated %s, being deleted %s, instance reported deleted %s)",
		newNode, attached.Seconds(), at(m.annotated), at(m.deleting), at(released))
	return newNode, down
}

// expectFailedOverThroughCAPI checks the end of a failover through the
// victim's Machine on a managed workload cluster: the provider reported
// the instance gone before anything moved, the record confirms a fence of
// that Machine, deletion started by startedBy, Cluster API deleted the
// Machine and its Node, and one Machine (not more) replaced it; the
// deleted instance writes no more, no array saw a violation. Then the node
// registers again under its name (a new instance reusing it) and is
// cleaned and released.
func (s *machineSetup) expectFailedOverThroughCAPI(ctx context.Context, t *testing.T, rec *timeline.Recorder, mw *machineWatch, down time.Time, newNode, startedBy string) {
	t.Helper()
	s.expectConfirmedMachineFence(ctx, t, rec, newNode, startedBy)
	machine := s.wc.Machines[s.victim]
	expectEvent(ctx, t, s.victim, "FenceEscalated")
	// Cluster API deletes the Machine's Node once the instance is gone,
	// and then the Machine.
	if err := framework.WaitFor(ctx, 60*time.Second, "Machine "+machine+" and node "+s.victim+" deleted by Cluster API", func(ctx context.Context) (bool, error) {
		_, err := cluster.Dynamic.Resource(machinefence.MachineResource).Namespace(s.wc.Namespace).Get(ctx, machine, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err = cluster.Client.CoreV1().Nodes().Get(ctx, s.victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Error(err)
	}
	// One remediation: the victim's Machine deleted, one Machine created
	// by the MachineSet to replace it, on a new instance.
	var replacement string
	if err := framework.WaitFor(ctx, 60*time.Second, "the MachineSet's replacement Machine on a new instance", func(ctx context.Context) (bool, error) {
		_, created := mw.remediations(down)
		for _, name := range created {
			if m, _ := mw.get(name); m.nodeRef != "" {
				replacement = name
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Error(err)
	}
	deleted, created := mw.remediations(down)
	launched := s.infra.Launched()
	rm, _ := mw.get(replacement)
	if !slices.Equal(deleted, []string{machine}) || len(created) != 1 || rm.ownerKind != "MachineSet" || len(launched) != 1 || rm.nodeRef != launched[0] {
		t.Errorf("not one remediation of %s: Machines deleted %v, created %v (%s owned by %q on %q), instances launched %v", machine, deleted, created, replacement, rm.ownerKind, rm.nodeRef, launched)
	}
	expectNoViolations(t)

	// A new instance registers under the node's name: its node agents
	// clean what was fenced there, and it is released.
	if err := cluster.CreateNode(ctx, s.victim, s.d1.Name, s.d2.Name); err != nil {
		t.Fatal(err)
	}
	if err := s.env.PowerOn(ctx, s.victim); err != nil {
		t.Fatal(err)
	}
	expectReleased(ctx, t, s.victim, fencedVolume{s.d1, s.vol1})
	expectNoViolations(t)
}

// With --machine-remediation=mhc, the failover decides when (the node
// found down by a live read, the storm guard, the intent written ahead)
// but asks the cluster's MachineHealthCheck to remediate: it annotates the
// Machine cluster.x-k8s.io/remediate-machine, MHC marks it for its owner,
// and its MachineSet deletes it. Cluster API drains the unreachable Node,
// deletes the InfraMachine, the provider stops the instance (5 s, its
// workload writing meanwhile) and only then reports it gone; nothing moves
// before. The MHC's own checks would remediate an unreachable node after
// five minutes only: the annotation is what remediated it. One Machine is
// deleted, one replacement created; the product deleted no Machine.
func TestMachineFenceAsksMachineHealthCheck(t *testing.T) {
	buildClusterAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := setupMachines(ctx, t, "mh", machineOptions{shutdown: 5 * time.Second, remediation: machinefence.ModeMHC, managed: true, mhc: &framework.HealthCheck{Checks: mhcChecksWithUnknown}})
	mw := watchMachines(t, s.wc.Namespace)
	rec := watchTimeline(t, s.env, s.victim, s.vol2)
	since := time.Now()
	newNode, down := s.failOverMHC(ctx, t, rec, mw)

	machine := s.wc.Machines[s.victim]
	m, _ := mw.get(machine)
	// MHC took the annotation for the reason, and the MachineSet deleted
	// the Machine to remediate it.
	if m.annotated.IsZero() || m.deleting.IsZero() || m.deleting.Before(m.annotated) || len(m.unhealthyReasons) == 0 || m.unhealthyReasons[0] != capiHasRemediateAnnotation ||
		!slices.Contains(m.ownerRemediatedReasons, capiMachineDeleting) {
		t.Errorf("Machine %s was not remediated by MHC on this system's annotation: %+v", machine, m)
	}
	// The product asked (an update of the Machine) and deleted nothing.
	reqs := machineRequests(t, s.wc.Namespace, since)
	asked := slices.ContainsFunc(reqs, func(e framework.AuditEvent) bool {
		return e.Verb == "update" && e.Name == machine && e.Code == http.StatusOK
	})
	if !asked || slices.ContainsFunc(reqs, func(e framework.AuditEvent) bool { return e.Verb == "delete" }) {
		t.Errorf("the product did not only ask MHC (one update of %s, no delete): %+v", machine, reqs)
	}
	expectEvent(ctx, t, s.victim, "MachineRemediationRequested")
	s.expectFailedOverThroughCAPI(ctx, t, rec, mw, down, newNode, machinefence.StartedByMHC)
}

// With --machine-remediation=delete (the default) and a MachineHealthCheck
// configured as docs/machine-fencing.md recommends (Ready Unknown, a node
// merely unreachable, left out of its checks), this system alone decides:
// it deletes the Machine once; MHC never marks it unhealthy before, nor
// for its owner to remediate (it skips a Machine being deleted), and the
// MachineSet replaces it once.
func TestMachineFenceDeletesBesideMachineHealthCheck(t *testing.T) {
	buildClusterAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := setupMachines(ctx, t, "md", machineOptions{shutdown: 5 * time.Second, managed: true, mhc: &framework.HealthCheck{Checks: mhcChecks}})
	mw := watchMachines(t, s.wc.Namespace)
	rec := watchTimeline(t, s.env, s.victim, s.vol2)
	since := time.Now()
	newNode, down := s.failOverMHC(ctx, t, rec, mw)

	machine := s.wc.Machines[s.victim]
	m, _ := mw.get(machine)
	// MHC made no decision of its own on the unreachable node: it never
	// found the Machine unhealthy but for its Node deleted by Cluster API
	// after the instance (a Machine being deleted, which it leaves
	// alone), and never asked its owner to remediate it.
	if m.deleting.IsZero() || !m.annotated.IsZero() || !m.ownerRemediated.IsZero() ||
		slices.ContainsFunc(m.unhealthyReasons, func(r string) bool { return r != capiNodeDeleted }) || (!m.unhealthy.IsZero() && m.unhealthy.Before(m.deleting)) {
		t.Errorf("MHC raced this system's deletion of Machine %s: %+v", machine, m)
	}
	t.Logf("MHC on Machine %s: HealthCheckSucceeded False for %v, OwnerRemediated %v", machine, m.unhealthyReasons, m.ownerRemediatedReasons)
	var deletes []framework.AuditEvent
	for _, e := range machineRequests(t, s.wc.Namespace, since) {
		if e.Verb == "delete" {
			deletes = append(deletes, e)
		}
	}
	if len(deletes) != 1 || deletes[0].Name != machine || deletes[0].Code != http.StatusOK {
		t.Errorf("not one deletion of Machine %s by the product: %+v", machine, deletes)
	}
	expectEvent(ctx, t, s.victim, "MachineDeleted")
	s.expectFailedOverThroughCAPI(ctx, t, rec, mw, down, newNode, machinefence.StartedByUs)
}

// A node back before MachineHealthCheck acted (S6): with
// --machine-remediation=mhc the failover asks MHC to remediate the
// partitioned node's Machine, but MHC's limit (remediate nothing while
// more than 0 Machines are unhealthy) holds it back; the record says the
// fence waits and nothing moves. The node comes back: this system
// withdraws its request (the remediate-machine annotation and its own mark,
// nothing else) and releases the node. Once the limit is lifted, MHC finds
// the Machine healthy: no Machine is deleted, none created, and the node
// keeps its instance.
func TestMachineFenceWithdrawsItsRequestWhenTheNodeIsBack(t *testing.T) {
	buildClusterAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := setupMachines(ctx, t, "mw", machineOptions{remediation: machinefence.ModeMHC, managed: true,
		mhc: &framework.HealthCheck{Checks: mhcChecksWithUnknown, Limit: ptr.To(0)}})
	mw := watchMachines(t, s.wc.Namespace)
	machine := s.wc.Machines[s.victim]
	machines := cluster.Dynamic.Resource(machinefence.MachineResource).Namespace(s.wc.Namespace)
	down, _, _ := s.partition(ctx, t)

	// Asked, and held back by MHC's limit: the fence waits, nothing moves.
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	if err := framework.WaitFor(ctx, 120*time.Second, "Machine "+machine+" annotated for MHC, MHC holding it back, the record waiting", func(ctx context.Context) (bool, error) {
		m, err := machines.Get(ctx, machine, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if _, ok := m.GetAnnotations()[machinefence.RemediateMachineAnnotation]; !ok {
			return false, nil
		}
		if c := framework.Condition(m, capiHealthCheckSucceeded); c == nil || c["reason"] != capiHasRemediateAnnotation {
			return false, nil
		}
		mhc, err := s.capi.WorkerHealthCheck(ctx, s.wc)
		if err != nil || framework.ConditionStatus(mhc, "RemediationAllowed") != "False" {
			return false, err
		}
		fr, err := frs.Get(ctx, s.victim)
		if err != nil || fr.Status.NodeFence == nil || fr.Status.NodeFence.Machine == nil {
			return false, nil
		}
		return fr.Status.NodeFence.Machine.DeletionStartedBy == machinefence.StartedByMHC && strings.Contains(fr.Status.NodeFence.Output, "is not being deleted"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if moved := s.moved(ctx); len(moved) > 0 {
		t.Fatalf("moved while MHC holds the remediation back: %q", moved)
	}
	t.Logf("%.1fs after the partition: asked, MHC holds it back", time.Since(down).Seconds())

	// The node comes back before MHC acted.
	if err := s.env.PowerOn(ctx, s.victim); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "this system's request withdrawn from Machine "+machine, func(ctx context.Context) (bool, error) {
		m, err := machines.Get(ctx, machine, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, requested := m.GetAnnotations()[machinefence.RemediateMachineAnnotation]
		_, ours := m.GetAnnotations()[machinefence.RemediationRequestedAnnotation]
		return !requested && !ours, nil
	}); err != nil {
		t.Error(err)
	}
	expectEvent(ctx, t, s.victim, "MachineRemediationWithdrawn")
	expectReleased(ctx, t, s.victim, fencedVolume{s.d1, s.vol1})
	if fr, err := frs.Get(ctx, s.victim); err != nil || !strings.Contains(fr.Status.NodeFence.Output, "withdrawn") {
		t.Errorf("the record does not say the request was withdrawn: %v %+v", err, fr.Status.NodeFence)
	}

	// MHC's limit lifted: MHC judges the Machine again, healthy now.
	gen, err := s.capi.LiftHealthCheckLimit(ctx, s.wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 60*time.Second, "MHC, its limit lifted, finding Machine "+machine+" healthy", func(ctx context.Context) (bool, error) {
		m, err := machines.Get(ctx, machine, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if m.GetDeletionTimestamp() != nil || framework.Condition(m, capiOwnerRemediated) != nil {
			return false, fmt.Errorf("MHC remediates Machine %s of the healthy node: %v", machine, framework.Condition(m, capiHealthCheckSucceeded))
		}
		mhc, err := s.capi.WorkerHealthCheck(ctx, s.wc)
		if err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(mhc.Object, "status", "observedGeneration")
		return observed >= gen && framework.ConditionStatus(mhc, "RemediationAllowed") == "True" && framework.ConditionStatus(m, capiHealthCheckSucceeded) == "True", nil
	}); err != nil {
		t.Error(err)
	}
	if deleted, created := mw.remediations(down); len(deleted) > 0 || len(created) > 0 {
		t.Errorf("a remediation after the node was back: Machines deleted %v, created %v", deleted, created)
	}
	if _, ok := s.infra.Released(s.victim); ok {
		t.Errorf("the instance of %s, back, was deleted", s.victim)
	}
	expectNoViolations(t)
}
