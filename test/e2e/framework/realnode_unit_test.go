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
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestHasFilesystem(t *testing.T) {
	const procFilesystems = "nodev\tsysfs\nnodev\tcgroup2\n\text4\nnodev\toverlay\n"
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"overlay", true},
		{"ext4", true},
		{"cgroup", false}, // only cgroup2: a prefix is no match
		{"nodev", false},
	} {
		if got := hasFilesystem(procFilesystems, tc.name); got != tc.want {
			t.Errorf("hasFilesystem(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tmp/plain", "/tmp/plain"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011x\134y`, "/tmp/tab\tx\\y"},
		{`/tmp/trailing\`, `/tmp/trailing\`},
	} {
		if got := unescapeMountPath(tc.in); got != tc.want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestForwarder relays a line each way, and Close ends a relayed
// connection (a kubelet's watch must not outlive the cluster).
func TestForwarder(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("echo " + l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	f, err := newForwarder("127.0.0.1:0", target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", f.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if l, err := r.ReadString('\n'); err != nil || l != "echo hello\n" {
		t.Fatalf("relayed %q, %v; want %q", l, err, "echo hello\n")
	}
	f.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := r.ReadString('\n')
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read %q, %v after Close; want the connection ended", l, err)
	}
	if c, err := net.DialTimeout("tcp", f.l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the forwarder still accepts after Close")
	}
}

func TestParseCgroupV1Hierarchies(t *testing.T) {
	const mountinfo = `25 30 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
27 25 0:24 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
28 25 0:25 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
29 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
`
	got := parseCgroupV1Hierarchies(mountinfo)
	want := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"pids": "/sys/fs/cgroup/pids", "xattr": "/sys/fs/cgroup/systemd", "name=systemd": "/sys/fs/cgroup/systemd",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
}

func TestMissingKernelFeatures(t *testing.T) {
	const withOverlay = "nodev\tcgroup\nnodev\toverlay\n"
	v1 := map[string]string{"pids": "/p", "freezer": "/f", "memory": "/m", "cpu": "/c", "cpuset": "/s"}
	for _, tc := range []struct {
		name     string
		netnsErr error
		fs       string
		hier     map[string]string
		want     []string // a word of each missing feature, in order
	}{
		{"all there", nil, withOverlay, v1, nil},
		{"no network namespaces", os.ErrNotExist, withOverlay, v1, []string{"network namespaces"}},
		{"no overlayfs", nil, "nodev\tcgroup\n", v1, []string{"overlayfs"}},
		{"no freezer", nil, withOverlay, map[string]string{"pids": "/p", "memory": "/m", "cpu": "/c", "cpuset": "/s"}, []string{"freezer"}},
		{"cgroup v2 only", nil, withOverlay, map[string]string{}, []string{"pids", "freezer", "memory", "cpu", "cpuset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := missingKernelFeatures(tc.netnsErr, tc.fs, tc.hier)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want one each for %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("missing[%d] = %q, want it to name %q", i, got[i], w)
				}
			}
		})
	}
}
