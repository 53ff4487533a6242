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

package failover

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
)

// TestScripts runs the failover's scenarios of testdata/scripts, one node's
// story each, as etcd's raft runs its interaction tests
// (github.com/cockroachdb/datadriven): every command changes the API state
// or takes one pass over node n1, and prints what the pass did or what the
// API holds. `go test -run TestScripts -rewrite` writes the output anew
// after a deliberate change; review the diff.
//
// The cluster is objects(): n1 with pod db-0 using volume h1 (attachment
// va1) of the driver under test, and three Ready nodes.
//
//	start [ready=Unknown|True|False] [running] [gate=off] [owner=false] [cordoned] [control-plane]
//	sync          one pass over n1: the steps it took (quarantine, fence
//	              VOLUME, delete POD, in order) and its error
//	state         n1's taints, fencing conditions and volumesInUse, its
//	              record, whether db-0 and va1 exist
//	ready STATUS  n1's Ready condition set to STATUS through the API
//	clean         the node agent's cleanup of every fenced volume recorded
//	request       an admin's (Manual) FencingRequest for n1
//	delete-node   n1's Node object deleted
//	create-node   n1 registered again, Ready
//	lease         n1's kubelet renews its heartbeat Lease (once)
//	restart       a new controller on the same API state (a crash)
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := s.run(t, d)
			if err != nil {
				d.Fatalf(t, "%s: %v", d.Cmd, err)
			}
			return out
		})
	})
}

type script struct {
	e       *env
	gateOff bool
	owner   bool
	seen    int // steps already printed
}

func (s *script) run(t *testing.T, d *datadriven.TestData) (string, error) {
	ctx := context.Background()
	if d.Cmd != "start" && s.e == nil {
		return "", fmt.Errorf("no cluster: start first")
	}
	switch d.Cmd {
	case "start":
		return "", s.start(t, d)
	case "sync":
		if err := s.cached(ctx); err != nil {
			return "", err
		}
		err := s.e.sync(t)
		s.e.steps.mu.Lock()
		steps := slices.Clone(s.e.steps.log[s.seen:])
		s.seen = len(s.e.steps.log)
		s.e.steps.mu.Unlock()
		out := strings.Join(steps, "\n")
		if len(steps) == 0 {
			out = "nothing"
		}
		if err != nil {
			out += "\nerror: " + err.Error()
		}
		return out + "\n", nil
	case "state":
		return s.state(t), nil
	case "ready":
		if len(d.CmdArgs) != 1 {
			return "", fmt.Errorf("ready STATUS")
		}
		s.e.setReady(t, "n1", v1.ConditionStatus(d.CmdArgs[0].Key))
	case "clean":
		fr := s.e.record(t)
		now := metav1.Now()
		for i := range fr.Status.Volumes {
			if fr.Status.Volumes[i].FencedTime != nil {
				fr.Status.Volumes[i].CleanedTime = &now
			}
		}
		if _, err := s.e.fr.UpdateStatus(ctx, fr); err != nil {
			return "", err
		}
	case "request":
		if _, err := s.e.fr.Create(ctx, &fencingv1alpha1.FencingRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:       fencingv1alpha1.FencingRequestSpec{NodeName: "n1", Origin: fencingv1alpha1.OriginManual, Reason: "maintenance"},
		}); err != nil {
			return "", err
		}
	case "create-node":
		if _, err := s.e.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}, metav1.CreateOptions{}); err != nil {
			return "", err
		}
	case "lease":
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: nodehealth.LeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NowMicro()), LeaseDurationSeconds: ptr.To[int32](40)}}
		if _, err := s.e.client.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return "", err
		}
	case "delete-node":
		if err := s.e.client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
			return "", err
		}
	case "restart":
		s.restart(t)
		return "", nil
	default:
		return "", fmt.Errorf("unknown command")
	}
	return "", s.cached(ctx)
}

func (s *script) start(t *testing.T, d *datadriven.TestData) error {
	ready, terminating := v1.ConditionUnknown, true
	var cordoned, controlPlane bool
	s.owner = true
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "ready":
			ready = v1.ConditionStatus(a.Vals[0])
		case "running":
			terminating = false
		case "gate":
			s.gateOff = a.Vals[0] == "off"
		case "owner":
			s.owner = a.Vals[0] != "false"
		case "cordoned":
			cordoned = true
		case "control-plane":
			controlPlane = true
		default:
			return fmt.Errorf("unknown argument %s", a.Key)
		}
	}
	objs := objects(ready, terminating)
	for _, o := range objs {
		if n, ok := o.(*v1.Node); ok && n.Name == "n1" {
			n.Spec.Unschedulable = cordoned
			if controlPlane {
				n.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
			}
		}
	}
	s.e = newEnv(t, objs, !s.gateOff)
	s.seen = 0
	s.setOwner()
	return nil
}

func (s *script) restart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s.e.c = s.e.start(ctx, t, !s.gateOff)
	s.setOwner()
}

func (s *script) setOwner() {
	if !s.owner {
		s.e.c.owner = notOwner{}
	}
}

// cached waits until the controller's caches hold n1's Node, record, pods
// and attachments as the API does: a pass decides on its caches.
func (s *script) cached(ctx context.Context) error {
	return waitUntil(ctx, func() bool {
		pods, err := s.e.client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		cpods, cerr := s.e.c.podsOn("n1")
		if err != nil || cerr != nil || len(pods.Items) != len(cpods) {
			return false
		}
		vas, err := s.e.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		cvas, cerr := s.e.c.vasOn("n1")
		if err != nil || cerr != nil || len(vas.Items) != len(cvas) {
			return false
		}
		live, err := s.e.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		cached, cerr := s.e.c.nodes.Get("n1")
		switch {
		case apierrors.IsNotFound(err):
			if !apierrors.IsNotFound(cerr) {
				return false
			}
		case err != nil || cerr != nil || !equality.Semantic.DeepEqual(cached.Spec, live.Spec) || !equality.Semantic.DeepEqual(cached.Status, live.Status) || !equality.Semantic.DeepEqual(cached.Labels, live.Labels):
			return false
		}
		fr, err := s.e.fr.Get(ctx, "n1")
		cfr, cerr := s.e.c.frs.Get("n1")
		if apierrors.IsNotFound(err) {
			return cerr == nil && cfr == nil
		}
		return err == nil && cerr == nil && cfr != nil && equality.Semantic.DeepEqual(cfr.Spec, fr.Spec) && equality.Semantic.DeepEqual(cfr.Status, fr.Status)
	})
}

// state prints what a reader of one failover checks.
func (s *script) state(t *testing.T) string {
	ctx := context.Background()
	var b strings.Builder
	n, err := s.e.client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		b.WriteString("node: gone\n")
	case err != nil:
		t.Fatal(err)
	default:
		var taints, conds []string
		for _, tn := range n.Spec.Taints {
			if strings.HasPrefix(tn.Key, contract.Prefix) || strings.HasPrefix(tn.Key, "node.kubernetes.io/out-of-service") {
				taints = append(taints, tn.Key+":"+string(tn.Effect))
			}
		}
		for _, c := range n.Status.Conditions {
			if isFencingCondition(string(c.Type)) {
				conds = append(conds, string(c.Type)+"="+string(c.Status))
			}
		}
		slices.Sort(conds)
		fmt.Fprintf(&b, "taints: %s\nconditions: %s\nvolumesInUse: %d\n", list(taints), list(conds), len(n.Status.VolumesInUse))
	}
	fr, err := s.e.fr.Get(ctx, "n1")
	switch {
	case apierrors.IsNotFound(err):
		b.WriteString("record: none\n")
	case err != nil:
		t.Fatal(err)
	default:
		fmt.Fprintf(&b, "record: %s %s\n", fr.Spec.Origin, fr.Status.Phase)
		for _, v := range fr.Status.Volumes {
			fmt.Fprintf(&b, "  %s: %s\n", v.VolumeHandle, entryState(v))
		}
	}
	_, err = s.e.client.CoreV1().Pods("ns").Get(ctx, "db-0", metav1.GetOptions{})
	fmt.Fprintf(&b, "pod db-0: %s\n", exists(err))
	_, err = s.e.client.StorageV1().VolumeAttachments().Get(ctx, "va1", metav1.GetOptions{})
	fmt.Fprintf(&b, "attachment va1: %s\n", exists(err))
	return b.String()
}

func entryState(v fencingv1alpha1.FencedVolume) string {
	switch {
	case v.CleanedTime != nil:
		return "cleaned"
	case v.FencedTime != nil:
		return "fenced"
	case v.FenceError != "":
		return "failed: " + v.FenceError
	case v.StartedTime != nil:
		return "intended"
	}
	return "listed"
}

func exists(err error) string {
	if apierrors.IsNotFound(err) {
		return "gone"
	}
	if err != nil {
		return err.Error()
	}
	return "present"
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
