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

package framework

import (
	"slices"
	"strings"
	"testing"
)

// What a reboot loses is found by mount point, also one with a space in its
// path, and never a sibling that only shares the prefix.
func TestParseMountsUnder(t *testing.T) {
	const mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 8:1 /w/nodes /w/nodes rw shared:9 - ext4 /dev/vda rw
41 40 8:1 /w/state/data/v /w/nodes/real-0/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount rw shared:9 - ext4 /dev/vda rw
42 40 0:51 / /w/nodes/real-0/containerd/state/io.containerd.grpc.v1.cri/sandboxes/s/shm rw - tmpfs shm rw
43 40 0:52 / /w/nodes/real-0/kubelet/pods/u/volumes/kubernetes.io~projected/kube\040api rw - tmpfs tmpfs rw
44 40 8:1 /w/state/data/v /w/nodes/real-01/kubelet/plugins/kubernetes.io/csi/d/h/globalmount rw shared:9 - ext4 /dev/vda rw
`
	got := parseMountsUnder(mountinfo, "/w/nodes/real-0")
	want := []string{
		"/w/nodes/real-0/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount",
		"/w/nodes/real-0/containerd/state/io.containerd.grpc.v1.cri/sandboxes/s/shm",
		"/w/nodes/real-0/kubelet/pods/u/volumes/kubernetes.io~projected/kube api",
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseMountsUnder = %q, want %q", got, want)
	}
}

// A reboot empties what a real host keeps in /run and never the kubelet's
// root or containerd's root, which are on disk.
func TestVolatilePaths(t *testing.T) {
	n := &RealNode{Dir: "/w/nodes/real-0", ContainerdSocket: "/w/nodes/real-0/containerd.sock", shims: "/run/fence-e2e-0/real-0/s"}
	paths := volatilePaths(n)
	for _, keep := range []string{n.KubeletDir(), "/w/nodes/real-0/containerd/root", "/w/nodes/real-0/pod-logs", n.Dir} {
		for _, p := range paths {
			if p == keep || strings.HasPrefix(keep, p+"/") || strings.HasPrefix(p, n.KubeletDir()) || strings.HasPrefix(p, "/w/nodes/real-0/containerd/root") {
				t.Errorf("a reboot would lose %s, which is on disk (%s)", p, keep)
			}
		}
	}
	for _, lost := range []string{"/w/nodes/real-0/containerd/state", "/w/nodes/real-0/containerd.sock", "/run/fence-e2e-0/real-0/s"} {
		if !slices.Contains(paths, lost) {
			t.Errorf("a reboot keeps %s, which a real host has in /run", lost)
		}
	}
}
