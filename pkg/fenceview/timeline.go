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

package fenceview

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// Entry is one step of a node's failover.
type Entry struct {
	Time metav1.Time `json:"time"`
	// Source is where it was read: Node, FencingRequest, or Event.
	Source string `json:"source"`
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// Timeline is a node's failover, oldest step first.
type Timeline struct {
	Node    string  `json:"node"`
	Entries []Entry `json:"entries"`
}

// GetTimeline reconstructs the failover of node after the fact, from what
// the API keeps: the Node's conditions and taints (their times), its
// FencingRequest's times (the record of every fence, cleanup and
// force-deletion), and the Events on the Node, the record, the
// VolumeAttachments of its recorded volumes and the pods it force-deleted.
// Events expire (an hour by default) and a taint or condition keeps only its
// last transition: the record's times are the ones that last.
func GetTimeline(ctx context.Context, kube kubernetes.Interface, frs *fencingv1alpha1.Client, node string) (*Timeline, error) {
	tl := &Timeline{Node: node, Entries: []Entry{}}
	add := func(t *metav1.Time, source, what, detail string) {
		if t == nil || t.IsZero() {
			return
		}
		tl.Entries = append(tl.Entries, Entry{Time: metav1.NewTime(t.UTC()), Source: source, What: what, Detail: detail})
	}
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n = nil
	case err != nil:
		return nil, fmt.Errorf("reading Node %s: %w", node, err)
	}
	fr, err := frs.Get(ctx, node)
	switch {
	case apierrors.IsNotFound(err):
		fr = nil
	case err != nil:
		return nil, fmt.Errorf("reading the FencingRequest of %s: %w", node, err)
	}
	if n == nil && fr == nil {
		return nil, fmt.Errorf("node %s: no Node and no FencingRequest", node)
	}
	if n != nil {
		for _, c := range n.Status.Conditions {
			switch string(c.Type) {
			case string(corev1.NodeReady):
				what := "node Ready"
				if c.Status != corev1.ConditionTrue {
					what = "node NotReady (Ready=" + string(c.Status) + ")"
				}
				add(&c.LastTransitionTime, "Node", what, join(c.Reason, c.Message))
			case contract.ConditionFencingTriaged, contract.ConditionFencingRequired, contract.ConditionFencingComplete:
				add(&c.LastTransitionTime, "Node", fmt.Sprintf("condition %s=%s", c.Type, c.Status), join(c.Reason, c.Message))
			}
		}
		for _, t := range n.Spec.Taints {
			if t.TimeAdded != nil {
				add(t.TimeAdded, "Node", "taint "+t.Key+":"+string(t.Effect)+" added", t.Value)
			}
		}
	}
	if fr != nil {
		addRecord(fr, add)
	}
	events, err := timelineEvents(ctx, kube, node, fr)
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		t := e.FirstTimestamp
		if t.IsZero() {
			t = metav1.NewTime(e.EventTime.Time)
		}
		detail := e.Message
		if e.Count > 1 {
			detail += fmt.Sprintf(" (%d times, last %s)", e.Count, e.LastTimestamp.UTC().Format(time.RFC3339))
		}
		add(&t, "Event", fmt.Sprintf("%s %s on %s %s", e.Type, e.Reason, e.InvolvedObject.Kind, objectName(e.InvolvedObject)), detail)
	}
	// Oldest first; at the same second, in the order above (the Node, the
	// record in its own order, the Events), which follows the flow.
	sort.SliceStable(tl.Entries, func(i, j int) bool { return tl.Entries[i].Time.Before(&tl.Entries[j].Time) })
	return tl, nil
}

// addRecord adds the FencingRequest's steps, in the order of the flow.
func addRecord(fr *fencingv1alpha1.FencingRequest, add func(*metav1.Time, string, string, string)) {
	const src = "FencingRequest"
	origin := fr.Spec.Origin
	if origin == "" {
		origin = fencingv1alpha1.OriginManual
	}
	add(&fr.CreationTimestamp, src, "request created ("+string(origin)+")", fr.Spec.Reason)
	add(fr.Status.StartTime, src, "fencing started", "")
	for _, v := range fr.Status.Volumes {
		vol := v.VolumeHandle
		if v.PersistentVolumeName != "" {
			vol = v.PersistentVolumeName
		}
		vol += " (" + v.Driver + ")"
		if v.FencedTime == nil && v.FenceError != "" {
			add(v.StartedTime, src, "fence of "+vol+" recorded, not confirmed", v.FenceError)
		} else {
			add(v.StartedTime, src, "fence of "+vol+" recorded", "")
		}
		add(v.FencedTime, src, "volume "+vol+" fenced", "")
		add(v.CleanedTime, src, "volume "+vol+" cleaned on the node", "")
	}
	if nf := fr.Status.NodeFence; nf != nil {
		what := nf.Backend + " fence started"
		if nf.Attempts > 1 {
			what += fmt.Sprintf(" (attempt %d)", nf.Attempts)
		}
		detail := strings.Trim(nf.Config+" "+nf.Agent, " ")
		if nf.ConfirmedTime == nil && nf.Error != "" {
			detail = join(detail, nf.Error)
		}
		add(nf.StartedTime, src, what, detail)
		add(nf.OutOfServiceTaintAdded, src, "out-of-service taint added by csi-fence", "")
		add(nf.ConfirmedTime, src, "node confirmed off ("+nf.Backend+")", "")
	}
	for _, p := range fr.Status.ForceDeletedPods {
		add(p.DeletedTime, src, "pod "+p.Namespace+"/"+p.Name+" force-deleted", p.TerminationReason)
	}
	for _, c := range fr.Status.Conditions {
		add(&c.LastTransitionTime, src, fmt.Sprintf("record %s=%s", c.Type, c.Status), join(c.Reason, c.Message))
	}
	add(fr.Status.CompletionTime, src, "released: every fenced volume cleaned", "")
}

// timelineEvents lists the Events of the node's failover: on the Node and
// its FencingRequest (both cluster-scoped: their Events are in every
// namespace client-go's recorder may pick), on the VolumeAttachments of its
// recorded volumes, and on the pods it force-deleted. The field selector
// narrows the list on a real apiserver; the filter below is what decides.
func timelineEvents(ctx context.Context, kube kubernetes.Interface, node string, fr *fencingv1alpha1.FencingRequest) ([]corev1.Event, error) {
	type ref struct{ namespace, kind, name string }
	refs := []ref{{"", "Node", node}, {"", "FencingRequest", node}}
	if fr != nil {
		seen := map[string]bool{}
		for _, v := range fr.Status.Volumes {
			name := AttachmentName(v.VolumeHandle, v.Driver, node)
			if !seen[name] {
				seen[name] = true
				refs = append(refs, ref{"", "VolumeAttachment", name})
			}
		}
		for _, p := range fr.Status.ForceDeletedPods {
			refs = append(refs, ref{p.Namespace, "Pod", p.Name})
		}
	}
	var out []corev1.Event
	listed := map[string]bool{}
	for _, r := range refs {
		k := r.namespace + "/" + r.name
		if listed[k] {
			continue
		}
		listed[k] = true
		sel := fields.OneTermEqualSelector("involvedObject.name", r.name).String()
		list, err := kube.CoreV1().Events(r.namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("listing the Events of %s %s: %w", r.kind, r.name, err)
		}
		for _, e := range list.Items {
			for _, w := range refs {
				if e.InvolvedObject.Kind == w.kind && e.InvolvedObject.Name == w.name && (w.namespace == "" || e.InvolvedObject.Namespace == w.namespace) {
					out = append(out, e)
					break
				}
			}
		}
	}
	// The same Event is not listed twice (the lists are by name, and a Node
	// and its record share it): keep each once.
	sort.SliceStable(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	var uniq []corev1.Event
	for i, e := range out {
		if i == 0 || e.UID != out[i-1].UID || e.UID == "" {
			uniq = append(uniq, e)
		}
	}
	return uniq, nil
}

// AttachmentName is the name the attach/detach controller gives the
// VolumeAttachment of a CSI volume on a node (kubernetes'
// pkg/volume/csi.getAttachmentName), so that the Events of an attachment
// deleted since are still found from the record's driver and handle.
func AttachmentName(volumeHandle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(volumeHandle+driver+node)))
}

func objectName(r corev1.ObjectReference) string {
	if r.Namespace != "" {
		return r.Namespace + "/" + r.Name
	}
	return r.Name
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ": " + b
}

// Table writes the timeline as columns: the time (UTC), the time since the
// first step, where it was read, what happened.
func (tl *Timeline) Table() string {
	var b strings.Builder
	if len(tl.Entries) == 0 {
		fmt.Fprintf(&b, "Nothing recorded for node %s.\n", tl.Node)
		return b.String()
	}
	start := tl.Entries[0].Time.Time
	rows := [][]string{{"TIME", "SINCE", "SOURCE", "STEP"}}
	for _, e := range tl.Entries {
		what := e.What
		if e.Detail != "" {
			what += ": " + e.Detail
		}
		rows = append(rows, []string{e.Time.UTC().Format(time.RFC3339), "+" + shortDuration(e.Time.Sub(start)), e.Source, what})
	}
	writeColumns(&b, rows)
	return b.String()
}
