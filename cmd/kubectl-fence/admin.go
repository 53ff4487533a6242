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

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// adminOptions are the flags of fence, release, pause and resume.
type adminOptions struct {
	k          kubeFlags
	verb       string
	node       string
	reason     string
	stormGuard string
	timeout    time.Duration
}

// parseAdmin parses fence and release (one NODE; --reason for fence) and
// pause and resume (no argument; --reason required for pause; the storm
// guard's namespace as status takes it).
func parseAdmin(verb string, args []string) (*adminOptions, error) {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	o := &adminOptions{verb: verb}
	o.k.register(fs)
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "bound of the API requests")
	wantNode := verb == "fence" || verb == "release"
	switch verb {
	case "fence":
		fs.StringVar(&o.reason, "reason", "", "why the node is fenced (the FencingRequest's spec.reason)")
	case "pause":
		fs.StringVar(&o.reason, "reason", "", "why fencing is paused, shown by status (required)")
	}
	if !wantNode {
		fs.StringVar(&o.stormGuard, "storm-guard-namespace", "kube-system", "namespace of the storm guard's Lease (the sidecars' --storm-guard-namespace)")
	}
	pos, err := interleave(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case wantNode && len(pos) != 1:
		return nil, fmt.Errorf("%s: want exactly one NODE", verb)
	case wantNode:
		o.node = pos[0]
	case len(pos) > 0:
		return nil, fmt.Errorf("%s: unexpected arguments %q", verb, pos)
	}
	if verb == "pause" && o.reason == "" {
		return nil, fmt.Errorf("pause: --reason is required (it is the pause switch's value, shown by status)")
	}
	return o, nil
}

func (o *adminOptions) clients() (kubernetes.Interface, dynamic.Interface, error) {
	v := viewOptions{k: o.k}
	return v.clients()
}

// adminVerb parses and runs one of the four verbs against the cluster.
func adminVerb(verb string, run func(context.Context, *adminOptions, kubernetes.Interface, dynamic.Interface, io.Writer) error) func([]string) error {
	return func(args []string) error {
		o, err := parseAdmin(verb, args)
		if err != nil {
			return err
		}
		kube, dyn, err := o.clients()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		return run(ctx, o, kube, dyn, os.Stdout)
	}
}

// describe says what an existing FencingRequest is, for refusals.
func describe(fr *fencingv1alpha1.FencingRequest) string {
	origin := fr.Spec.Origin
	if origin == "" {
		origin = fencingv1alpha1.OriginManual
	}
	phase := string(fr.Status.Phase)
	if phase == "" {
		phase = "no phase yet"
	}
	s := fmt.Sprintf("origin %s, %s", origin, phase)
	if fr.Spec.Released {
		s += ", released"
	}
	if fr.DeletionTimestamp != nil {
		s += fmt.Sprintf(", withdrawn at %s and kept by its finalizer %s until its volumes are cleaned", fr.DeletionTimestamp.UTC().Format(time.RFC3339), contract.RecordFinalizer)
	}
	return s
}

// runFence creates the admin's FencingRequest for the node: named after it,
// spec.nodeName the node (the CRD's rule), origin Manual. It refuses when
// the node has a FencingRequest already, whatever its origin: there is one
// per node, and the existing one is either the admin's or the failover's
// record, which must not be replaced while it has work to do. An admin's
// request released and Complete has none: the new one replaces it.
func runFence(ctx context.Context, o *adminOptions, kube kubernetes.Interface, dyn dynamic.Interface, out io.Writer) error {
	node, err := kube.CoreV1().Nodes().Get(ctx, o.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("fence: node %q not found: nothing created (a FencingRequest fences a Node by its name)", o.node)
	}
	if err != nil {
		return fmt.Errorf("fence: reading node %q: %w", o.node, err)
	}
	frs := fencingv1alpha1.NewClient(dyn)
	refuse := func(fr *fencingv1alpha1.FencingRequest) error {
		hint := "`kubectl fence release " + o.node + "` withdraws it"
		switch {
		case fr.Spec.Origin == fencingv1alpha1.OriginAutomatic:
			hint = "it is the failover's record of the node, released by the controller once every volume recorded there is cleaned"
		case fr.DeletionTimestamp != nil:
			hint = "a new request can be created once it is gone"
		case fr.Spec.Released:
			hint = "it was released and waits for its volumes to be cleaned; a new request can be created once it is Complete"
		}
		return fmt.Errorf("fence: fencingrequest/%s already exists (%s): nothing created; %s (kubectl fence status, timeline %s)", o.node, describe(fr), hint, o.node)
	}
	existing, err := frs.Get(ctx, o.node)
	switch {
	case err == nil && finished(existing):
		// A released request whose work is done is only a record now: the
		// new request takes its place (only that one, by UID).
		uid := existing.UID
		err := dyn.Resource(fencingv1alpha1.Resource).Delete(ctx, o.node, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("fence: replacing the completed fencingrequest/%s: %w", o.node, err)
		}
		fmt.Fprintf(out, "fencingrequest/%s of an earlier fence was released and Complete: replaced\n", o.node)
	case err == nil:
		return refuse(existing)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("fence: reading fencingrequest/%s: %w", o.node, err)
	}
	_, err = frs.Create(ctx, &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: o.node},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: o.node,
			Origin:   fencingv1alpha1.OriginManual,
			Reason:   o.reason,
		},
	})
	if apierrors.IsAlreadyExists(err) {
		if existing, gerr := frs.Get(ctx, o.node); gerr == nil {
			return refuse(existing)
		}
	}
	if err != nil {
		return fmt.Errorf("fence: creating fencingrequest/%s: %w", o.node, err)
	}
	fmt.Fprintf(out, "fencingrequest/%s created (origin Manual", o.node)
	if o.reason != "" {
		fmt.Fprintf(out, ", reason: %s", o.reason)
	}
	fmt.Fprintln(out, ")")
	if nodeReady(node) {
		fmt.Fprintf(out, "node %s is Ready: its volumes' storage is fenced while it runs, and no pod on it is force-deleted\n", o.node)
	}
	fmt.Fprintf(out, "follow it with `kubectl fence timeline %s`; `kubectl fence release %s` withdraws it\n", o.node, o.node)
	return nil
}

// finished reports whether fr is an admin's request that was released and
// whose work is done: Complete, nothing left to clean, no finalizer.
func finished(fr *fencingv1alpha1.FencingRequest) bool {
	return fr.Spec.Origin != fencingv1alpha1.OriginAutomatic && fr.Spec.Released && fr.DeletionTimestamp == nil &&
		fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0 && !fencerecord.Pending(fr)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runRelease withdraws the admin's FencingRequest for the node through its
// spec: spec.released=true, by an update of the object it read. The
// failover writes the request's status while it fences (its intents and
// outcomes), which conflicts with the update without changing what it
// decides: on a conflict it reads the request again, decides again and
// retries (client-go's default backoff, a few tries). Nothing new is
// fenced for it from then on; the failover lifts the quarantine once the
// node agent has cleaned every volume recorded in it, and marks it
// Complete. The request is never deleted: it stays as the record of what
// was done. The failover's automatic record is refused: the controller
// releases that node itself once it is clean.
func runRelease(ctx context.Context, o *adminOptions, _ kubernetes.Interface, dyn dynamic.Interface, out io.Writer) error {
	frs := fencingv1alpha1.NewClient(dyn)
	var updated, withdrawn *fencingv1alpha1.FencingRequest
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr, err := frs.Get(ctx, o.node)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("release: node %q has no FencingRequest: nothing to release", o.node)
		}
		if err != nil {
			return fmt.Errorf("release: reading fencingrequest/%s: %w", o.node, err)
		}
		if fr.Spec.Origin == fencingv1alpha1.OriginAutomatic {
			return fmt.Errorf("release: fencingrequest/%s is the failover's automatic record (%s), not an admin's request: nothing changed; the controller releases the node itself once every volume recorded there is cleaned (kubectl fence timeline %s)", o.node, describe(fr), o.node)
		}
		if fr.Withdrawn() {
			withdrawn = fr
			return nil
		}
		fr.Spec.Released = true
		if updated, err = frs.Update(ctx, fr); err != nil {
			return fmt.Errorf("release: setting spec.released on fencingrequest/%s: %w", o.node, err)
		}
		return nil
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("release: fencingrequest/%s kept changing while it was released: nothing changed; run it again", o.node)
	}
	if err != nil {
		return err
	}
	if withdrawn != nil {
		fmt.Fprintf(out, "fencingrequest/%s already withdrawn (%s)\n", o.node, describe(withdrawn))
		return nil
	}
	pending := 0
	for _, v := range updated.Status.Volumes {
		if v.CleanedTime == nil {
			pending++
		}
	}
	if pending == 0 {
		fmt.Fprintf(out, "fencingrequest/%s released (spec.released=true): nothing new is fenced for it; nothing recorded in it is left to clean: the failover lifts the quarantine, and the request is Complete and kept as the record (kubectl fence status)\n", o.node)
		return nil
	}
	fmt.Fprintf(out, "fencingrequest/%s released (spec.released=true): nothing new is fenced for it; the node stays quarantined until the node agent has cleaned each volume recorded in it (%d not cleaned yet), then the request is Complete and kept as the record (kubectl fence status)\n",
		o.node, pending)
	return nil
}

// runPause sets the pause switch on the storm guard's Lease by a merge
// patch (the admissions the sidecars write beside it are left alone),
// creating the Lease if no sidecar has yet.
func runPause(ctx context.Context, o *adminOptions, kube kubernetes.Interface, _ dynamic.Interface, out io.Writer) error {
	return setPaused(ctx, o, kube, out, &o.reason)
}

// runResume removes the pause switch.
func runResume(ctx context.Context, o *adminOptions, kube kubernetes.Interface, _ dynamic.Interface, out io.Writer) error {
	return setPaused(ctx, o, kube, out, nil)
}

func setPaused(ctx context.Context, o *adminOptions, kube kubernetes.Interface, out io.Writer, reason *string) error {
	leases := kube.CoordinationV1().Leases(o.stormGuard)
	where := fmt.Sprintf("Lease %s/%s", o.stormGuard, fenceview.StormGuardLease)
	lease, err := leases.Get(ctx, fenceview.StormGuardLease, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && reason == nil:
		fmt.Fprintf(out, "fencing is not paused (no %s)\n", where)
		return nil
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: fenceview.StormGuardLease, Namespace: o.stormGuard,
			Annotations: map[string]string{fenceview.PausedAnnotation: *reason},
		}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %s was created meanwhile: run it again", o.verb, where)
		}
		if err != nil {
			return fmt.Errorf("%s: creating %s: %w", o.verb, where, err)
		}
		fmt.Fprintf(out, "fencing paused (%s, reason: %s): no new node is fenced by any driver; nodes under fencing go on\n", where, *reason)
		return nil
	case err != nil:
		return fmt.Errorf("%s: reading %s: %w", o.verb, where, err)
	}
	was, paused := lease.Annotations[fenceview.PausedAnnotation]
	if reason == nil && !paused {
		fmt.Fprintf(out, "fencing is not paused (%s has no %s)\n", where, fenceview.PausedAnnotation)
		return nil
	}
	var value any
	if reason != nil {
		value = *reason
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fenceview.PausedAnnotation: value}}})
	if err != nil {
		return err
	}
	if _, err := leases.Patch(ctx, fenceview.StormGuardLease, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("%s: patching %s: %w", o.verb, where, err)
	}
	switch {
	case reason == nil:
		fmt.Fprintf(out, "fencing resumed (%s; was paused: %s)\n", where, was)
	case paused:
		fmt.Fprintf(out, "fencing paused (%s, reason: %s; it was already paused: %s): no new node is fenced by any driver; nodes under fencing go on\n", where, *reason, was)
	default:
		fmt.Fprintf(out, "fencing paused (%s, reason: %s): no new node is fenced by any driver; nodes under fencing go on\n", where, *reason)
	}
	return nil
}
