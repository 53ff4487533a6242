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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// A node agent writes only its own node's FencingRequest: deploy/'s
// admission policy checks the node its pod-bound token names. Another node's
// record, or a token that names no node, is refused, so no node can mark
// another node's fenced volumes cleaned and lift its quarantine (S2).
func TestNodeAgentWritesOnlyItsOwnRecord(t *testing.T) {
	ctx := context.Background()
	nodes, err := cluster.CreateNodes(ctx, "na", 2, framework.DriverName)
	if err != nil {
		t.Fatal(err)
	}
	admin := fencingv1alpha1.NewClient(cluster.Dynamic)
	for _, n := range nodes {
		if _, err := admin.Create(ctx, &fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: n, Origin: fencingv1alpha1.OriginAutomatic, Reason: "admission test"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The failover quarantines a Ready node whose record holds a volume
	// not cleaned, and the storm guard counts it: every entry is marked
	// cleaned at the end, so that the node is released and its record
	// goes, before the next test.
	defer func() {
		for _, n := range nodes {
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				fr, err := admin.Get(ctx, n)
				if err != nil {
					return err
				}
				now := metav1.Now()
				for i := range fr.Status.Volumes {
					fr.Status.Volumes[i].CleanedTime = &now
				}
				_, err = admin.UpdateStatus(ctx, fr)
				return err
			}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("marking %s's record cleaned: %v", n, err)
			}
			if err := admin.Delete(ctx, n); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s's record: %v", n, err)
			}
			if err := framework.WaitFor(ctx, time.Minute, n+" released", func(ctx context.Context) (bool, error) {
				if _, err := admin.Get(ctx, n); !apierrors.IsNotFound(err) {
					return false, nil
				}
				node, err := cluster.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				return err == nil && !framework.HasTaint(node, contract.QuarantineTaintKey, corev1.TaintEffectNoSchedule), err
			}); err != nil {
				t.Error(err)
			}
		}
	}()
	bound, err := cluster.NodeBoundKubeconfig(ctx, "default", "csi-fence-attacher-node", nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := cluster.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher-node")
	if err != nil {
		t.Fatal(err)
	}
	// The agent's own record holds a volume fenced there and one whose
	// fence is in flight.
	started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr, err := admin.Get(ctx, nodes[0])
		if err != nil {
			return err
		}
		fr.Status.Phase = fencingv1alpha1.PhaseFencing
		fr.Status.Volumes = []fencingv1alpha1.FencedVolume{
			{Driver: framework.DriverName, VolumeHandle: "fenced", NodeID: nodes[0], StartedTime: &started, FencedTime: &started},
			{Driver: framework.DriverName, VolumeHandle: "in-flight", NodeID: nodes[0], StartedTime: &started, FencesInFlight: []string{"a1"}},
		}
		_, err = admin.UpdateStatus(ctx, fr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	const onlyCleanups = "a node agent may only record the cleanup of volumes"
	for _, tc := range []struct {
		name, kubeconfig, record string
		// change is what the agent writes (nil: the status unchanged;
		// admission runs for every update).
		change  func(*fencingv1alpha1.FencingRequestStatus)
		refused string // "": allowed
	}{
		{name: "own record", kubeconfig: bound, record: nodes[0]},
		{name: "another node's record", kubeconfig: bound, record: nodes[1], refused: "may write only the FencingRequest of its own node (" + nodes[0] + ")"},
		{name: "token naming no node", kubeconfig: unbound, record: nodes[0], refused: "its token names no node"},
		{name: "a cleanup error", kubeconfig: bound, record: nodes[0], change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.Volumes[0].CleanupError = "plugin down"
		}},
		{name: "a cleanup", kubeconfig: bound, record: nodes[0], change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.Volumes[0].CleanedTime, s.Volumes[0].CleanupError = &now, ""
		}},
		{name: "a fence confirmed by the node itself", kubeconfig: bound, record: nodes[0], refused: onlyCleanups, change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.Volumes[1].FencedTime = &now
		}},
		{name: "an entry removed", kubeconfig: bound, record: nodes[0], refused: onlyCleanups, change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.Volumes = s.Volumes[:1]
		}},
		{name: "its own power-off confirmed", kubeconfig: bound, record: nodes[0], refused: onlyCleanups, change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.NodeFence = &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, StartedTime: &now, ConfirmedTime: &now}
		}},
		{name: "the phase", kubeconfig: bound, record: nodes[0], refused: onlyCleanups, change: func(s *fencingv1alpha1.FencingRequestStatus) {
			s.Phase = fencingv1alpha1.PhaseComplete
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := dynamicOf(t, tc.kubeconfig)
			agent := fencingv1alpha1.NewClient(dyn)
			// What a node agent does: write the record's status.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				fr, err := agent.Get(ctx, tc.record)
				if err != nil {
					return err
				}
				if tc.change != nil {
					tc.change(&fr.Status)
				}
				_, err = agent.UpdateStatus(ctx, fr)
				return err
			})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("node agent of %s refused: %v", nodes[0], err)
			case tc.refused != "" && err == nil:
				t.Errorf("node agent allowed to write %s's record", tc.record)
			case tc.refused != "" && (!apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("refused with %v, want a denial saying %q", err, tc.refused)
			}
		})
	}
}

// The failover finds a node's FencingRequest by its name: a request named
// after another node than its spec.nodeName would be accepted and ignored,
// the admin believing the node fenced. The CRD's validation rule makes the
// apiserver refuse it, and with it any later change of spec.nodeName.
func TestFencingRequestNamedAfterItsNode(t *testing.T) {
	ctx := context.Background()
	const refusal = "metadata.name must be spec.nodeName"
	frs := fencingv1alpha1.NewClient(cluster.Dynamic)
	request := func(name, node string) *fencingv1alpha1.FencingRequest {
		return &fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: node, Origin: fencingv1alpha1.OriginManual, Reason: "validation test"},
		}
	}
	// No such nodes: the request is only validated, nothing is fenced.
	_, err := frs.Create(ctx, request("fr-name-a", "fr-name-b"))
	if err == nil {
		_ = frs.Delete(ctx, "fr-name-a")
		t.Fatal("a FencingRequest named fr-name-a for node fr-name-b was accepted")
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), refusal) || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Errorf("refused with %v, want Invalid on spec.nodeName saying %q", err, refusal)
	}
	t.Logf("refused: %v", err)
	created, err := frs.Create(ctx, request("fr-name-c", "fr-name-c"))
	if err != nil {
		t.Fatalf("a FencingRequest named after its node was refused: %v", err)
	}
	defer func() {
		if err := frs.Delete(ctx, created.Name); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr, err := frs.Get(ctx, created.Name)
		if err != nil {
			return err
		}
		fr.Spec.NodeName = "fr-name-d"
		_, err = frs.Update(ctx, fr)
		return err
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), refusal) {
		t.Errorf("changing spec.nodeName: %v, want Invalid saying %q", err, refusal)
	}
}
