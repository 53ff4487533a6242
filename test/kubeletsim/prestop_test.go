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

package kubeletsim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// The simulated kubelet holds a pod with a preStop hook, runs the hook with
// the container's environment when the pod is deleted, within its grace
// period, and then lets it go.
func TestPreStopRunner(t *testing.T) {
	for _, tc := range []struct {
		name       string
		command    []string
		grace      int64
		wantOutput string
		wantErr    bool
		maxTook    time.Duration
	}{
		{name: "command with the pod's env and mapped path", command: []string{"/in/pod/sh", "-c", `printf '%s %s %s' "$A" "$POD" "$EXTRA"`}, grace: 10, wantOutput: "a p1 x"},
		{name: "a hook past the grace period is stopped", command: []string{"/in/pod/sh", "-c", "sleep 30"}, grace: 0, wantErr: true, maxTook: 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{NodeName: "n1",
				Containers: []v1.Container{{Name: "c", Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: tc.command}}},
					Env: []v1.EnvVar{{Name: "A", Value: "a"}, {Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}}
			client := fake.NewClientset(pod)
			r, err := NewPreStopRunner(PreStopOptions{Client: client, NodeName: "n1", PathMap: map[string]string{"/in/pod/sh": "/bin/sh"},
				PodEnv: func(context.Context, *v1.Pod) ([]string, error) { return []string{"EXTRA=x"}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			go r.Run(ctx)
			defer r.Stop()
			pods := client.CoreV1().Pods("ns")
			var cur *v1.Pod
			waitFor(t, ctx, "the finalizer", func() bool {
				cur, _ = pods.Get(ctx, "p1", metav1.GetOptions{})
				return slices.Contains(cur.Finalizers, PreStopFinalizer)
			})
			if len(r.Runs()) != 0 {
				t.Fatal("a hook ran before the pod was deleted")
			}
			now := metav1.Now()
			cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds = &now, ptr.To(tc.grace)
			if _, err := pods.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			run, err := r.WaitRun(ctx, "ns", "p1", "c")
			if err != nil {
				t.Fatal(err)
			}
			if (run.Err != nil) != tc.wantErr || !strings.Contains(run.Output, tc.wantOutput) || run.Command[0] != "/bin/sh" {
				t.Fatalf("run %+v", run)
			}
			if tc.maxTook > 0 && run.Took > tc.maxTook {
				t.Fatalf("the hook took %v, beyond its grace period", run.Took)
			}
			waitFor(t, ctx, "the finalizer removed", func() bool {
				cur, _ = pods.Get(ctx, "p1", metav1.GetOptions{})
				return !slices.Contains(cur.Finalizers, PreStopFinalizer)
			})
			if n := len(r.Runs()); n != 1 {
				t.Fatalf("%d runs, want exactly one", n)
			}
		})
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A node cut off while its pod is force-deleted: the runner, stopped, runs
// nothing; run again (the node back), it stops the pod gone from the API
// from its last copy, hooks first, with the environment of now.
func TestPreStopRunnerAfterAPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{NodeName: "n1",
		Containers: []v1.Container{{Name: "c", Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{
			Command: []string{"/bin/sh", "-c", `printf '%s %s' "$POD" "$WHERE"`}}}},
			Env: []v1.EnvVar{{Name: "WHERE", Value: "spec"}, {Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}}
	client := fake.NewClientset(pod)
	go ReleaseForceDeleted(ctx, client)
	r, err := NewPreStopRunner(PreStopOptions{Client: client, NodeName: "n1",
		HookEnv: func(*v1.Pod) []string { return []string{"WHERE=now"} }})
	if err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	pods := client.CoreV1().Pods("ns")
	var cur *v1.Pod
	waitFor(t, ctx, "the finalizer", func() bool {
		cur, _ = pods.Get(ctx, "p1", metav1.GetOptions{})
		return slices.Contains(cur.Finalizers, PreStopFinalizer)
	})
	r.Stop() // the node is cut off
	// The pod GC's force-delete: grace period 0, and the pod is let go at
	// once, without its hooks.
	now := metav1.Now()
	cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds = &now, ptr.To[int64](0)
	if _, err := pods.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the force-deleted pod let go", func() bool {
		cur, _ = pods.Get(ctx, "p1", metav1.GetOptions{})
		return !slices.Contains(cur.Finalizers, PreStopFinalizer)
	})
	if err := pods.Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil { // what the apiserver does without a finalizer
		t.Fatal(err)
	}
	if n := len(r.Runs()); n != 0 {
		t.Fatalf("a stopped runner ran %d hooks", n)
	}
	go r.Run(ctx) // the node is back
	defer r.Stop()
	run, err := r.WaitRun(ctx, "ns", "p1", "c")
	if err != nil {
		t.Fatal(err)
	}
	if run.Err != nil || run.Output != "p1 now" || run.UID != "u1" {
		t.Fatalf("run %+v, want output %q", run, "p1 now")
	}
}
