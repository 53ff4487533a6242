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
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestClusterDNSAnswer asks the real nodes' cluster DNS what a pod's
// resolver asks (its search list tried first) and checks each answer.
func TestClusterDNSAnswer(t *testing.T) {
	c := &Cluster{Client: fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.42"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "default"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
	)}
	d := &clusterDNS{c: c}
	for _, tc := range []struct {
		name  string
		qtype dnsmessage.Type
		rcode dnsmessage.RCode
		a     string // the A record, if any
	}{
		{"agent.default.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.0.0.42"},
		{"Agent.Default.SVC.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, "10.0.0.42"},
		{"agent.default.svc.cluster.local.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, ""},
		{"headless.default.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, ""},
		{"missing.default.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		// The search list: <name>.<pod's namespace>.svc..., <name>.svc...
		{"agent.default.svc.prestop-e2e.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"agent.default.svc.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, ""},
		{"example.com.", dnsmessage.TypeA, dnsmessage.RCodeRefused, ""},
	} {
		t.Run(tc.name+"/"+tc.qtype.String(), func(t *testing.T) {
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
			if err := b.StartQuestions(); err != nil {
				t.Fatal(err)
			}
			if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(tc.name), Type: tc.qtype, Class: dnsmessage.ClassINET}); err != nil {
				t.Fatal(err)
			}
			q, err := b.Finish()
			if err != nil {
				t.Fatal(err)
			}
			rsp, err := d.answer(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			var m dnsmessage.Message
			if err := m.Unpack(rsp); err != nil {
				t.Fatal(err)
			}
			if m.Header.ID != 7 || !m.Header.Response || m.Header.RCode != tc.rcode {
				t.Fatalf("header %+v, want id 7, a response, %v", m.Header, tc.rcode)
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != tc.name {
				t.Errorf("questions %v, want the one asked", m.Questions)
			}
			got := ""
			for _, a := range m.Answers {
				if r, ok := a.Body.(*dnsmessage.AResource); ok {
					got = net.IP(r.A[:]).String()
				}
			}
			if got != tc.a || len(m.Answers) > 1 {
				t.Errorf("answers %v, want A %q", m.Answers, tc.a)
			}
		})
	}
}

// TestEgressProxy sends the apiserver's CONNECT to the egress proxy for an
// address that is no Service's (a kubelet's): it connects from the host and
// relays both ways; an unreachable one is answered 502.
func TestEgressProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			conn, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	c := &Cluster{Client: fake.NewClientset(), WorkDir: t.TempDir(), log: t}
	if _, err := c.startEgress(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)

	connect := func(target string) (net.Conn, *http.Response) {
		conn, err := net.Dial("unix", filepath.Join(c.WorkDir, "egress.sock"))
		if err != nil {
			t.Fatal(err)
		}
		// As the apiserver's egress dialer writes it.
		if _, err := io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		rsp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, rsp
	}
	conn, rsp := connect(echo.Addr().String())
	defer conn.Close()
	if rsp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %s", echo.Addr(), rsp.Status)
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("relayed %q, %v; want the echo of ping", line, err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	conn2, rsp := connect(addr)
	defer conn2.Close()
	if rsp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to the closed port %s: %s, want 502", addr, rsp.Status)
	}
	body, _ := io.ReadAll(rsp.Body)
	if !strings.Contains(string(body), "refused") {
		t.Errorf("the 502 says %q, want why (connection refused)", body)
	}
}
