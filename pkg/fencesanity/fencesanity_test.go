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

package fencesanity

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
)

func TestCommandIOChecker(t *testing.T) {
	target := IOTarget{NodeID: "n1", VolumeID: "v1", TargetPath: "/t"}
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pidFile := filepath.Join(dir, "child.pid")
	tests := []struct {
		name    string
		cmd     string
		want    bool
		wantErr string
		// childPID: the command leaves the PID of a child in pidFile,
		// which must be gone once CanWrite returns.
		childPID bool
	}{
		{name: "accepted", cmd: "echo accepted 17", want: true},
		{name: "refused", cmd: "echo refused: fenced", want: false},
		{name: "neither word", cmd: "echo", wantErr: `printed "n1 v1 /t"`}, // just the appended arguments
		{name: "something else", cmd: "echo maybe", wantErr: `printed "maybe n1 v1 /t"`},
		{name: "failing", cmd: "false", wantErr: "exit status 1"},
		{name: "missing", cmd: "/no/such/command", wantErr: "no such file"},
		{name: "empty", cmd: "  ", wantErr: "empty"},
		{name: "slow", cmd: script("slow", "exec sleep 10\n"), wantErr: "timed out after 200ms"},
		// A shell wrapper whose child holds its standard output: killing the
		// shell alone would leave Run waiting for the child's end.
		{name: "slow child of a shell", cmd: script("wrapper", "sleep 10 &\necho $! > "+pidFile+"\nwait\n"), wantErr: "timed out after 200ms", childPID: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got, err := CommandIOChecker(tc.cmd, 200*time.Millisecond).CanWrite(context.Background(), target)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("CanWrite took %v with a timeout of 200ms", took)
			}
			if tc.childPID {
				checkGone(t, pidFile)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// checkGone fails unless the process whose PID is in pidFile is gone (or a
// zombie: killed, not yet reaped by its new parent) within a few seconds.
func checkGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// The state follows the command name in parentheses.
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command's child %d outlived it: %s", pid, stat)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDirectIO: the declaration check's synchronous write and its read past
// the page cache read back what was written, on this machine's temporary
// file system (O_DIRECT taken or not).
func TestDirectIO(t *testing.T) {
	Configure(Config{})
	p := filepath.Join(t.TempDir(), "probe")
	data := strings.Repeat("x", 5000) + "\n"
	if err := syncWrite(p, data); err != nil {
		t.Fatal(err)
	}
	got, err := directRead(p)
	if err != nil || got != data {
		t.Fatalf("read back %d bytes, %v; want %d bytes", len(got), err, len(data))
	}
	if _, err := directRead(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("read of a missing file succeeded")
	}
}

func TestConfigureDefaults(t *testing.T) {
	defer Configure(Config{})
	Configure(Config{})
	if config.FenceTimeout != DefaultFenceTimeout || config.IOTimeout != DefaultIOTimeout {
		t.Fatalf("FenceTimeout %v, IOTimeout %v", config.FenceTimeout, config.IOTimeout)
	}
	Configure(Config{FenceTimeout: time.Second, OtherNodeAddress: "x"})
	if config.FenceTimeout != time.Second || config.OtherNodeAddress != "x" {
		t.Fatalf("config %+v", config)
	}
}

// CheckEndpoints: any answer shows an endpoint reachable (an Unimplemented
// Probe included); one that does not answer in time is named in the error.
func TestCheckEndpoints(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "served.sock")
	l, err := net.Listen("unix", served)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, csi.UnimplementedIdentityServer{})
	go srv.Serve(l) //nolint:errcheck
	defer srv.Stop()
	mute, err := net.Listen("unix", filepath.Join(dir, "mute.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()

	nobody := filepath.Join(dir, "nobody.sock")
	tests := []struct {
		name                    string
		node, controller, other string
		wantErr                 string
	}{
		{name: "node only, as a path", node: served},
		{name: "all three", node: "unix://" + served, controller: "unix://" + served, other: served},
		{name: "no node plugin", node: nobody, wantErr: "cannot reach the node endpoint " + nobody + " within 200ms"},
		{name: "mute controller", node: served, controller: "unix://" + mute.Addr().String(), wantErr: "cannot reach the controller endpoint"},
		{name: "no second node", node: served, other: "unix://" + nobody, wantErr: "cannot reach the second node endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := sanity.NewTestConfig()
			sc.Address, sc.ControllerAddress = tc.node, tc.controller
			err := CheckEndpoints(context.Background(), sc, Config{OtherNodeAddress: tc.other}, 200*time.Millisecond)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want error %q", err, tc.wantErr)
			}
		})
	}
}
