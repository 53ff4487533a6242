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

// Package timeline watches the API for the milestones of one failover and
// records when each happened, so the demo can print a timeline a person can
// read and the benchmark can measure the steps, from the same observations.
package timeline

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Milestone names, in the order of a failover.
const (
	NodeDown          = "node down"
	NodeNotReady      = "node NotReady"
	Quarantined       = "node quarantined"
	PodEvicted        = "pod evicted (Terminating)"
	StorageFenced     = "storage fenced"
	PodForceDeleted   = "pod force-deleted"
	OldVADeleted      = "old attachment removed"
	PodRecreated      = "replacement pod created"
	PodReplaced       = "pod replaced on another node"
	NewAttachment     = "new attachment created"
	AttachedElsewhere = "volume attached elsewhere"
	NodeBack          = "node back"
	NodeReady         = "node Ready"
	NodeCleaned       = "node cleaned"
	TaintsRemoved     = "taints removed"
)

// Event is one observed milestone.
type Event struct {
	At     time.Time
	What   string
	Detail string
}

// Target names what one failover is about.
type Target struct {
	Node      string // the node that fails
	Namespace string
	Pod       string // the pod on it (a StatefulSet pod keeps its name)
	PVName    string // its volume
}

// Recorder records milestones of one Target from informers.
type Recorder struct {
	target Target
	start  time.Time

	mu     sync.Mutex
	events []Event
	seen   map[string]bool
	notify func(Event)
	oldUID string
	// factories are the informers Watch started, for Wait.
	factories []interface{ Shutdown() }
}

// New returns a Recorder; notify (may be nil) is called for every milestone
// as it is observed, so progress is visible while a run goes on.
func New(target Target, notify func(Event)) *Recorder {
	return &Recorder{target: target, start: time.Now(), seen: map[string]bool{}, notify: notify}
}

// Mark records a milestone observed outside the API (e.g. "node down" when
// the harness stops the node's heartbeat). Only the first mark of a name counts.
func (r *Recorder) Mark(what, detail string) {
	r.mu.Lock()
	if r.seen[what] {
		r.mu.Unlock()
		return
	}
	r.seen[what] = true
	e := Event{At: time.Now(), What: what, Detail: detail}
	r.events = append(r.events, e)
	notify := r.notify
	r.mu.Unlock()
	if notify != nil {
		notify(e)
	}
}

// Has reports whether a milestone was observed.
func (r *Recorder) Has(what string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[what]
}

// At returns when a milestone was observed.
func (r *Recorder) At(what string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.What == what {
			return e.At, true
		}
	}
	return time.Time{}, false
}

// Events returns the milestones in the order observed.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]Event(nil), r.events...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Print writes the timeline with seconds since the first milestone.
func (r *Recorder) Print(w io.Writer) {
	events := r.Events()
	if len(events) == 0 {
		fmt.Fprintln(w, "(no milestones observed)")
		return
	}
	t0 := events[0].At
	for _, e := range events {
		fmt.Fprintf(w, "  +%6.1fs  %-30s %s\n", e.At.Sub(t0).Seconds(), e.What, e.Detail)
	}
}

// Watch starts informers on nodes, pods, VolumeAttachments and
// FencingRequests and records milestones until stop is closed (see Wait).
func (r *Recorder) Watch(cs kubernetes.Interface, dyn dynamic.Interface, stop <-chan struct{}) error {
	f := informers.NewSharedInformerFactory(cs, 0)
	nodes := f.Core().V1().Nodes().Informer()
	pods := f.Core().V1().Pods().Informer()
	vas := f.Storage().V1().VolumeAttachments().Informer()
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	frs := df.ForResource(fencingv1alpha1.Resource).Informer()

	handler := func(fn func(obj interface{})) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    fn,
			UpdateFunc: func(_, obj interface{}) { fn(obj) },
			DeleteFunc: func(obj interface{}) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				r.onDelete(obj)
			},
		}
	}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		fn  func(interface{})
	}{{nodes, r.onNode}, {pods, r.onPod}, {vas, r.onVA}, {frs, r.onFR}} {
		if _, err := reg.inf.AddEventHandler(handler(reg.fn)); err != nil {
			return err
		}
	}
	f.Start(stop)
	df.Start(stop)
	r.mu.Lock()
	r.factories = append(r.factories, f, df)
	r.mu.Unlock()
	return nil
}

// Wait returns once the informers Watch started have ended, which they do
// once its stop channel is closed: close it, then Wait, before the control
// plane they watch goes away.
func (r *Recorder) Wait() {
	r.mu.Lock()
	factories := r.factories
	r.factories = nil
	r.mu.Unlock()
	for _, f := range factories {
		f.Shutdown()
	}
}

func (r *Recorder) onNode(obj interface{}) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != r.target.Node {
		return
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	quarantined := false
	for _, t := range n.Spec.Taints {
		if t.Key == contract.QuarantineTaintKey {
			quarantined = true
		}
	}
	if !ready {
		r.Mark(NodeNotReady, "")
	}
	if quarantined {
		r.Mark(Quarantined, contract.QuarantineTaintKey)
	}
	if r.Has(NodeBack) && ready {
		r.Mark(NodeReady, "")
	}
	if r.Has(Quarantined) && !quarantined && r.Has(NodeBack) {
		r.Mark(TaintsRemoved, "quarantine lifted")
	}
}

func (r *Recorder) onPod(obj interface{}) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Namespace != r.target.Namespace || p.Name != r.target.Pod {
		return
	}
	r.mu.Lock()
	if r.oldUID == "" && p.Spec.NodeName == r.target.Node {
		r.oldUID = string(p.UID)
	}
	old := r.oldUID
	r.mu.Unlock()
	if string(p.UID) == old && p.DeletionTimestamp != nil {
		r.Mark(PodEvicted, "on "+p.Spec.NodeName)
	}
	if old != "" && string(p.UID) != old {
		r.Mark(PodRecreated, "")
		if p.Spec.NodeName != "" && p.Spec.NodeName != r.target.Node {
			r.Mark(PodReplaced, "on "+p.Spec.NodeName)
		}
	}
}

func (r *Recorder) onVA(obj interface{}) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != r.target.PVName {
		return
	}
	if va.Spec.NodeName != r.target.Node {
		r.Mark(NewAttachment, va.Name)
		if va.Status.Attached {
			r.Mark(AttachedElsewhere, "on "+va.Spec.NodeName)
		}
	}
}

func (r *Recorder) onFR(obj interface{}) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetName() != r.target.Node {
		return
	}
	fr, err := fencingv1alpha1.FromUnstructured(u)
	if err != nil {
		return
	}
	for _, v := range fr.Status.Volumes {
		if v.PersistentVolumeName != r.target.PVName && !strings.Contains(v.VolumeHandle, r.target.PVName) {
			continue
		}
		if v.FencedTime != nil {
			r.Mark(StorageFenced, fmt.Sprintf("%s on %s (driver %s)", v.VolumeHandle, r.target.Node, v.Driver))
		}
		if v.CleanedTime != nil {
			r.Mark(NodeCleaned, "forced unpublish/unstage of "+v.VolumeHandle)
		}
	}
}

func (r *Recorder) onDelete(obj interface{}) {
	switch o := obj.(type) {
	case *corev1.Pod:
		r.mu.Lock()
		old := r.oldUID
		r.mu.Unlock()
		if o.Namespace == r.target.Namespace && o.Name == r.target.Pod && string(o.UID) == old {
			r.Mark(PodForceDeleted, deletedAs(o))
		}
	case *storagev1.VolumeAttachment:
		if o.Spec.NodeName == r.target.Node && o.Spec.Source.PersistentVolumeName != nil && *o.Spec.Source.PersistentVolumeName == r.target.PVName {
			r.Mark(OldVADeleted, o.Name)
		}
	}
}

// deletedAs says what the last state seen of a deleted pod records of why:
// its phase, its DisruptionTarget condition and its termination reason.
func deletedAs(p *corev1.Pod) string {
	disruption := "none"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			disruption = string(c.Status) + " " + c.Reason
		}
	}
	reason, ok := p.Annotations[contract.TerminationReasonAnnotation]
	if !ok {
		reason = "none"
	}
	return fmt.Sprintf("phase %s, DisruptionTarget %s, termination reason %s", p.Status.Phase, disruption, reason)
}

// Since returns the duration between two milestones, if both were observed.
func (r *Recorder) Since(from, to string) (time.Duration, bool) {
	a, ok1 := r.At(from)
	b, ok2 := r.At(to)
	if !ok1 || !ok2 {
		return 0, false
	}
	return b.Sub(a), true
}

// Percentile is the p-th percentile (nearest rank) of ds, 0 when empty.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}
