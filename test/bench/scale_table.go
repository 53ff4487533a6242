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
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/test/bench/procstat"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// What --mode=scale computes from what it observed, and the tables it
// prints: pure functions, tested on their own (scale_test.go).

// controllerMemoryGoal is issue 22's goal for the controller role's
// resident memory at 1,000 nodes and 30,000 pods.
const controllerMemoryGoal = 300 << 20

// failoverGoal is issue 22's goal for a failed node's pods: the last one's
// volume attached elsewhere within this long of the pods becoming eligible.
const failoverGoal = 5 * time.Second

// requestKey is one kind of API request: who (the product's role), what
// verb, on what resource ("pods", "nodes/status").
type requestKey struct {
	role, verb, resource string
}

// productRoles names the product's ServiceAccounts in the audit log.
var productRoles = map[string]string{
	attacherUser:           "controller",
	attacherUser + "-node": "node agent",
}

// roleOf is the product role of an audit log user, "" for anyone else.
func roleOf(user string) string { return productRoles[user] }

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// countRequests counts the product's requests received in [begin, end).
func countRequests(events []framework.AuditEvent, begin, end time.Time) map[requestKey]int {
	out := map[requestKey]int{}
	for _, e := range events {
		role := roleOf(e.User)
		if role == "" || e.Time.Before(begin) || !e.Time.Before(end) {
			continue
		}
		r := e.Resource
		if e.Subresource != "" {
			r += "/" + e.Subresource
		}
		out[requestKey{role, e.Verb, r}]++
	}
	return out
}

// steadyGoals are the counts issue 22's steady-state goals are about: the
// writes of anything but a Lease (the product's Leases are renewed on a
// period by design: leader election, the node-fencing owner, the driver's
// registration) and the lists (a list in steady state is a relist: an
// informer's watch that could not resume).
func steadyGoals(reqs map[requestKey]int) (writes, leaseWrites, lists int) {
	for k, n := range reqs {
		switch {
		case k.verb == "list":
			lists += n
		case isWrite(k.verb) && k.resource == "leases":
			leaseWrites += n
		case isWrite(k.verb):
			writes += n
		}
	}
	return writes, leaseWrites, lists
}

// steadyResult is what --mode=scale measured in steady state.
type steadyResult struct {
	nodes, pods, volumes int
	qps                  APISetting
	window               time.Duration
	procs                []procstat.Usage // the controller role's first
	requests             map[requestKey]int
	setupRestarts        int // of the controller while the cluster was filled
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// steadyTable is the table of the processes' cost and the product's API
// requests per minute in steady state, with the goals beside them.
func steadyTable(r steadyResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Steady state: %d nodes, %d pods, %d volumes attached through the product; %s window, attacher --kube-api-qps/burst %s\n",
		r.nodes, r.pods, r.volumes, r.window.Round(time.Second), r.qps)
	if r.setupRestarts > 0 {
		fmt.Fprintf(&sb, "(the controller exited %d times while the cluster was filled, its Lease not renewed in time, and was restarted)\n", r.setupRestarts)
	}
	fmt.Fprintf(&sb, "%-52s %9s %9s %7s  %s\n", "process", "RSS", "peak RSS", "CPU", "goal")
	for _, p := range r.procs {
		goal := ""
		if strings.HasPrefix(p.Name, "controller") {
			goal = fmt.Sprintf("RSS < %d MiB: %s", controllerMemoryGoal>>20, verdict(p.RSS < controllerMemoryGoal))
			if p.Peak >= controllerMemoryGoal {
				goal += fmt.Sprintf(" (peak %s)", verdict(false))
			}
		}
		fmt.Fprintf(&sb, "%-52s %5.0f MiB %5.0f MiB %6.1f%%  %s\n", p.Name, mib(p.RSS), mib(p.Peak), 100*p.CPU, goal)
	}
	fmt.Fprintf(&sb, "\nThe product's API requests per minute in steady state (audit log):\n")
	fmt.Fprintf(&sb, "%-11s %-8s %-32s %8s %8s\n", "role", "verb", "resource", "count", "/min")
	keys := make([]requestKey, 0, len(r.requests))
	for k := range r.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		return strings.Compare(a.role+"\x00"+a.verb+"\x00"+a.resource, b.role+"\x00"+b.verb+"\x00"+b.resource)
	})
	minutes := r.window.Minutes()
	for _, k := range keys {
		n := r.requests[k]
		fmt.Fprintf(&sb, "%-11s %-8s %-32s %8d %8.1f\n", k.role, k.verb, k.resource, n, float64(n)/minutes)
	}
	if len(keys) == 0 {
		fmt.Fprintf(&sb, "(none)\n")
	}
	writes, leaseWrites, lists := steadyGoals(r.requests)
	fmt.Fprintf(&sb, "goal: zero writes in steady state: %s (%d writes besides %d Lease renewals)\n", verdict(writes == 0), writes, leaseWrites)
	fmt.Fprintf(&sb, "goal: no periodic full relists: %s (%d lists)\n", verdict(lists == 0), lists)
	return sb.String()
}

// memoryOverGoal is an error when the controller role (the first process
// measured) was resident over the goal at the end of the window.
func memoryOverGoal(r steadyResult) error {
	if len(r.procs) == 0 {
		return fmt.Errorf("the controller role's memory was not measured")
	}
	if c := r.procs[0]; c.RSS >= controllerMemoryGoal {
		return fmt.Errorf("%s: RSS %.0f MiB, over the goal of %d MiB", c.Name, mib(c.RSS), controllerMemoryGoal>>20)
	}
	return nil
}

// podMove is one pod of a failed node: when it became eligible (Terminating
// on the NotReady node) and when its volume was seen attached on another
// node (zero: not yet).
type podMove struct {
	pod                string
	eligible, attached time.Time
	// steps are when each of moveSteps was first seen (zero: not seen).
	steps [len(moveSteps)]time.Time
}

// moveSteps are the milestones of one pod's move between eligible and
// attached elsewhere, in the order a failover takes them; the table shows
// how long after eligible each is reached, to say where the time goes.
var moveSteps = [...]string{
	"pod deleted",
	"old attachment deleted",
	"replacement created",
	"replacement scheduled",
	"new attachment created",
	"attached elsewhere",
}

// failoverResult is what the failover of one node's pods measured.
type failoverResult struct {
	path  string
	pods  int // on the node
	moves []podMove
	// writes are the product's writes (audit log) from the node's failure
	// to the last attach, by verb and resource ("delete pods").
	writes map[string]int
	// node is the node that failed; adc, the attach/detach controller's
	// writes of its status over the same span.
	node string
	adc  nodeStatusWrites
	// cpu is where the CPU went from the first pod eligible to the last
	// attached elsewhere (none: not measured).
	cpu *procstat.Window
}

// nodeStatusWrites are kube-controller-manager's attach/detach controller's
// writes of one node's status. Before it detaches a volume, the controller
// writes the node's status without it, then goes on to the next volume:
// one write per volume, one after another, and the attaches elsewhere wait
// for the detach pass to end.
type nodeStatusWrites struct {
	first, last time.Time
	took        []time.Duration // each, from received to answered
}

// adcUser is the attach/detach controller's ServiceAccount.
const adcUser = "system:serviceaccount:kube-system:attachdetach-controller"

// adcNodeWrites are the attach/detach controller's successful writes of
// node's status received from begin to end.
func adcNodeWrites(events []framework.AuditEvent, node string, begin, end time.Time) nodeStatusWrites {
	var w nodeStatusWrites
	for _, e := range events {
		if e.User != adcUser || e.Resource != "nodes" || e.Subresource != "status" || e.Name != node || e.Code >= 300 ||
			e.Time.Before(begin) || e.Time.After(end) {
			continue
		}
		if w.first.IsZero() || e.Time.Before(w.first) {
			w.first = e.Time
		}
		if e.Time.After(w.last) {
			w.last = e.Time
		}
		if !e.Answered.IsZero() {
			w.took = append(w.took, e.Answered.Sub(e.Time))
		}
	}
	return w
}

// firstEligible is when the first pod became eligible (zero: none did).
func (r failoverResult) firstEligible() time.Time {
	var first time.Time
	for _, m := range r.moves {
		if !m.eligible.IsZero() && (first.IsZero() || m.eligible.Before(first)) {
			first = m.eligible
		}
	}
	return first
}

func (r failoverResult) totalWrites() int {
	n := 0
	for _, c := range r.writes {
		n += c
	}
	return n
}

// samples are the eligible -> attached durations of the pods that moved.
func (r failoverResult) samples() []time.Duration {
	var out []time.Duration
	for _, m := range r.moves {
		if !m.eligible.IsZero() && !m.attached.IsZero() {
			out = append(out, m.attached.Sub(m.eligible))
		}
	}
	return out
}

// span is from the first pod eligible to the last one's volume attached
// elsewhere: the goal's figure; ok is false until every pod moved.
func (r failoverResult) span() (d time.Duration, ok bool) {
	var first, last time.Time
	moved := 0
	for _, m := range r.moves {
		if m.eligible.IsZero() || m.attached.IsZero() {
			continue
		}
		moved++
		if first.IsZero() || m.eligible.Before(first) {
			first = m.eligible
		}
		if m.attached.After(last) {
			last = m.attached
		}
	}
	if moved == 0 {
		return 0, false
	}
	return last.Sub(first), moved == r.pods
}

// stepLine is, for eligible and each milestone, when half of the pods and
// the last one reached it, counted from the first pod eligible (the goal's
// start); "" if no pod became eligible.
func stepLine(r failoverResult) string {
	first := r.firstEligible()
	if first.IsZero() {
		return ""
	}
	at := func(name string, of func(podMove) time.Time) string {
		var d []time.Duration
		for _, m := range r.moves {
			if t := of(m); !t.IsZero() {
				d = append(d, t.Sub(first))
			}
		}
		if len(d) == 0 {
			return name + " -"
		}
		return fmt.Sprintf("%s %.2f/%.2fs", name, timeline.Percentile(d, 50).Seconds(), slices.Max(d).Seconds())
	}
	parts := []string{at("eligible", func(m podMove) time.Time { return m.eligible })}
	for i, name := range moveSteps {
		parts = append(parts, at(name, func(m podMove) time.Time { return m.steps[i] }))
	}
	return strings.Join(parts, ", ")
}

// adcLine says how many status writes of the failed node the attach/detach
// controller made, when, and how long each took ("" with none).
func adcLine(r failoverResult) string {
	first := r.firstEligible()
	if len(r.adc.took) == 0 || first.IsZero() {
		return ""
	}
	return fmt.Sprintf("the attach/detach controller's writes of %s's status (one per volume it detaches, one at a time): %d, from %.2fs to %.2fs after the first eligible, each answered in p50 %dms, p95 %dms, max %dms",
		r.node, len(r.adc.took), r.adc.first.Sub(first).Seconds(), r.adc.last.Sub(first).Seconds(),
		timeline.Percentile(r.adc.took, 50).Milliseconds(), timeline.Percentile(r.adc.took, 95).Milliseconds(), slices.Max(r.adc.took).Milliseconds())
}

// failoverScaleTable is the table of one failed node's pods, per path.
func failoverScaleTable(hotPods int, clients string, results []failoverResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "One node with %d pods and %d volumes fails: each pod eligible (Terminating on the NotReady node) -> its volume attached elsewhere\n", hotPods, hotPods)
	fmt.Fprintf(&sb, "%s\n", clients)
	fmt.Fprintf(&sb, "%-16s %8s %7s %7s %7s %12s %11s  %s\n", "path", "moved", "p50", "p95", "max", "first->last", "writes/pod", "goal")
	for _, r := range results {
		s := r.samples()
		span, all := r.span()
		moved := fmt.Sprintf("%d/%d", len(s), r.pods)
		if len(s) == 0 {
			fmt.Fprintf(&sb, "%-16s %8s %7s %7s %7s %12s %11s\n", r.path, moved, "-", "-", "-", "-", "-")
			continue
		}
		goal := fmt.Sprintf("last within %s of the first eligible: %s", failoverGoal, verdict(all && span <= failoverGoal))
		fmt.Fprintf(&sb, "%-16s %8s %6.2fs %6.2fs %6.2fs %11.2fs %11.1f  %s\n", r.path, moved,
			timeline.Percentile(s, 50).Seconds(), timeline.Percentile(s, 95).Seconds(), slices.Max(s).Seconds(), span.Seconds(),
			float64(r.totalWrites())/float64(r.pods), goal)
	}
	// Where the time goes: when the pods reached each milestone.
	for _, r := range results {
		if line := stepLine(r); line != "" {
			fmt.Fprintf(&sb, "%s, from the first eligible (half of the pods/the last): %s\n", r.path, line)
		}
	}
	// What paces the moves: the attach/detach controller's detach pass,
	// one Node status write per volume, and the machine's two cores.
	for _, r := range results {
		if line := adcLine(r); line != "" {
			fmt.Fprintf(&sb, "%s, %s\n", r.path, line)
		}
	}
	for _, r := range results {
		if r.cpu != nil {
			fmt.Fprintf(&sb, "%s, CPU from the first eligible to the last attached: %s\n", r.path, r.cpu.Line())
		}
	}
	// Where the writes go: the API client's rate (--kube-api-qps) paces them.
	for _, r := range results {
		if len(r.writes) == 0 {
			continue
		}
		kinds := make([]string, 0, len(r.writes))
		for k := range r.writes {
			kinds = append(kinds, k)
		}
		slices.SortFunc(kinds, func(a, b string) int {
			if r.writes[a] != r.writes[b] {
				return r.writes[b] - r.writes[a]
			}
			return strings.Compare(a, b)
		})
		var parts []string
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%.2f %s", float64(r.writes[k])/float64(r.pods), k))
		}
		fmt.Fprintf(&sb, "%s writes per pod: %s\n", r.path, strings.Join(parts, ", "))
	}
	return sb.String()
}

// guardSlots is how many nodes the storm guard lets be fenced at once out
// of total, as the product decides it (failover.StormGuard).
func guardSlots(total, maxNodes, percent int) int {
	n := 0
	for n < total {
		if ok, _ := failover.StormGuard(n, total, maxNodes, percent, false); !ok {
			break
		}
		n++
	}
	return n
}

// rackResult is what a rack's power loss measured.
type rackResult struct {
	nodes, totalNodes, percent int
	slots                      int // the guard's, out of all nodes
	admittedBefore             int // nodes admitted already when the rack failed
	// maxAdmitted is the most nodes the storm guard's Lease listed at once,
	// maxQuarantined the most nodes carrying the quarantine taint at once.
	maxAdmitted, maxQuarantined int
	admitted                    []string // the rack's nodes admitted
	waiting                     []string // the rack's nodes not admitted
	deferred                    int      // of those, with a FencingDeferred Event
	// allMoved is from the power loss to the last pod of the admitted nodes
	// attached elsewhere (0: not every one did).
	allMoved time.Duration
	moves    []podMove // the admitted nodes' pods
}

func rackTable(r rackResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "A rack of %d nodes loses power at once; --max-fenced-node-percent=%d of %d nodes: %d fenced at most, %d admitted before\n",
		r.nodes, r.percent, r.totalNodes, r.slots, r.admittedBefore)
	fmt.Fprintf(&sb, "%-56s %s\n", "most nodes admitted at once (storm guard Lease)", fmt.Sprintf("%d of %d allowed: %s", r.maxAdmitted, r.slots, verdict(r.maxAdmitted <= r.slots)))
	fmt.Fprintf(&sb, "%-56s %d\n", "most nodes quarantined at once", r.maxQuarantined)
	fmt.Fprintf(&sb, "%-56s %d\n", "rack nodes admitted", len(r.admitted))
	fmt.Fprintf(&sb, "%-56s %s\n", "rack nodes waiting, with a FencingDeferred Event", fmt.Sprintf("%d of %d: %s", r.deferred, len(r.waiting), verdict(r.deferred == len(r.waiting))))
	res := failoverResult{pods: len(r.moves), moves: r.moves}
	s := res.samples()
	if len(s) > 0 {
		fmt.Fprintf(&sb, "%-56s %d/%d moved, p50 %.2fs, p95 %.2fs, max %.2fs\n", "admitted nodes' pods, eligible -> attached elsewhere", len(s), len(r.moves),
			timeline.Percentile(s, 50).Seconds(), timeline.Percentile(s, 95).Seconds(), slices.Max(s).Seconds())
	}
	if r.allMoved > 0 {
		fmt.Fprintf(&sb, "%-56s %.1fs\n", "power loss -> every pod of the admitted nodes elsewhere", r.allMoved.Seconds())
	} else {
		fmt.Fprintf(&sb, "%-56s %s\n", "power loss -> every pod of the admitted nodes elsewhere", "not reached")
	}
	return sb.String()
}
