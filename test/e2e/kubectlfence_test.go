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
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// kubectlFence runs the built kubectl-fence binary with the cluster's admin
// kubeconfig, as `kubectl fence ARGS` would; it returns stdout and fails the
// test on a non-zero exit unless wantFail.
func kubectlFence(t *testing.T, bin string, wantFail bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--kubeconfig="+cluster.Kubeconfig)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("$ kubectl fence %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if (err != nil) != wantFail {
		t.Fatalf("kubectl fence %s: %v (want failure: %v)\n%s", strings.Join(args, " "), err, wantFail, stderr.String())
	}
	if wantFail {
		return stderr.String()
	}
	return stdout.String()
}

func nodeStatus(st *fenceview.Status, node string) *fenceview.NodeStatus {
	for i := range st.Nodes {
		if st.Nodes[i].Name == node {
			return &st.Nodes[i]
		}
	}
	return nil
}

// kubectl fence against the real apiserver with the product's CRDs and the
// product running: fence NODE creates the admin's FencingRequest and the
// product fences the Ready node; status and timeline (-o json, -o yaml)
// show it; release NODE withdraws it through its spec (spec.released, never
// a delete) and the product lifts the quarantine once the node is clean,
// the request staying Complete as the record; pause and resume set and
// remove the storm guard's switch. The CRD's rules on spec.released are
// enforced by the apiserver. The dry runs of the write verbs store nothing,
// and --as reaches the apiserver.
func TestKubectlFenceOnRealAPIServer(t *testing.T) {
	ctx := context.Background()
	binDir := t.TempDir()
	if err := framework.BuildCommands(ctx, binDir, "./cmd/kubectl-fence"); err != nil {
		t.Fatalf("building kubectl-fence: %v", err)
	}
	bin := filepath.Join(binDir, "kubectl-fence")
	env, err := scenario.Setup(ctx, cluster, product, tLogger{t}, "kf", 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.WaitAttached(ctx, 0, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)

	// Dry runs create nothing: client sends no write, server sends it with
	// DryRun: All (the apiserver checks it against the CRD and stores
	// nothing); -o prints the object that would be created.
	for _, mode := range []string{"client", "server"} {
		out := kubectlFence(t, bin, false, "fence", node, "--reason=e2e dry run", "--dry-run="+mode, "-o", "yaml")
		if !strings.Contains(out, "kind: FencingRequest") || !strings.Contains(out, "reason: e2e dry run") {
			t.Errorf("fence --dry-run=%s -o yaml printed %q", mode, out)
		}
		if _, err := frs.Get(ctx, node); !apierrors.IsNotFound(err) {
			t.Fatalf("after fence --dry-run=%s: %v, want no FencingRequest", mode, err)
		}
	}
	// --as reaches the apiserver: the break-glass verb is refused to a
	// user without the role.
	if msg := kubectlFence(t, bin, true, "fence", node, "--as=e2e-nobody", "--dry-run=server"); !strings.Contains(msg, "forbidden") || !strings.Contains(msg, "e2e-nobody") {
		t.Errorf("fence --as=e2e-nobody said %q", msg)
	}

	// fence NODE: the admin's request, as the CRD accepts it.
	out := kubectlFence(t, bin, false, "fence", node, "--reason=e2e disk controller")
	for _, want := range []string{"fencingrequest/" + node + " created (origin Manual, reason: e2e disk controller)", "node " + node + " is Ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("fence printed no %q", want)
		}
	}
	fr, err := frs.Get(ctx, node)
	if err != nil {
		t.Fatalf("fence created no FencingRequest: %v", err)
	}
	if fr.Spec.NodeName != node || fr.Spec.Origin != fencingv1alpha1.OriginManual || fr.Spec.Reason != "e2e disk controller" || fr.Spec.Released {
		t.Errorf("fence wrote spec %+v", fr.Spec)
	}
	uid := fr.UID
	// A second fence refuses, creating nothing.
	if msg := kubectlFence(t, bin, true, "fence", node); !strings.Contains(msg, "already exists (origin Manual") {
		t.Errorf("a second fence said %q", msg)
	}

	// The product fences the Ready node: quarantined, its volume fenced,
	// then cleaned by the node agent (the node is alive).
	if err := framework.WaitFor(ctx, 90*time.Second, "the volume fenced and cleaned", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		if err != nil {
			return false, err
		}
		for _, v := range fr.Status.Volumes {
			if v.VolumeHandle == env.Volumes[0] && v.FencedTime != nil && v.CleanedTime != nil {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}

	// status, as JSON and as YAML: the node's record as the request says.
	var st, stYAML fenceview.Status
	if err := json.Unmarshal([]byte(kubectlFence(t, bin, false, "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(kubectlFence(t, bin, false, "status", "-o=yaml")), &stYAML); err != nil {
		t.Fatal(err)
	}
	for format, s := range map[string]*fenceview.Status{"json": &st, "yaml": &stYAML} {
		ns := nodeStatus(s, node)
		if ns == nil {
			t.Errorf("status -o %s does not list %s: %+v", format, node, s.Nodes)
			continue
		}
		if ns.Origin != string(fencingv1alpha1.OriginManual) || ns.Reason != "e2e disk controller" || ns.Volumes.Cleaned != 1 || ns.Released ||
			!strings.Contains(strings.Join(ns.Taints, ","), contract.QuarantineTaintKey) {
			t.Errorf("status -o %s: %+v", format, ns)
		}
	}
	// timeline NODE, as JSON and YAML: the record's steps, in order.
	var tl, tlYAML fenceview.Timeline
	if err := json.Unmarshal([]byte(kubectlFence(t, bin, false, "timeline", node, "-o", "json")), &tl); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(kubectlFence(t, bin, false, "timeline", "-o", "yaml", node)), &tlYAML); err != nil {
		t.Fatal(err)
	}
	for format, x := range map[string]*fenceview.Timeline{"json": &tl, "yaml": &tlYAML} {
		if x.Node != node || len(x.Entries) < 3 {
			t.Errorf("timeline -o %s: %+v", format, x)
			continue
		}
		var whats []string
		for i, e := range x.Entries {
			whats = append(whats, e.What)
			if i > 0 && e.Time.Before(&x.Entries[i-1].Time) {
				t.Errorf("timeline -o %s out of order at %d: %+v", format, i, x.Entries)
			}
		}
		joined := strings.Join(whats, " | ")
		for _, want := range []string{"request created (Manual)", "volume " + env.Volumes[0] + " (" + framework.DriverName + ") fenced", "volume " + env.Volumes[0] + " (" + framework.DriverName + ") cleaned on the node"} {
			if !strings.Contains(joined, want) {
				t.Errorf("timeline -o %s has no step saying %q: %s", format, want, joined)
			}
		}
	}
	if table := kubectlFence(t, bin, false, "timeline", node); !strings.Contains(table, node) {
		t.Errorf("timeline table does not name the node:\n%s", table)
	}

	// A dry run of release changes nothing.
	if out := kubectlFence(t, bin, false, "release", node, "--dry-run=server"); !strings.Contains(out, "released (server dry run)") {
		t.Errorf("release --dry-run=server printed %q", out)
	}
	if fr, err := frs.Get(ctx, node); err != nil || fr.Spec.Released {
		t.Fatalf("after release --dry-run=server: %v, released %v", err, fr != nil && fr.Spec.Released)
	}

	// release NODE: through the spec, never a delete (a delete would have
	// set the deletionTimestamp: the finalizer holds the request while its
	// volume is recorded; and the request would be gone once Complete).
	out = kubectlFence(t, bin, false, "release", node)
	if !strings.Contains(out, "fencingrequest/"+node+" released (spec.released=true)") {
		t.Errorf("release printed %q", out)
	}
	fr, err = frs.Get(ctx, node)
	if err != nil {
		t.Fatalf("the request is gone after release: %v", err)
	}
	if !fr.Spec.Released || fr.DeletionTimestamp != nil || fr.UID != uid {
		t.Errorf("after release: spec %+v, deletionTimestamp %v, uid %s (was %s)", fr.Spec, fr.DeletionTimestamp, fr.UID, uid)
	}
	if err := framework.WaitFor(ctx, 90*time.Second, "the quarantine lifted and the request Complete", func(ctx context.Context) (bool, error) {
		n, err := cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, tt := range n.Spec.Taints {
			if tt.Key == contract.QuarantineTaintKey {
				return false, nil
			}
		}
		// Complete, then its finalizer removed, by the failover.
		fr, err := frs.Get(ctx, node)
		return err == nil && fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	fr, err = frs.Get(ctx, node)
	if err != nil || fr.UID != uid || !fr.Spec.Released || len(fr.Finalizers) != 0 {
		t.Fatalf("the released request after its release: %v %+v", err, fr)
	}
	if err := json.Unmarshal([]byte(kubectlFence(t, bin, false, "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if ns := nodeStatus(&st, node); ns == nil || !ns.Released || ns.Phase != string(fencingv1alpha1.PhaseComplete) {
		t.Errorf("status after release: %+v", ns)
	}
	// A second release writes nothing.
	if out := kubectlFence(t, bin, false, "release", node); !strings.Contains(out, "already withdrawn") {
		t.Errorf("a second release printed %q", out)
	}

	// The CRD's rules, on the apiserver: spec.released cannot be unset,
	// nor set on the failover's record (dry runs: nothing is stored). The
	// controller may write the record meanwhile: a conflict says nothing
	// of the rule, and the update is tried again on the record as it is.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := frs.Get(ctx, node)
		if err != nil {
			return err
		}
		u, err := fencingv1alpha1.ToUnstructured(latest)
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, false, "spec", "released"); err != nil {
			return err
		}
		_, err = cluster.Dynamic.Resource(fencingv1alpha1.Resource).Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.released cannot be unset") {
		t.Errorf("unsetting spec.released: %v", err)
	}
	auto, err := fencingv1alpha1.ToUnstructured(&fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "kf-nonode"},
		Spec: fencingv1alpha1.FencingRequestSpec{NodeName: "kf-nonode", Origin: fencingv1alpha1.OriginAutomatic, Released: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cluster.Dynamic.Resource(fencingv1alpha1.Resource).Create(ctx, auto, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.released is for Manual requests") {
		t.Errorf("an Automatic request created released: %v", err)
	}

	// fence NODE again: the released, Complete request is replaced.
	out = kubectlFence(t, bin, false, "fence", node, "--reason=again")
	if !strings.Contains(out, "released and Complete: replaced") || !strings.Contains(out, "created (origin Manual, reason: again)") {
		t.Errorf("fence after a completed release printed %q", out)
	}
	if fr, err = frs.Get(ctx, node); err != nil || fr.UID == uid || fr.Spec.Released || fr.Spec.Reason != "again" {
		t.Errorf("fence after a completed release: %v %+v", err, fr)
	}
	kubectlFence(t, bin, false, "release", node)
	if err := framework.WaitFor(ctx, 90*time.Second, "the second request Complete", func(ctx context.Context) (bool, error) {
		fr, err := frs.Get(ctx, node)
		return err == nil && fr.Status.Phase == fencingv1alpha1.PhaseComplete && len(fr.Finalizers) == 0, err
	}); err != nil {
		t.Fatal(err)
	}

	// pause and resume: the storm guard's switch on its Lease.
	const ns = "kube-system"
	if out := kubectlFence(t, bin, false, "pause", "--reason=e2e dry run", "--dry-run=server"); !strings.Contains(out, "fencing paused (server dry run)") {
		t.Errorf("pause --dry-run=server printed %q", out)
	}
	if lease, err := cluster.Client.CoordinationV1().Leases(ns).Get(ctx, fenceview.StormGuardLease, metav1.GetOptions{}); err == nil {
		if v, paused := lease.Annotations[fenceview.PausedAnnotation]; paused {
			t.Fatalf("after pause --dry-run=server: paused %q", v)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	out = kubectlFence(t, bin, false, "pause", "--reason=e2e maintenance")
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			kubectlFence(t, bin, false, "resume")
		}
	})
	if !strings.Contains(out, "fencing paused (Lease "+ns+"/"+fenceview.StormGuardLease+", reason: e2e maintenance)") {
		t.Errorf("pause printed %q", out)
	}
	lease, err := cluster.Client.CoordinationV1().Leases(ns).Get(ctx, fenceview.StormGuardLease, metav1.GetOptions{})
	if err != nil || lease.Annotations[fenceview.PausedAnnotation] != "e2e maintenance" {
		t.Fatalf("pause wrote %v: %v", lease, err)
	}
	if err := yaml.Unmarshal([]byte(kubectlFence(t, bin, false, "status", "-o", "yaml")), &st); err != nil {
		t.Fatal(err)
	}
	if st.StormGuard.Paused != "e2e maintenance" || !st.StormGuard.Found {
		t.Errorf("status while paused: %+v", st.StormGuard)
	}
	out = kubectlFence(t, bin, false, "resume")
	resumed = true
	if !strings.Contains(out, "fencing resumed") || !strings.Contains(out, "was paused: e2e maintenance") {
		t.Errorf("resume printed %q", out)
	}
	lease, err = cluster.Client.CoordinationV1().Leases(ns).Get(ctx, fenceview.StormGuardLease, metav1.GetOptions{})
	if _, paused := lease.Annotations[fenceview.PausedAnnotation]; err != nil || paused {
		t.Errorf("after resume: %v, annotations %v", err, lease.Annotations)
	}
	if out := kubectlFence(t, bin, false, "resume"); !strings.Contains(out, "fencing is not paused") {
		t.Errorf("a second resume printed %q", out)
	}
	expectNoViolations(t)
}
