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

package trials

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// aliveSlack is how long a node must have been alive, as the trial saw it,
// before a fence or a force-delete reaching it counts as a broken
// invariant: the product lets a live read finding the node down stand for
// a second (failover's liveReadValidity) and the trial's watches lag the
// apiserver by a little.
const aliveSlack = 1500 * time.Millisecond

// watchLease records when the trial saw each new renewTime of node's
// heartbeat Lease (on its own clock): a node whose kubelet renews is alive,
// whatever its Ready condition says and whatever its clock says.
func (t *Trial) watchLease(node string, stop <-chan struct{}) error {
	lw := cache.NewListWatchFromClient(t.c.Client.CoordinationV1().RESTClient(), "leases", nodehealth.LeaseNamespace, fields.OneTermEqualSelector("metadata.name", node))
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	on := func(o interface{}) {
		l, ok := o.(*coordinationv1.Lease)
		if !ok || l.Spec.RenewTime == nil {
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.renewals == nil {
			t.renewals, t.lastRenew = map[string][]time.Time{}, map[string]time.Time{}
		}
		if r := l.Spec.RenewTime.Time; !r.Equal(t.lastRenew[node]) {
			t.lastRenew[node] = r
			t.renewals[node] = append(t.renewals[node], time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o interface{}) { on(o) }}); err != nil {
		return err
	}
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return fmt.Errorf("lease of node %s: cache not synced", node)
	}
	return nil
}

// talking says whether node's Ready condition was seen other than Unknown
// (or absent: a Node registered a moment ago) throughout [at-aliveSlack,
// at]: its kubelet reported, so the node lifecycle controller had not
// declared it unreachable.
func (t *Trial) talking(node string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := at.Add(-aliveSlack)
	talking := true // before the first transition: the node was up
	for _, tr := range t.transitions[node] {
		if tr.At.After(at) {
			break
		}
		if !tr.At.After(from) {
			talking = tr.Talking // the state at from
		} else if !tr.Talking {
			return false
		}
	}
	return talking
}

// renewing says whether node's heartbeat Lease was renewed, after the node
// was first seen unreachable, recently enough at the time at that it was
// alive for aliveSlack by then and still is by a margin: a renewal seen at r
// makes it alive in [r+aliveSlack, r+lease duration-aliveSlack].
func (t *Trial) renewing(node string, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var down time.Time
	for _, tr := range t.transitions[node] {
		if !tr.Talking {
			down = tr.At
			break
		}
	}
	if down.IsZero() {
		return false
	}
	for _, r := range t.renewals[node] {
		if r.After(down) && !at.Before(r.Add(aliveSlack)) && at.Before(r.Add(leaseDuration-aliveSlack)) {
			return true
		}
	}
	return false
}

// leaseDuration is the heartbeat Lease duration of the KWOK nodes
// (framework: --node-lease-duration-seconds=10) and of the trial's own
// renewals.
const leaseDuration = 10 * time.Second

// alive says whether node was alive at the time at by what the trial saw:
// its kubelet reporting, or renewing its Lease after it was unreachable.
func (t *Trial) alive(node string, at time.Time) bool {
	return t.talking(node, at) || t.renewing(node, at)
}

// controllerRPC is a call the mock controller instance received: a
// ControllerPublishVolume, or a ControllerUnpublishVolume with fence=true
// that the array carried out (Fence); when the driver received it, for
// which volume and node.
type controllerRPC struct {
	Fence          bool
	Received       time.Time
	Volume, NodeID string
}

// controllerRPCs reads the publishes and the fences a mock controller
// instance received from its log (--v=5), oldest first: controllerRPCsOf
// for a driver whose CSIDriver does not declare that its unpublish revokes
// access.
func controllerRPCs(logPath string, since time.Time) ([]controllerRPC, error) {
	return controllerRPCsOf(logPath, since, false)
}

// controllerRPCsOf reads the publishes and the fences a mock controller
// instance received from its log (--v=5), oldest first. A fence is a "GRPC
// request" of ControllerUnpublishVolume logged with fence=true (the request
// asked for one; the line is written before any injected latency, so two
// fences of one volume in flight at once keep their order), or an
// "Unpublished" line with fence=true for a request that did not ask (the
// driver fenced by its own rule, e.g. the out-of-service taint), received
// at the last request for the same volume and node before it. A request
// asking for a fence counts as one whether or not it succeeded: S4 is about
// what was asked of a node. For a driver declared to revoke access on
// unpublish (revokes: contract.UnpublishRevokesAccessAnnotation on its
// CSIDriver), every ControllerUnpublishVolume request naming a node is a
// fence of that node as well, counted when received: the product fences
// such a driver with its plain detach, which cuts the node off as
// fence=true does, so S4 and the first-fence timings hold it to the same
// rules. A graceful detach from a node that came back is one of a volume
// fenced there and not published since, which fencesWhileAlive passes.
// Lines before since are skipped; times are this machine's clock (klog's
// header, local time).
func controllerRPCsOf(logPath string, since time.Time, revokes bool) ([]controllerRPC, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []controllerRPC
	type request struct {
		at    time.Time
		line  string
		fence bool // asked for a fence: counted when received
	}
	var unpublishes []request
	sawRequest := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		at, ok := klogTime(line, since)
		if !ok || at.Before(since) {
			continue
		}
		isRequest := strings.Contains(line, `"GRPC request"`)
		sawRequest = sawRequest || isRequest
		switch {
		case isRequest && strings.Contains(line, `method="ControllerUnpublishVolume"`):
			r := request{at: at, line: line, fence: klogValue(line, "fence") == "true" || revokes && requestField(line, "node_id") != ""}
			unpublishes = append(unpublishes, r)
			if r.fence {
				out = append(out, controllerRPC{Fence: true, Received: at, Volume: requestField(line, "volume_id"), NodeID: requestField(line, "node_id")})
			}
		case isRequest && strings.Contains(line, `method="ControllerPublishVolume"`):
			out = append(out, controllerRPC{Received: at, Volume: requestField(line, "volume_id"), NodeID: requestField(line, "node_id")})
		case strings.Contains(line, `"Unpublished"`) && strings.Contains(line, "fence=true"):
			rpc := controllerRPC{Fence: true, Received: at, Volume: klogValue(line, "volume"), NodeID: klogValue(line, "node")}
			asked := false
			for i := len(unpublishes) - 1; i >= 0; i-- {
				r := unpublishes[i]
				if requestField(r.line, "volume_id") == rpc.Volume && requestField(r.line, "node_id") == rpc.NodeID {
					rpc.Received, asked = r.at, r.fence
					break
				}
			}
			if !asked {
				out = append(out, rpc)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !sawRequest {
		return nil, fmt.Errorf("%s logs no gRPC request since %s: the fence witness needs the mock driver at --v=5 (MockArgs)", logPath, since.Format("15:04:05"))
	}
	slices.SortStableFunc(out, func(a, b controllerRPC) int { return a.Received.Compare(b.Received) })
	return out, nil
}

// requestField returns a string field of the JSON request in a "GRPC
// request" line, as klog quotes it: \"field\":\"value\".
func requestField(line, field string) string {
	_, v, ok := strings.Cut(line, `\"`+field+`\":\"`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `\"`)
	return v
}

// klogTime parses the header of a klog text line ("I1125 14:07:50.123456
// ..."), which has no year: it is taken from ref.
func klogTime(line string, ref time.Time) (time.Time, bool) {
	if len(line) < 21 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	at = at.AddDate(ref.Year(), 0, 0)
	if at.Sub(ref) < -180*24*time.Hour { // the run crossed a new year
		at = at.AddDate(1, 0, 0)
	}
	return at, true
}

// klogValue returns the value of key in a klog structured line: key="v" or
// key=v.
func klogValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		v = v[1:]
		end, _, _ := strings.Cut(v, `"`)
		return end
	}
	end, _, _ := strings.Cut(v, " ")
	return end
}

// revokesOnDetach says whether d's CSIDriver declares, as the product reads
// it, that a plain unpublish revokes access: then its plain unpublish of a
// node is that node's fence (controllerRPCsOf).
func (t *Trial) revokesOnDetach(ctx context.Context, d *framework.Driver) (bool, error) {
	cd, err := t.c.Client.StorageV1().CSIDrivers().Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return cd.Annotations[contract.UnpublishRevokesAccessAnnotation] == "true", nil
}

// nodeTalking says whether a Node's Ready condition is anything but
// Unknown: absent (registered a moment ago), True, or False (its kubelet's
// own report).
func nodeTalking(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionUnknown
		}
	}
	return true
}
