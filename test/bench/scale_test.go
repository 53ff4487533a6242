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

package bench

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-fence/fence-attacher/test/bench/procstat"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

func TestCountRequests(t *testing.T) {
	at := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	ev := func(user, verb, resource, sub string, after time.Duration) framework.AuditEvent {
		return framework.AuditEvent{User: user, Verb: verb, Resource: resource, Subresource: sub, Time: at.Add(after)}
	}
	node := attacherUser + "-node"
	events := []framework.AuditEvent{
		ev(attacherUser, "update", "leases", "", -time.Second), // before the window
		ev(attacherUser, "update", "leases", "", 0),
		ev(attacherUser, "update", "leases", "", 10*time.Second),
		ev(attacherUser, "watch", "pods", "", 20*time.Second),
		ev(node, "list", "fencingrequests", "", 30*time.Second),
		ev(attacherUser, "patch", "nodes", "status", 40*time.Second),
		ev("system:serviceaccount:default:someone", "create", "pods", "", 40*time.Second), // not the product
		ev(attacherUser, "update", "leases", "", time.Minute),                             // the window's end is out
	}
	got := countRequests(events, at, at.Add(time.Minute))
	want := map[requestKey]int{
		{"controller", "update", "leases"}:        2,
		{"controller", "watch", "pods"}:           1,
		{"node agent", "list", "fencingrequests"}: 1,
		{"controller", "patch", "nodes/status"}:   1,
	}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%v: %d, want %d", k, got[k], n)
		}
	}
	writes, leaseWrites, lists := steadyGoals(got)
	if writes != 1 || leaseWrites != 2 || lists != 1 {
		t.Errorf("writes %d, lease writes %d, lists %d; want 1, 2, 1", writes, leaseWrites, lists)
	}
}

func TestSteadyTable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rss      int64
		peak     int64
		requests map[requestKey]int
		restarts int
		want     []string
	}{
		{name: "within the goals", rss: 120 << 20, peak: 200 << 20,
			requests: map[requestKey]int{{"controller", "update", "leases"}: 24},
			want: []string{
				"controller (x)                                         120 MiB   200 MiB    5.0%  RSS < 300 MiB: ok\n",
				"controller  update   leases                                 24     12.0\n",
				"goal: zero writes in steady state: ok (0 writes besides 24 Lease renewals)\n",
				"goal: no periodic full relists: ok (0 lists)\n",
			}},
		{name: "over the goals", rss: 310 << 20, peak: 400 << 20, restarts: 2,
			requests: map[requestKey]int{{"controller", "list", "pods"}: 2, {"controller", "patch", "nodes"}: 3},
			want: []string{
				"(the controller exited 2 times while the cluster was filled, its Lease not renewed in time, and was restarted)\n",
				"RSS < 300 MiB: MISSED (peak MISSED)\n",
				"goal: zero writes in steady state: MISSED (3 writes besides 0 Lease renewals)\n",
				"goal: no periodic full relists: MISSED (2 lists)\n",
			}},
		{name: "a peak over the goal only", rss: 290 << 20, peak: 310 << 20,
			want: []string{"RSS < 300 MiB: ok (peak MISSED)\n", "(none)\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := steadyTable(steadyResult{nodes: 100, pods: 3000, volumes: 300, qps: "default", window: 2 * time.Minute,
				procs:    []procstat.Usage{{Name: "controller (x)", RSS: tc.rss, Peak: tc.peak, CPU: 0.05}, {Name: "node agent (y)", RSS: 20 << 20, Peak: 20 << 20}},
				requests: tc.requests, setupRestarts: tc.restarts})
			if !strings.HasPrefix(got, "Steady state: 100 nodes, 3000 pods, 300 volumes attached through the product; 2m0s window, attacher --kube-api-qps/burst 5/10\n") {
				t.Errorf("title: %q", strings.SplitN(got, "\n", 2)[0])
			}
			expectLines(t, got, tc.want...)
		})
	}
}

func TestFailoverSummary(t *testing.T) {
	at := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return at.Add(time.Duration(x * float64(time.Second))) }
	for _, tc := range []struct {
		name       string
		moves      []podMove
		pods       int
		wantMoved  int
		wantSpan   time.Duration
		wantAll    bool
		wantInRows []string
	}{
		{name: "every pod moved within the goal", pods: 3, moves: []podMove{
			{eligible: s(1), attached: s(2)}, {eligible: s(1.5), attached: s(3)}, {eligible: s(1), attached: s(4)},
		}, wantMoved: 3, wantSpan: 3 * time.Second, wantAll: true,
			wantInRows: []string{
				"automatic             3/3   1.50s   3.00s   3.00s        3.00s         2.0  last within 5s of the first eligible: ok\n",
				"automatic writes per pod: 1.00 delete pods, 1.00 patch volumeattachments/status\n",
			}},
		{name: "the last pod late", pods: 2, moves: []podMove{
			{eligible: s(1), attached: s(2)}, {eligible: s(1), attached: s(7)},
		}, wantMoved: 2, wantSpan: 6 * time.Second, wantAll: true,
			wantInRows: []string{"last within 5s of the first eligible: MISSED\n"}},
		{name: "a pod that never moved", pods: 2, moves: []podMove{
			{eligible: s(1), attached: s(2)}, {eligible: s(1)},
		}, wantMoved: 1, wantSpan: time.Second, wantAll: false,
			wantInRows: []string{"automatic             1/2", "MISSED\n"}},
		{name: "none moved", pods: 2, moves: []podMove{{}, {eligible: s(1)}},
			wantInRows: []string{"automatic             0/2       -       -       -            -           -\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := failoverResult{path: "automatic", pods: tc.pods, moves: tc.moves, writes: map[string]int{"delete pods": tc.pods, "patch volumeattachments/status": tc.pods}}
			if got := len(r.samples()); got != tc.wantMoved {
				t.Errorf("%d samples, want %d", got, tc.wantMoved)
			}
			span, all := r.span()
			if span != tc.wantSpan || all != tc.wantAll {
				t.Errorf("span %s (all moved: %v), want %s (%v)", span, all, tc.wantSpan, tc.wantAll)
			}
			table := failoverScaleTable(tc.pods, "API clients", []failoverResult{r})
			for _, w := range tc.wantInRows {
				if !strings.Contains(table, w) {
					t.Errorf("no %q in\n%s", w, table)
				}
			}
		})
	}
}

func TestGuardSlots(t *testing.T) {
	for _, tc := range []struct {
		total, maxNodes, percent, want int
	}{
		{total: 1000, percent: 1, want: 10},
		{total: 100, percent: 3, want: 3},
		{total: 30, percent: 10, want: 3},
		{total: 30, percent: 1, want: 0},
		{total: 1000, maxNodes: 4, percent: 1, want: 4},
		{total: 10, percent: 0, want: 10}, // no limit: every node
	} {
		if got := guardSlots(tc.total, tc.maxNodes, tc.percent); got != tc.want {
			t.Errorf("guardSlots(%d, %d, %d%%) = %d, want %d", tc.total, tc.maxNodes, tc.percent, got, tc.want)
		}
	}
}

func TestPlanScale(t *testing.T) {
	base := ScaleOptions{Nodes: 1000, Pods: 30000, Volumes: 3000, HotPods: 110, Rack: 20, RackPods: 5, InTree: true, Window: time.Minute}
	with := func(f func(*ScaleOptions)) ScaleOptions { o := base; f(&o); return o }
	for _, tc := range []struct {
		name                                            string
		o                                               ScaleOptions
		err                                             string
		general, sets, bulk, setVolumes, percent, slots int
	}{
		// 3000 - 110 - 100 = 2790 general volumes: 111 sets of 25 and one
		// of 15; the guard admits the failed node and 10 of the rack.
		{name: "issue 22's", o: base, general: 978, sets: 2 + 112, bulk: 978, setVolumes: 3000, percent: 1, slots: 10},
		{name: "the e2e test's", o: with(func(o *ScaleOptions) { o.Nodes, o.Pods, o.Volumes, o.Rack = 100, 3000, 300, 4 }),
			general: 94, sets: 2 + 7, bulk: 94, setVolumes: 300, percent: 3, slots: 3},
		{name: "no rack, no in-tree path", o: with(func(o *ScaleOptions) { o.Nodes, o.Pods, o.Volumes, o.Rack, o.InTree = 10, 200, 110, 0, false }),
			general: 9, sets: 1, bulk: 9, setVolumes: 110, percent: 10, slots: 1},
		{name: "fewer bulk pods than general nodes", o: with(func(o *ScaleOptions) { o.Nodes, o.Pods, o.Volumes, o.Rack, o.InTree = 10, 113, 110, 0, false }),
			general: 9, sets: 1, bulk: 3, setVolumes: 110, percent: 10, slots: 1},
		{name: "issue 22's without a rack: the smallest limit, 1%, has more room than the failed node needs",
			o: with(func(o *ScaleOptions) { o.Rack = 0 }), general: 998, sets: 2 + 115, bulk: 998, setVolumes: 3000, percent: 1, slots: 10},
		{name: "a given limit", o: with(func(o *ScaleOptions) { o.GuardPercent = 5 }), general: 978, sets: 114, bulk: 978, setVolumes: 3000, percent: 5, slots: 50},
		{name: "too few nodes", o: with(func(o *ScaleOptions) { o.Nodes = 23 }), err: "--nodes=23: want at least 24"},
		{name: "too few volumes", o: with(func(o *ScaleOptions) { o.Volumes = 200 }), err: "--volumes=200: want at least 210"},
		{name: "fewer pods than volumes", o: with(func(o *ScaleOptions) { o.Pods = 2999 }), err: "--pods=2999"},
		{name: "no window", o: with(func(o *ScaleOptions) { o.Window = 0 }), err: "--window=0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planScale(tc.o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vols := 0
			for _, w := range p.sets {
				vols += w.replicas
			}
			pods := vols
			// The bulk pods go to the general nodes, one Deployment per
			// node, shares at most one pod apart.
			placed := map[string]bool{}
			lo, hi := tc.o.Pods, 0
			for _, w := range p.bulk {
				pods += w.replicas
				if !slices.Contains(p.general, w.node) || placed[w.node] {
					t.Errorf("Deployment %s on node %q: want a general node of its own", w.name, w.node)
				}
				placed[w.node] = true
				lo, hi = min(lo, w.replicas), max(hi, w.replicas)
			}
			if len(p.bulk) > 0 && hi-lo > 1 {
				t.Errorf("bulk shares from %d to %d pods a node: want an even spread", lo, hi)
			}
			if len(p.general) != tc.general || len(p.sets) != tc.sets || len(p.bulk) != tc.bulk || vols != tc.setVolumes || p.percent != tc.percent || p.slots != tc.slots {
				t.Errorf("general %d, sets %d, bulk %d, volumes %d, percent %d, slots %d; want %d, %d, %d, %d, %d, %d",
					len(p.general), len(p.sets), len(p.bulk), vols, p.percent, p.slots, tc.general, tc.sets, tc.bulk, tc.setVolumes, tc.percent, tc.slots)
			}
			if pods != tc.o.Pods || len(p.nodes()) != tc.o.Nodes {
				t.Errorf("%d pods on %d nodes, want %d on %d", pods, len(p.nodes()), tc.o.Pods, tc.o.Nodes)
			}
			if len(p.spares) != min(maxSpares, len(p.general)) {
				t.Errorf("%d spares", len(p.spares))
			}
		})
	}
}

func TestRackTable(t *testing.T) {
	at := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	r := rackResult{nodes: 4, totalNodes: 100, percent: 3, slots: 3, admittedBefore: 1, maxAdmitted: 3, maxQuarantined: 3,
		admitted: []string{"rack-00", "rack-01"}, waiting: []string{"rack-02", "rack-03"}, deferred: 2, allMoved: 42 * time.Second,
		moves: []podMove{{eligible: at, attached: at.Add(time.Second)}, {eligible: at, attached: at.Add(3 * time.Second)}}}
	got := rackTable(r)
	expectLines(t, got,
		"--max-fenced-node-percent=3 of 100 nodes: 3 fenced at most, 1 admitted before\n",
		"3 of 3 allowed: ok\n",
		"2 of 2: ok\n",
		"2/2 moved, p50 1.00s, p95 3.00s, max 3.00s\n",
		"42.0s\n",
	)
	r.maxAdmitted, r.deferred, r.allMoved = 4, 1, 0
	got = rackTable(r)
	expectLines(t, got, "4 of 3 allowed: MISSED\n", "1 of 2: MISSED\n", "not reached\n")
}

func TestMemoryOverGoal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs []procstat.Usage
		err   string
	}{
		{name: "under", procs: []procstat.Usage{{Name: "controller", RSS: 299 << 20, Peak: 400 << 20}, {Name: "node agent", RSS: 400 << 20}}},
		{name: "at the goal", procs: []procstat.Usage{{Name: "controller", RSS: 300 << 20}}, err: "controller: RSS 300 MiB, over the goal of 300 MiB"},
		{name: "not measured", err: "not measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := memoryOverGoal(steadyResult{procs: tc.procs})
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.err && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// --controller-qps sets the failover's API clients too, and the table says
// what every client that paces a failover may send.
func TestScaleAPIClients(t *testing.T) {
	for _, tc := range []struct {
		o           ScaleOptions
		wantArgs    []string
		notArgs     []string
		wantClients string
	}{
		{o: ScaleOptions{QPS: "default"}, wantArgs: []string{"--kube-api-qps=5", "--kube-api-burst=10"}, notArgs: []string{"--failover-kube-api-qps"},
			wantClients: "attacher 5/10 (10 workers), its failover 20/30, kube-controller-manager and kube-scheduler 20/30 and 50/100"},
		{o: ScaleOptions{QPS: "100", ControlPlaneQPS: 100}, wantArgs: []string{"--kube-api-qps=100", "--failover-kube-api-qps=100", "--failover-kube-api-burst=100"},
			notArgs:     []string{"--worker-threads"},
			wantClients: "attacher 100/100 (10 workers), its failover 100/100, kube-controller-manager and kube-scheduler 100/200"},
		{o: ScaleOptions{QPS: "300", ControlPlaneQPS: 300, Workers: 50}, wantArgs: []string{"--worker-threads=50", "--kube-api-qps=300"},
			wantClients: "attacher 300/300 (50 workers), its failover 300/300, kube-controller-manager and kube-scheduler 300/600"},
	} {
		args := strings.Join(measureArgs(tc.o.QPS, 50, tc.o.Workers), " ")
		for _, w := range tc.wantArgs {
			if !strings.Contains(args, w) {
				t.Errorf("%s: no %s in %s", tc.o.QPS, w, args)
			}
		}
		for _, w := range tc.notArgs {
			if strings.Contains(args, w) {
				t.Errorf("%s: %s in %s", tc.o.QPS, w, args)
			}
		}
		if got := tc.o.clients(); !strings.HasSuffix(got, tc.wantClients) {
			t.Errorf("clients() = %q, want it to end with %q", got, tc.wantClients)
		}
	}
}

// The tracker tells each milestone of a pod's move from its watch events,
// and the table line says when half of the pods and the last reached each,
// from the first eligible.
func TestTrackerMilestones(t *testing.T) {
	at := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	clock := at
	tr := &tracker{terminating: map[string]podMark{}, attached: map[string]map[string]time.Time{}, quarantined: map[string]bool{},
		podGone: map[string]time.Time{}, podUIDs: map[string]map[types.UID]time.Time{}, placed: map[string]map[string]time.Time{},
		vaCreated: map[string]map[string]time.Time{}, vaGone: map[string]map[string]time.Time{}, now: func() time.Time { return clock }}
	pod := func(uid types.UID, node string, terminating bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hot-0", UID: uid}, Spec: corev1.PodSpec{NodeName: node}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: clock}
		}
		return p
	}
	va := func(node string, attached bool) *storagev1.VolumeAttachment {
		pv := "pv-hot-0"
		return &storagev1.VolumeAttachment{Spec: storagev1.VolumeAttachmentSpec{NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
	}
	step := func(d time.Duration, event func()) {
		clock = clock.Add(d)
		event()
	}
	// Before the failure: running and attached on hot-0.
	tr.onPod(pod("a", "hot-0", false))
	tr.onVA(va("hot-0", true))
	begin := at.Add(time.Second)
	step(2*time.Second, func() { tr.onPod(pod("a", "hot-0", true)) })   // eligible at +2s
	step(time.Second, func() { tr.onPodGone(pod("a", "hot-0", true)) }) // +3s
	step(time.Second, func() { tr.onVAGone(va("hot-0", true)) })        // +4s
	step(time.Second, func() { tr.onPod(pod("b", "", false)) })         // +5s
	step(time.Second, func() { tr.onPod(pod("b", "g-1", false)) })      // +6s
	step(time.Second, func() { tr.onVA(va("g-1", false)) })             // +7s
	step(time.Second, func() { tr.onVA(va("g-1", true)) })              // +8s
	step(time.Second, func() { tr.onPod(pod("b", "g-1", false)) })      // seen again: no change
	m := tr.moveOf("hot-0", "pv-hot-0", "hot-0", begin)
	want := []time.Duration{3, 4, 5, 6, 7, 8}
	if m.eligible != at.Add(2*time.Second) || m.attached != at.Add(8*time.Second) {
		t.Errorf("eligible %v, attached %v", m.eligible.Sub(at), m.attached.Sub(at))
	}
	for i, w := range want {
		if got := m.steps[i].Sub(at); got != w*time.Second {
			t.Errorf("%s at +%v, want +%v", moveSteps[i], got, w*time.Second)
		}
	}
	line := stepLine(failoverResult{path: "automatic", pods: 1, moves: []podMove{m}})
	if wantLine := "eligible 0.00/0.00s, pod deleted 1.00/1.00s, old attachment deleted 2.00/2.00s, replacement created 3.00/3.00s, " +
		"replacement scheduled 4.00/4.00s, new attachment created 5.00/5.00s, attached elsewhere 6.00/6.00s"; line != wantLine {
		t.Errorf("step line\n%s\nwant\n%s", line, wantLine)
	}
	// What happened before the failure is no milestone of it.
	if m := tr.moveOf("hot-0", "pv-hot-0", "hot-0", at.Add(9*time.Second)); m.steps != [len(moveSteps)]time.Time{} {
		t.Errorf("milestones before since: %v", m.steps)
	}
}

// The bench's pod cache keeps what the tracker reads of a pod, and nothing
// else of it.
func TestSlimPod(t *testing.T) {
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hot-0", UID: "u", ResourceVersion: "7", Labels: map[string]string{appLabel: "hot"},
			Annotations: map[string]string{"a": "b"}, DeletionTimestamp: &now},
		Spec:   corev1.PodSpec{NodeName: "hot-0", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	o, err := slimPod(full)
	if err != nil {
		t.Fatal(err)
	}
	p := o.(*corev1.Pod)
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hot-0", UID: "u", ResourceVersion: "7", Labels: map[string]string{appLabel: "hot"}, DeletionTimestamp: &now},
		Spec:       corev1.PodSpec{NodeName: "hot-0"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("slim pod %+v, want %+v", p, want)
	}
	if o, _ := slimPod("not a pod"); o != "not a pod" {
		t.Errorf("a non-pod changed: %v", o)
	}
}

func TestADCNodeWrites(t *testing.T) {
	at := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return at.Add(time.Duration(x * float64(time.Second))) }
	write := func(user, node, sub string, code int, received, took float64) framework.AuditEvent {
		return framework.AuditEvent{User: user, Verb: "patch", Resource: "nodes", Subresource: sub, Name: node, Code: code,
			Time: s(received), Answered: s(received + took)}
	}
	events := []framework.AuditEvent{
		write(adcUser, "hot-0", "status", 200, 0.5, 0.1), // before the failure
		write(adcUser, "hot-0", "status", 200, 2, 0.04),
		write(adcUser, "hot-0", "status", 200, 2.1, 0.2),
		write(adcUser, "hot-0", "status", 409, 2.2, 0.01), // a conflict: not a write
		write(adcUser, "hot-1", "status", 200, 2.3, 0.01), // another node
		write(adcUser, "hot-0", "", 200, 2.4, 0.01),       // not its status
		write("system:serviceaccount:default:csi-fence-attacher", "hot-0", "status", 200, 2.5, 0.01),
		write(adcUser, "hot-0", "status", 200, 3, 0.06),
		write(adcUser, "hot-0", "status", 200, 9, 0.06), // after the last attach
	}
	w := adcNodeWrites(events, "hot-0", s(1), s(8))
	if len(w.took) != 3 || !w.first.Equal(s(2)) || !w.last.Equal(s(3)) {
		t.Fatalf("%d writes from %s to %s, want 3 from %s to %s", len(w.took), w.first, w.last, s(2), s(3))
	}
	r := failoverResult{path: "automatic", pods: 3, node: "hot-0", adc: w, moves: []podMove{{eligible: s(1.5)}, {eligible: s(1)}}}
	expectLines(t, adcLine(r), "the attach/detach controller's writes of hot-0's status (one per volume it detaches, one at a time): 3, from 1.00s to 2.00s after the first eligible, each answered in p50 60ms, p95 200ms, max 200ms")
	table := failoverScaleTable(3, "API clients", []failoverResult{r})
	if !strings.Contains(table, "automatic, the attach/detach controller's writes of hot-0's status") {
		t.Errorf("no attach/detach controller line in\n%s", table)
	}
	if adcLine(failoverResult{node: "hot-0", moves: r.moves}) != "" {
		t.Error("a line without writes")
	}
}
