package framework

import (
	"bufio"
	"errors"
	"net"
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
