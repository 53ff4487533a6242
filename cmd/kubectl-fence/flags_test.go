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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fenceview"
)

// kubeconfigFlags are kubectl's connection flags: every verb that reads or
// writes the cluster has them all.
var kubeconfigFlags = []string{
	"kubeconfig", "context", "cluster", "user", "server", "token",
	"as", "as-group", "as-uid", "certificate-authority", "client-certificate",
	"client-key", "insecure-skip-tls-verify", "request-timeout", "tls-server-name",
}

// The flags of each verb, as a table: the kubeconfig flags on the verbs
// that reach the cluster, -n/--namespace exactly on the verbs that act on
// namespaced objects (terminate's pod, check-manifests' objects), not on
// those of Nodes, FencingRequests or the storm guard's Lease (whose
// namespace is --storm-guard-namespace); --dry-run on the write verbs; -o
// where a verb prints something a script reads.
func TestVerbFlags(t *testing.T) {
	tests := []struct {
		verb                               string
		cluster, namespaced, writes, print bool
	}{
		{verb: "version"},
		{verb: "completion"},
		{verb: "check-manifests", namespaced: true},
		{verb: "terminate", cluster: true, namespaced: true, writes: true, print: true},
		{verb: "status", cluster: true, print: true},
		{verb: "timeline", cluster: true, print: true},
		{verb: "explain", cluster: true, namespaced: true, print: true},
		{verb: "fence", cluster: true, writes: true, print: true},
		{verb: "release", cluster: true, writes: true, print: true},
		{verb: "pause", cluster: true, writes: true, print: true},
		{verb: "resume", cluster: true, writes: true, print: true},
	}
	root := newRootCommand(newTestPlugin(t, nil, nil, "").f)
	var listed []string
	for _, c := range root.Commands() {
		if c.Name() != "help" {
			listed = append(listed, c.Name())
		}
	}
	for _, tc := range tests {
		if !slices.Contains(listed, tc.verb) {
			t.Errorf("no verb %s", tc.verb)
		}
		listed = slices.DeleteFunc(listed, func(s string) bool { return s == tc.verb })
		t.Run(tc.verb, func(t *testing.T) {
			c, _, err := root.Find([]string{tc.verb})
			if err != nil {
				t.Fatal(err)
			}
			has := func(name string) bool { return c.Flags().Lookup(name) != nil }
			for _, name := range kubeconfigFlags {
				if has(name) != tc.cluster {
					t.Errorf("--%s: %v, want %v", name, has(name), tc.cluster)
				}
			}
			if n := c.Flags().ShorthandLookup("n"); (n != nil) != tc.namespaced || tc.namespaced && n.Name != "namespace" {
				t.Errorf("-n: %v, want -n/--namespace: %v", n, tc.namespaced)
			}
			if has("namespace") != tc.namespaced {
				t.Errorf("--namespace: %v, want %v", has("namespace"), tc.namespaced)
			}
			if has("dry-run") != tc.writes {
				t.Errorf("--dry-run: %v, want %v", has("dry-run"), tc.writes)
			}
			if o := c.Flags().ShorthandLookup("o"); (o != nil) != tc.print {
				t.Errorf("-o: %v, want %v", o, tc.print)
			}
			if c.Short == "" || c.RunE == nil {
				t.Error("no short help or no RunE")
			}
		})
	}
	if len(listed) > 0 {
		t.Errorf("verbs %v are not in this table: add them", listed)
	}
}

// The kubeconfig flags reach the REST config the verb connects with:
// impersonation (the break-glass verbs), server, token, TLS, timeout.
func TestKubeconfigFlagsReachTheConfig(t *testing.T) {
	p := newTestPlugin(t, fake.NewClientset(node("node-a", corev1.ConditionFalse)), nil, "")
	err := p.execute("fence", "node-a", "--as=oncall", "--as-group=csi-fence:break-glass", "--as-group=oncall", "--as-uid=42",
		"--server=https://api.example:6443", "--token=secret", "--insecure-skip-tls-verify", "--request-timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := p.flags.ToRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Impersonate.UserName != "oncall" || !slices.Equal(rc.Impersonate.Groups, []string{"csi-fence:break-glass", "oncall"}) || rc.Impersonate.UID != "42" {
		t.Errorf("impersonation %+v", rc.Impersonate)
	}
	if rc.Host != "https://api.example:6443" || rc.BearerToken != "secret" || !rc.Insecure || rc.Timeout != 5*time.Second {
		t.Errorf("host %q, token %q, insecure %v, timeout %v", rc.Host, rc.BearerToken, rc.Insecure, rc.Timeout)
	}
}

func manualRequest(t *testing.T) runtime.Object {
	return request(t, "node-a", fencingv1alpha1.OriginManual, []string{contract.RecordFinalizer})
}

// --dry-run on each write verb: client sends no write (only the reads that
// decide what it would do) and says "(dry run)"; server sends every write
// with DryRun: All and says "(server dry run)".
func TestDryRun(t *testing.T) {
	pausedLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fenceview.StormGuardLease, Namespace: "kube-system",
		Annotations: map[string]string{fenceview.PausedAnnotation: "x"}}}
	tests := []struct {
		args       []string
		kube       []runtime.Object
		requests   func(t *testing.T) []runtime.Object
		wantOut    string
		wantWrites []string // the verbs of the writes, without dry run
	}{
		{args: []string{"terminate", "pod/db-0", "-n", "shop", "--reason=rack retired"},
			kube:    []runtime.Object{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop", UID: "u1"}}},
			wantOut: "pod/db-0 terminated%s (reason: rack retired)", wantWrites: []string{"patch", "delete"}},
		{args: []string{"fence", "node-a", "--reason=r"}, kube: []runtime.Object{node("node-a", corev1.ConditionFalse)},
			wantOut: "fencingrequest/node-a created%s (origin Manual, reason: r)", wantWrites: []string{"create"}},
		{args: []string{"fence", "node-a"}, kube: []runtime.Object{node("node-a", corev1.ConditionFalse)},
			requests: func(t *testing.T) []runtime.Object {
				return []runtime.Object{released(t, request(t, "node-a", fencingv1alpha1.OriginManual, nil), fencingv1alpha1.PhaseComplete)}
			},
			wantOut: "fencingrequest/node-a of an earlier fence was released and Complete: replaced%s", wantWrites: []string{"delete", "create"}},
		{args: []string{"release", "node-a"}, requests: func(t *testing.T) []runtime.Object { return []runtime.Object{manualRequest(t)} },
			wantOut: "fencingrequest/node-a released%s (spec.released=true)", wantWrites: []string{"update"}},
		{args: []string{"pause", "--reason=m"},
			wantOut: "fencing paused%s (Lease kube-system/csi-fence-storm-guard, reason: m)", wantWrites: []string{"create"}},
		{args: []string{"pause", "--reason=m"}, kube: []runtime.Object{pausedLease},
			wantOut: "fencing paused%s (Lease kube-system/csi-fence-storm-guard, reason: m; it was already paused: x)", wantWrites: []string{"patch"}},
		{args: []string{"resume"}, kube: []runtime.Object{pausedLease},
			wantOut: "fencing resumed%s (Lease kube-system/csi-fence-storm-guard; was paused: x)", wantWrites: []string{"patch"}},
	}
	for _, tc := range tests {
		for _, mode := range []dryRun{dryRunClient, dryRunServer} {
			t.Run(strings.Join(tc.args, " ")+" --dry-run="+string(mode), func(t *testing.T) {
				kube := fake.NewClientset(tc.kube...)
				var frs []runtime.Object
				if tc.requests != nil {
					frs = tc.requests(t)
				}
				dyn := fakeDynamic(frs...)
				// The fakes do not honour DryRun: what they store says
				// nothing; the writes sent and their options do.
				p := newTestPlugin(t, kube, dyn, "")
				if err := p.execute(append(tc.args, "--dry-run="+string(mode))...); err != nil {
					t.Fatal(err)
				}
				var writes []string
				for _, a := range append(kube.Actions(), dyn.Actions()...) {
					var dryRun []string
					switch a := a.(type) {
					case k8stesting.CreateActionImpl:
						dryRun = a.GetCreateOptions().DryRun
					case k8stesting.UpdateActionImpl:
						dryRun = a.GetUpdateOptions().DryRun
					case k8stesting.PatchActionImpl:
						dryRun = a.GetPatchOptions().DryRun
					case k8stesting.DeleteActionImpl:
						dryRun = a.GetDeleteOptions().DryRun
					default:
						continue
					}
					writes = append(writes, a.GetVerb())
					if !slices.Equal(dryRun, []string{metav1.DryRunAll}) {
						t.Errorf("%s sent with DryRun %v", a.GetVerb(), dryRun)
					}
				}
				mark := map[dryRun]string{dryRunClient: " (dry run)", dryRunServer: " (server dry run)"}[mode]
				want := strings.Replace(tc.wantOut, "%s", mark, 1)
				if !strings.Contains(p.out.String(), want) {
					t.Errorf("output:\n%s\nwant %q", p.out.String(), want)
				}
				wantWrites := tc.wantWrites
				if mode == dryRunClient {
					wantWrites = nil
				}
				if !slices.Equal(writes, wantWrites) {
					t.Errorf("writes %v, want %v", writes, wantWrites)
				}
			})
		}
	}
}

// -o on the write verbs prints the object written, with cli-runtime's
// printers, on stdout; the sentences go to stderr.
func TestWriteOutput(t *testing.T) {
	tests := []struct {
		args    []string
		wantOut []string
	}{
		{[]string{"fence", "node-a", "-o", "name"}, []string{"fencingrequest." + contract.FencingGroup + "/node-a\n"}},
		{[]string{"fence", "node-a", "--reason=r", "-o", "yaml", "--dry-run=client"}, []string{"kind: FencingRequest", "nodeName: node-a", "reason: r", "origin: Manual"}},
		{[]string{"pause", "--reason=m", "-o", "json"}, []string{`"kind": "Lease"`, `"` + fenceview.PausedAnnotation + `": "m"`}},
		{[]string{"terminate", "pod/db-0", "--reason=r", "-o", "name"}, []string{"pod/db-0\n"}},
		{[]string{"terminate", "pod/db-0", "--reason=r", "-o", "jsonpath={.metadata.annotations}", "--dry-run=client"}, []string{"r"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			kube := fake.NewClientset(node("node-a", corev1.ConditionFalse), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "default"}})
			p := newTestPlugin(t, kube, nil, "")
			if err := p.execute(tc.args...); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(p.out.String(), w) {
					t.Errorf("stdout:\n%s\nwant %q", p.out.String(), w)
				}
			}
			if strings.Contains(p.out.String(), "(reason") || p.errOut.Len() == 0 {
				t.Errorf("the sentences are not on stderr: stdout %q, stderr %q", p.out.String(), p.errOut.String())
			}
		})
	}
}

// Every -f of check-manifests is read, and all are checked together
// (whichever comes last); stdin once at most.
func TestCheckManifestsEveryFile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cm := func(name string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: x}\n"
	}
	a, b := file("a.yaml", cm("a")), file("b.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: i}]}\n")
	tests := []struct {
		args    []string
		stdin   string
		wantErr string
	}{
		// Only a Pod in b: if b were ignored, "no Deployment ... or Pod".
		{[]string{"-f", b, "-f", a}, "", "found no csi-fence-attacher controller container"},
		{[]string{"-f", a, "--filename", b}, "", "found no csi-fence-attacher controller container"},
		{[]string{"-f", "-", "-f", a}, "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec: {containers: [{name: c, image: i}]}\n", "found no csi-fence-attacher controller container"},
		{[]string{"-f", a}, "", "no Deployment, StatefulSet, DaemonSet, ReplicaSet or Pod in the input"},
		{[]string{"-f", "-", "-f", "-"}, "", "-f - is given more than once"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := newTestPlugin(t, nil, nil, tc.stdin).execute(append([]string{"check-manifests", "--controller-only"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Completion: the scripts cobra generates for each shell, and what the
// plugin answers to __complete (what kubectl_complete-fence asks): the
// verbs, node names for fence, release and timeline, pod/NAME for
// terminate, the formats of -o.
func TestCompletion(t *testing.T) {
	for _, shell := range shells {
		t.Run(shell, func(t *testing.T) {
			p := newTestPlugin(t, nil, nil, "")
			if err := p.execute("completion", shell); err != nil {
				t.Fatal(err)
			}
			if s := p.out.String(); !strings.Contains(s, "kubectl-fence") || !strings.Contains(s, cobra.ShellCompRequestCmd) {
				t.Errorf("%s script does not call kubectl-fence %s:\n%.300s", shell, cobra.ShellCompRequestCmd, s)
			}
		})
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}} {
		if err := newTestPlugin(t, nil, nil, "").execute(args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	kube := fake.NewClientset(node("node-b", corev1.ConditionTrue), node("node-a", corev1.ConditionTrue), node("other", corev1.ConditionTrue),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop"}}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}})
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{""}, []string{"check-manifests", "completion", "explain", "fence", "help", "pause", "release", "resume", "status", "terminate", "timeline", "version"}},
		{[]string{"fence", "node"}, []string{"node-a", "node-b"}},
		{[]string{"release", ""}, []string{"node-a", "node-b", "other"}},
		{[]string{"timeline", "--context=x", "o"}, []string{"other"}},
		{[]string{"terminate", "-n", "shop", ""}, []string{"pod/db-0"}},
		{[]string{"status", "-o", ""}, []string{"json", "table", "yaml"}},
		{[]string{"fence", "node-a", "--dry-run", ""}, []string{"client", "none", "server"}},
		{[]string{"completion", ""}, []string{"bash", "fish", "powershell", "zsh"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			p := newTestPlugin(t, kube, nil, "")
			if err := p.execute(append([]string{cobra.ShellCompRequestCmd}, tc.args...)...); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
				if !strings.HasPrefix(l, ":") {
					got = append(got, strings.SplitN(l, "\t", 2)[0])
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("completions %q, want %q", got, tc.want)
			}
		})
	}
}
