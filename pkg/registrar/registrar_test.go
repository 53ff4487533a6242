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

package registrar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakeKubelet plays the kubelet's side of the plugin watcher: it dials a
// registration socket, asks GetInfo and reports a status.
type fakeKubelet struct {
	t    *testing.T
	conn *grpc.ClientConn
	c    registerapi.RegistrationClient
}

func dialKubelet(t *testing.T, socket string) *fakeKubelet {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fakeKubelet{t: t, conn: conn, c: registerapi.NewRegistrationClient(conn)}
}

// start runs r until the test ends and returns, once the socket exists,
// a channel closed when Run returns and Run's result (read after the close).
// The socket is polled: the kubelet's watcher waits for an inotify event.
func start(t *testing.T, r *Registrar) (context.CancelFunc, <-chan struct{}, *error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var result error
	go func() { result = r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(r.Socket()); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return cancel, done, &result
		}
		select {
		case <-done:
			t.Fatalf("Run ended before its socket appeared: %v", result)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no registration socket after 10s")
		}
	}
}

func newRegistrar(t *testing.T) (*Registrar, string) {
	t.Helper()
	// A unix socket path is short: t.TempDir's may be too long.
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r, err := New(Options{DriverName: "fence.csi-fence.io", Endpoint: "/var/lib/kubelet/plugins/fence.csi-fence.io/csi.sock", RegistrationDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func TestKubeletRegistersThePlugin(t *testing.T) {
	r, dir := newRegistrar(t)
	if want := filepath.Join(dir, "fence.csi-fence.io-reg.sock"); r.Socket() != want {
		t.Fatalf("socket %s, want %s (node-driver-registrar's name)", r.Socket(), want)
	}
	// A socket file left by a killed run is replaced.
	if err := os.WriteFile(r.Socket(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cancel, done, result := start(t, r)
	k := dialKubelet(t, r.Socket())
	ctx := context.Background()
	info, err := k.c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "fence.csi-fence.io" ||
		info.Endpoint != "/var/lib/kubelet/plugins/fence.csi-fence.io/csi.sock" ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Fatalf("GetInfo = %+v", info)
	}
	if notified, _ := r.Status(); notified {
		t.Fatal("notified before the kubelet said anything")
	}
	if _, err := k.c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if notified, registered := r.Status(); !notified || !registered {
		t.Fatalf("Status() = %v, %v after a successful registration", notified, registered)
	}
	cancel()
	<-done
	if err := *result; err != nil {
		t.Fatalf("Run after its context ended: %v", err)
	}
	if _, err := os.Stat(r.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the registration socket outlived Run (the kubelet would keep the plugin): %v", err)
	}
}

func TestFailedRegistrationEndsRun(t *testing.T) {
	r, _ := newRegistrar(t)
	_, done, result := start(t, r)
	k := dialKubelet(t, r.Socket())
	if _, err := k.c.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "plugin endpoint not reachable"}); err != nil {
		t.Fatalf("the kubelet's failure report was not answered: %v", err)
	}
	select {
	case <-done:
		if err := *result; err == nil || !strings.Contains(err.Error(), "plugin endpoint not reachable") {
			t.Fatalf("Run = %v, want the kubelet's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still serves after the kubelet reported a failed registration")
	}
	if _, err := os.Stat(r.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the registration socket outlived Run: %v", err)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no driver", Options{Endpoint: "/x/csi.sock", RegistrationDir: "/r"}, "driver name"},
		{"relative endpoint", Options{DriverName: "d", Endpoint: "csi.sock", RegistrationDir: "/r"}, "absolute"},
		{"no registration dir", Options{DriverName: "d", Endpoint: "/x/csi.sock"}, "registration directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error about %q", err, tc.want)
			}
		})
	}
	r, err := New(Options{DriverName: "d", Endpoint: "/x/csi.sock", RegistrationDir: "/nonexistent-registration-dir"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "registration directory") {
		t.Fatalf("Run with a missing directory = %v", err)
	}
}
