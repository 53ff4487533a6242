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

package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/mock-driver/workload"
	"github.com/csi-fence/fence-attacher/pkg/fence"

	"github.com/csi-fence/fence-attacher/internal/testpoll"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in, network, addr string
		bad               bool
	}{
		{in: "unix:///run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "unix:/run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "/run/csi.sock", network: "unix", addr: "/run/csi.sock"},
		{in: "tcp://127.0.0.1:10000", network: "tcp", addr: "127.0.0.1:10000"},
		{in: "127.0.0.1:10000", bad: true},
		{in: "dns:///x", bad: true},
	}
	for _, tc := range tests {
		n, a, err := ParseEndpoint(tc.in)
		if tc.bad != (err != nil) || n != tc.network || a != tc.addr {
			t.Errorf("ParseEndpoint(%q) = %q %q %v", tc.in, n, a, err)
		}
	}
}

func TestListenRemovesOnlyStaleSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "mock-listen")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "csi.sock")
	l1, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	l1.(*net.UnixListener).SetUnlinkOnClose(false)
	l1.Close() // a crashed instance leaves its socket behind
	l2, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatalf("listening over a stale socket: %v", err)
	}
	l2.Close()
	file := filepath.Join(dir, "precious")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil {
		t.Fatal("listened over a regular file")
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the regular file is gone: %v", err)
	}
}

func TestStartValidates(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Options{
		{Role: "both", Endpoint: "tcp://127.0.0.1:0", StateDir: dir},
		{Role: RoleNode, Endpoint: "tcp://127.0.0.1:0", StateDir: dir},
		{Role: RoleController, Endpoint: "tcp://127.0.0.1:0", StateDir: dir, Driver: driver.Config{Array: array.Options{FencePolicy: "maybe"}}},
		{Role: RoleController, Endpoint: "nowhere", StateDir: dir},
	} {
		if inst, err := Start(o); err == nil {
			inst.Stop()
			t.Errorf("Start(%+v) succeeded", o)
		}
	}
}

// cluster is a controller and a node instance over TCP, on one array.
type cluster struct {
	ctl, node *Instance
	cc, nc    *grpc.ClientConn
}

func startCluster(t *testing.T, cfg driver.Config) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{}
	var err error
	if c.ctl, err = Start(Options{Role: RoleController, Endpoint: "tcp://127.0.0.1:0", HTTPEndpoint: "127.0.0.1:0", StateDir: dir, Driver: cfg}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ctl.Stop)
	nc := cfg
	nc.NodeID = "n1"
	if c.node, err = Start(Options{Role: RoleNode, Endpoint: "tcp://127.0.0.1:0", HTTPEndpoint: "127.0.0.1:0", StateDir: dir, Driver: nc}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.node.Stop)
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	c.cc, c.nc = dial(c.ctl.Endpoint()), dial(c.node.Endpoint())
	return c
}

var rwo = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}

func httpDo(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	return rsp.StatusCode, string(b)
}

// The services each role serves, node registration, and the data path.
func TestInstances(t *testing.T) {
	c := startCluster(t, driver.Config{})
	ctx := context.Background()
	ctl, node := csi.NewControllerClient(c.cc), csi.NewNodeClient(c.nc)

	// Each role serves its own service only.
	if _, err := csi.NewNodeClient(c.cc).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("the controller serves the node service: %v", err)
	}
	if _, err := csi.NewControllerClient(c.nc).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a node serves the controller service: %v", err)
	}
	info, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "n1" {
		t.Fatalf("NodeGetInfo: %v %v", info, err)
	}
	s, _ := c.ctl.Array().Snapshot()
	if s.Nodes["n1"] == nil {
		t.Fatal("the node instance did not register its node")
	}

	vol, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	base := "http://" + c.node.HTTPAddr()
	if code, _ := httpDo(t, "POST", base+"/write?volume=nope"); code != http.StatusNotFound {
		t.Fatalf("write to an unknown volume: %d", code)
	}
	if code, _ := httpDo(t, "POST", base+"/write?volume="+id); code != http.StatusForbidden {
		t.Fatalf("write before publish: %d", code)
	}
	if code, _ := httpDo(t, "POST", base+"/write"); code != http.StatusBadRequest {
		t.Fatalf("write without volume: %d", code)
	}
	if _, err := ctl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	if code, body := httpDo(t, "POST", base+"/write?volume="+id); code != http.StatusOK || strings.TrimSpace(body) != "1" {
		t.Fatalf("write after publish: %d %q", code, body)
	}
	if code, body := httpDo(t, "GET", base+"/read?volume="+id); code != http.StatusOK || strings.TrimSpace(body) != "1" {
		t.Fatalf("read: %d %q", code, body)
	}
	// A background writer keeps writing through the fence.
	if code, _ := httpDo(t, "POST", base+"/writer?volume="+id+"&interval=2ms"); code != http.StatusOK {
		t.Fatalf("starting a writer: %d", code)
	}
	writer := func() workload.Stats {
		_, body := httpDo(t, "GET", base+"/writer")
		var l []workload.Stats
		if err := json.Unmarshal([]byte(body), &l); err != nil || len(l) != 1 {
			t.Fatalf("writers: %q %v", body, err)
		}
		return l[0]
	}
	waitFor(t, "accepted writes", func() bool { return writer().Accepted >= 2 })
	// A change as the FUSE data path makes one (counted apart from writes).
	if err := c.node.Array().Change(id, "n1", "mkdir"); err != nil {
		t.Fatal(err)
	}
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}
	fence.SetFence(req, true)
	if _, err := ctl.ControllerUnpublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refused writes", func() bool { return writer().Refused >= 2 })
	code, body := httpDo(t, "DELETE", base+"/writer?volume="+id)
	var final workload.Stats
	if code != http.StatusOK || json.Unmarshal([]byte(body), &final) != nil || final.Running {
		t.Fatalf("stopping the writer: %d %q", code, body)
	}
	if code, _ := httpDo(t, "DELETE", base+"/writer?volume="+id); code != http.StatusNotFound {
		t.Fatalf("stopping it again: %d", code)
	}
	if code, _ := httpDo(t, "POST", base+"/writer?volume="+id+"&interval=-1s"); code != http.StatusBadRequest {
		t.Fatalf("bad interval: %d", code)
	}

	// Every instance reports the array's counters, and its own RPCs.
	for _, inst := range []*Instance{c.ctl, c.node} {
		_, metrics := httpDo(t, "GET", "http://"+inst.HTTPAddr()+"/metrics")
		for _, want := range []string{
			MetricViolations + `{invariant="S1"} 0`,
			MetricRefused + `{kind="write-fenced"}`,
			MetricWrites + `{node="n1",volume="` + id + `"}`,
			MetricChanges + `{node="n1",volume="` + id + `"} 1`,
			MetricPublication + `{access="fenced",node="n1",volume="` + id + `"} 1`,
			MetricRPCs + `{code="OK",method=`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics of %s lack %q", inst.Endpoint(), want)
			}
		}
		if code, _ := httpDo(t, "GET", "http://"+inst.HTTPAddr()+"/healthz"); code != http.StatusOK {
			t.Errorf("healthz: %d", code)
		}
	}
	if code, _ := httpDo(t, "POST", "http://"+c.ctl.HTTPAddr()+"/write?volume="+id); code != http.StatusNotFound {
		t.Errorf("the controller serves a data path: %d", code)
	}
	_, body = httpDo(t, "GET", "http://"+c.ctl.HTTPAddr()+"/status")
	var rep Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Violations[array.S1] != 0 || rep.Volumes[id].Publications["n1"].Access != array.AccessFenced || rep.Refused["write-fenced"] < 2 {
		t.Fatalf("status: %s", body)
	}
}

// Faults set in the shared control file reach the instances at once, and
// are counted in the instance's metrics.
func TestFaultsAtRunTime(t *testing.T) {
	c := startCluster(t, driver.Config{})
	ctx := context.Background()
	if err := c.ctl.Faults().Set("Probe", faults.Fault{Code: codes.Unavailable, Count: 1, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := csi.NewIdentityClient(c.cc).Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatalf("the controller got the node's fault: %v", err)
	}
	if _, err := csi.NewIdentityClient(c.nc).Probe(ctx, &csi.ProbeRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("node probe with a fault: %v", err)
	}
	if _, err := csi.NewIdentityClient(c.nc).Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatalf("node probe after the fault's count: %v", err)
	}
	_, metrics := httpDo(t, "GET", "http://"+c.node.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, MetricFaults+`{kind="Unavailable",method="Probe"} 1`) || !strings.Contains(metrics, MetricRPCs+`{code="Unavailable",method="Probe"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
	// A lie: success, and nothing done.
	vol, err := csi.NewControllerClient(c.cc).CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csi.VolumeCapability{rwo}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	if _, err := csi.NewControllerClient(c.cc).ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	if err := c.ctl.Faults().Set("ControllerUnpublishVolume", faults.Fault{Lie: true, Count: 1}); err != nil {
		t.Fatal(err)
	}
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}
	fence.SetFence(req, true)
	if _, err := csi.NewControllerClient(c.cc).ControllerUnpublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.ctl.Array().Write(id, "n1"); err != nil {
		t.Fatalf("after a lying fence the node should still write: %v", err)
	}
}

// waitFor waits for cond (testpoll.Until).
func waitFor(t *testing.T, what string, cond func() bool) { t.Helper(); testpoll.Until(t, what, cond) }
