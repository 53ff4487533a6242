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
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"k8s.io/klog/v2"
)

// mockCalls are the log lines the mock driver writes for the controller
// calls of a test, in the order they are made.
type mockCalls struct {
	// request: a ControllerUnpublishVolume arrives, asking for a fence or
	// not; unpublished: the array carried one out, fenced or not.
	request, unpublished func(vol, node string, fence bool)
	publish              func(vol, node string)
	// mark returns the time of the line written last.
	mark func() time.Time
}

// unpublish is a ControllerUnpublishVolume that arrives and is carried out.
func (c mockCalls) unpublish(vol, node string, fence bool) {
	c.request(vol, node, fence)
	c.unpublished(vol, node, fence)
}

// mockLog writes what the mock driver logs for the calls, with klog's own
// formatting (the same calls as mock-driver/server's logRPC and the
// driver's ControllerUnpublishVolume), and returns the file.
func mockLog(t *testing.T, calls func(mockCalls)) string {
	t.Helper()
	var buf bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&buf)
	defer func() { klog.SetOutput(os.Stderr); klog.LogToStderr(true) }()
	last := time.Now()
	stamp := func() { klog.Flush(); last = time.Now() }
	calls(mockCalls{
		request: func(vol, node string, fence bool) {
			req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node}
			klog.Background().WithValues("method", "ControllerUnpublishVolume", "fence", fence).Info("GRPC request", "request", protosanitizer.StripSecrets(req))
			stamp()
		},
		unpublished: func(vol, node string, fence bool) {
			klog.Background().Info("Unpublished", "volume", vol, "node", node, "fence", fence)
			stamp()
		},
		publish: func(vol, node string) {
			req := &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeContext: map[string]string{"k": "v"}}
			klog.Background().WithValues("method", "ControllerPublishVolume").Info("GRPC request", "request", protosanitizer.StripSecrets(req))
			stamp()
		},
		mark: func() time.Time { return last },
	})
	klog.Flush()
	path := filepath.Join(t.TempDir(), "mock.log")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFenceRPCs(t *testing.T) {
	since := time.Now().Add(-time.Second)
	path := mockLog(t, func(c mockCalls) {
		c.publish("v-1", "n-1")
		c.unpublish("v-1", "n-1", false)
		c.unpublish("v-1", "n-10", true)
		c.unpublish("v-2", "n-1", true)
		// The driver's own rule fenced an unpublish that asked for none.
		c.request("v-3", "n-1", false)
		c.unpublished("v-3", "n-1", true)
	})
	rpcs, err := controllerRPCs(path, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []controllerRPC{{Volume: "v-1", NodeID: "n-1"}, {Fence: true, Volume: "v-1", NodeID: "n-10"}, {Fence: true, Volume: "v-2", NodeID: "n-1"}, {Fence: true, Volume: "v-3", NodeID: "n-1"}}
	if len(rpcs) != len(want) {
		t.Fatalf("got %+v, want %+v", rpcs, want)
	}
	for i, r := range rpcs {
		if r.Fence != want[i].Fence || r.Volume != want[i].Volume || r.NodeID != want[i].NodeID {
			t.Errorf("call %d: got fence=%v %s on %s, want fence=%v %s on %s", i, r.Fence, r.Volume, r.NodeID, want[i].Fence, want[i].Volume, want[i].NodeID)
		}
		if r.Received.Before(since) || r.Received.After(time.Now()) {
			t.Errorf("fence %d received at %s, not during the test", i, r.Received)
		}
	}
	if rpcs, err := controllerRPCs(path, time.Now().Add(time.Minute)); err == nil {
		t.Errorf("a log with no request since: %+v, want an error (the mock must run at --v=5)", rpcs)
	}
}

// A driver declared to revoke access on unpublish is fenced by its plain
// detach: its plain unpublish of a node is that node's fence, for S4 and
// the first-fence timings, and only for such a driver.
func TestDetachIsTheFenceOfADeclaredDriver(t *testing.T) {
	since := time.Now().Add(-time.Second)
	path := mockLog(t, func(c mockCalls) {
		c.publish("v", "n")
		c.unpublish("v", "n", false)
	})
	for _, revokes := range []bool{false, true} {
		rpcs, err := controllerRPCsOf(path, since, revokes)
		if err != nil {
			t.Fatal(err)
		}
		fences := 0
		for _, r := range rpcs {
			if r.Fence {
				fences++
				if r.Volume != "v" || r.NodeID != "n" {
					t.Errorf("revokes=%v: fence of %s on %s, want v on n", revokes, r.Volume, r.NodeID)
				}
			}
		}
		if want := map[bool]int{false: 0, true: 1}[revokes]; fences != want {
			t.Errorf("revokes=%v: %d fences in %+v, want %d", revokes, fences, rpcs, want)
		}
		alive := func(string, time.Time) bool { return true }
		if got := fencesWhileAlive(rpcs, alive); len(got) != map[bool]int{false: 0, true: 1}[revokes] {
			t.Errorf("revokes=%v: fences while alive %+v", revokes, got)
		}
	}
}

// Two fences of one volume in flight at once, the first one slow (trial
// seed 9004, power-off+return-mid-fence): the failover's fence was sent
// while the node was down and took 3 s; the node came back meanwhile and
// the attacher's fence of the same volume (S8: every unpublish of a volume
// that may be quarantined is a fence) arrived and finished first. Each
// fence is received when its request arrived, so the second one repeats a
// fence already asked for, not a fence of a node found alive.
func TestFencesInFlightKeepTheirOrder(t *testing.T) {
	since := time.Now().Add(-time.Second)
	var back time.Time
	path := mockLog(t, func(c mockCalls) {
		c.publish("v", "n")
		c.request("v", "n", true) // the node is down
		// klog's header has microseconds: the next line is at back or later.
		back = c.mark().Add(time.Microsecond)
		for !time.Now().After(back.Add(time.Microsecond)) {
			runtime.Gosched()
		}
		c.request("v", "n", true) // the node is back
		c.unpublished("v", "n", true)
		c.unpublished("v", "n", true)
	})
	rpcs, err := controllerRPCs(path, since)
	if err != nil {
		t.Fatal(err)
	}
	alive := func(_ string, at time.Time) bool { return !at.Before(back) }
	if got := fencesWhileAlive(rpcs, alive); len(got) != 0 {
		t.Errorf("fences while alive %+v (all: %+v), want none", got, rpcs)
	}
}

func TestAlive(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Up until 0, unreachable from 10 (NotReady), back at 30 (Ready).
	trs := []transition{{At: at(0), Ready: true, Talking: true}, {At: at(10), Ready: false, Talking: false}, {At: at(30), Ready: true, Talking: true}}
	for _, tc := range []struct {
		name     string
		renewals []time.Time
		at       time.Time
		want     bool
	}{
		{name: "up", at: at(5), want: true},
		{name: "unreachable", at: at(15), want: false},
		{name: "just unreachable", at: at(10.5), want: false},
		{name: "Ready a moment ago: within the live read's validity", at: at(30.5), want: false},
		{name: "Ready", at: at(32), want: true},
		{name: "renewals before NotReady do not count", renewals: []time.Time{at(9)}, at: at(11), want: false},
		{name: "renewing again", renewals: []time.Time{at(20)}, at: at(22), want: true},
		{name: "renewed a moment ago", renewals: []time.Time{at(20)}, at: at(20.5), want: false},
		{name: "renewal expired", renewals: []time.Time{at(20)}, at: at(29.9), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &Trial{transitions: map[string][]transition{"n": trs}, renewals: map[string][]time.Time{"n": tc.renewals}}
			if got := tr.alive("n", tc.at); got != tc.want {
				t.Errorf("alive at %s: got %v, want %v", tc.at.Sub(t0), got, tc.want)
			}
		})
	}
}

func TestFencesWhileAlive(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// n is down in [10, 20), alive again from 20; m is never alive.
	alive := func(node string, x time.Time) bool { return node == "n" && (x.Before(at(10)) || !x.Before(at(20))) }
	fence := func(vol, node string, s int) controllerRPC {
		return controllerRPC{Fence: true, Volume: vol, NodeID: node, Received: at(s)}
	}
	publish := func(vol, node string, s int) controllerRPC {
		return controllerRPC{Volume: vol, NodeID: node, Received: at(s)}
	}
	for _, tc := range []struct {
		name string
		rpcs []controllerRPC
		want int
	}{
		{name: "fenced while down", rpcs: []controllerRPC{publish("v", "n", 0), fence("v", "n", 12)}, want: 0},
		{name: "fenced while alive", rpcs: []controllerRPC{publish("v", "n", 0), fence("v", "n", 5)}, want: 1},
		{name: "fenced again once back: changes nothing", rpcs: []controllerRPC{fence("v", "n", 12), fence("v", "n", 25)}, want: 0},
		{name: "published again, then fenced once back", rpcs: []controllerRPC{fence("v", "n", 12), publish("v", "n", 22), fence("v", "n", 25)}, want: 1},
		{name: "another volume's fence does not count", rpcs: []controllerRPC{fence("w", "n", 12), fence("v", "n", 25)}, want: 1},
		{name: "another node", rpcs: []controllerRPC{fence("v", "m", 25)}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fencesWhileAlive(tc.rpcs, alive); len(got) != tc.want {
				t.Errorf("got %+v, want %d", got, tc.want)
			}
		})
	}
}
