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
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The service network of real nodes (Options.ServiceNetwork): what a
// cluster's add-ons give Services and that this machine has none of (no
// kube-proxy, no cluster DNS, an apiserver on the host's loopback that
// cannot route to pods inside the nodes' network namespaces), reduced to
// what admission webhooks and node-local Services need:
//
//   - the apiserver's egress: kube-apiserver sends its "cluster" traffic
//     (admission webhooks, the kubelets) through an HTTP CONNECT proxy on a
//     Unix socket (--egress-selector-config-file, the way clusters whose
//     control plane cannot reach the nodes' network use konnectivity); the
//     proxy resolves a Service's cluster IP to a ready endpoint of its
//     EndpointSlices (the kube-controller-manager then runs the
//     endpointslice controller) and connects from inside that endpoint's
//     node's network namespace; any other address (a kubelet) directly;
//   - a cluster DNS: each kubelet's clusterDNS is a server on its bridge's
//     host address, answering <service>.<namespace>.svc.cluster.local with
//     the Service's cluster IP, as CoreDNS does;
//   - RouteLocalService: for a Service with internalTrafficPolicy Local,
//     each node's namespace sends its cluster IP to the node's own endpoint,
//     as kube-proxy does.
//
// Per run: the socket and the DNS address are this run's own, and every
// rule is inside a node's network namespace, so concurrent runs (each its
// own bridge) share nothing.

// ClusterDomain is the real nodes' cluster domain with ServiceNetwork.
const ClusterDomain = "cluster.local"

// egressConfig is kube-apiserver's --egress-selector-config-file: the
// "cluster" traffic through the proxy at socket.
func egressConfig(socket string) string {
	return fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %q
`, socket)
}

// startEgress starts the egress proxy on a socket in the work dir and
// returns the apiserver's flag that uses it.
func (c *Cluster) startEgress() (string, error) {
	socket := filepath.Join(c.WorkDir, "egress.sock")
	if len(socket) > 100 {
		return "", fmt.Errorf("the egress proxy's socket path %s is too long for a Unix socket: use a shorter work dir", socket)
	}
	cfg := filepath.Join(c.WorkDir, "egress-selector.yaml")
	if err := os.WriteFile(cfg, []byte(egressConfig(socket)), 0o644); err != nil {
		return "", err
	}
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return "", fmt.Errorf("the apiserver's egress proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.proxyConnect(ctx, conn)
			}()
		}
	}()
	c.mu.Lock()
	c.stops = append(c.stops, func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
	})
	c.mu.Unlock()
	return "--egress-selector-config-file=" + cfg, nil
}

// proxyConnect serves one CONNECT of the apiserver: it connects to the
// target (dialCluster), answers 200 and copies both ways until either side
// ends, or answers 502 with why.
func (c *Cluster) proxyConnect(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	// The apiserver names the target in the request line; its Host
	// header says 127.0.0.1.
	if req.Method != http.MethodConnect || req.URL.Host == "" {
		fmt.Fprintf(conn, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := c.dialCluster(dctx, req.URL.Host)
	cancel()
	if err != nil {
		c.log.Logf("egress proxy: CONNECT %s: %v", req.URL.Host, err)
		fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\r\n%v", err)
		return
	}
	defer up.Close()
	// The cluster's stop ends the connections still open (a log stream).
	defer context.AfterFunc(ctx, func() {
		_ = conn.Close()
		_ = up.Close()
	})()
	if _, err := fmt.Fprintf(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, br) // what the client sent after its request too
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(conn, up)
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	<-done
}

// dialCluster connects to addr as the cluster's network would: a Service's
// cluster IP and port to a ready endpoint of it, from inside the endpoint's
// real node's network namespace (where its pod's address is routed);
// anything else from the host.
func (c *Cluster) dialCluster(ctx context.Context, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	svcs, err := c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.Spec.ClusterIP != host {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if int(sp.Port) != port || sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			ep, err := c.serviceEndpoint(ctx, svc, sp, "")
			if err != nil {
				return nil, err
			}
			n := c.realNode(ep.node)
			if n == nil {
				return nil, fmt.Errorf("service %s/%s: its endpoint %s is on %q, not a real node", svc.Namespace, svc.Name, ep.addr, ep.node)
			}
			return dialInNetns(ctx, "/run/netns/"+n.netns, ep.addr)
		}
		return nil, fmt.Errorf("service %s/%s has no TCP port %d", svc.Namespace, svc.Name, port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// endpoint is one ready endpoint of a Service port.
type endpoint struct {
	addr string // ip:port
	node string
}

// serviceEndpoint returns the first ready endpoint of the Service's port
// sp in its EndpointSlices, on node if not empty.
func (c *Cluster) serviceEndpoint(ctx context.Context, svc *corev1.Service, sp corev1.ServicePort, node string) (endpoint, error) {
	slices, err := c.Client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return endpoint{}, err
	}
	for _, s := range slices.Items {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		target := -1
		for _, p := range s.Ports {
			if p.Port != nil && (p.Name == nil && sp.Name == "" || p.Name != nil && *p.Name == sp.Name) {
				target = int(*p.Port)
			}
		}
		if target < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready || len(e.Addresses) == 0 || e.NodeName == nil {
				continue
			}
			if node != "" && *e.NodeName != node {
				continue
			}
			return endpoint{addr: net.JoinHostPort(e.Addresses[0], strconv.Itoa(target)), node: *e.NodeName}, nil
		}
	}
	where := ""
	if node != "" {
		where = " on " + node
	}
	return endpoint{}, fmt.Errorf("service %s/%s port %d has no ready endpoint%s", svc.Namespace, svc.Name, sp.Port, where)
}

// dialInNetns connects to addr from inside the network namespace at path.
// The socket is made by a thread that entered the namespace and never
// leaves it: its goroutine ends locked to it, so that the runtime ends the
// thread too rather than run other goroutines in the wrong namespace. The
// socket stays in the namespace it was made in.
func dialInNetns(ctx context.Context, path, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering %s: %w", path, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// clusterDNS answers the real nodes' pods' queries for Services, on the
// host's address of the nodes' bridge (their kubelets' clusterDNS).
type clusterDNS struct {
	c    *Cluster
	conn *net.UDPConn
}

// startClusterDNS serves on ip:53 (UDP: what pods' resolvers ask first,
// and every answer here is small) until the cluster stops.
func (c *Cluster) startClusterDNS(ip string) error {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: 53})
	if err != nil {
		return fmt.Errorf("the real nodes' cluster DNS on %s:53: %w", ip, err)
	}
	d := &clusterDNS{c: c, conn: conn}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	c.mu.Lock()
	c.stops = append(c.stops, func() {
		_ = conn.Close()
		<-done
	})
	c.mu.Unlock()
	return nil
}

func (d *clusterDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rsp, err := d.answer(ctx, buf[:n])
		cancel()
		if err != nil {
			continue // not a query we can parse: no answer, as a server drops garbage
		}
		_, _ = d.conn.WriteToUDP(rsp, from)
	}
}

// answer answers one query: an A record with the cluster IP for
// <service>.<namespace>.svc.<ClusterDomain> of a Service that exists, no
// record for its other types, NXDOMAIN for any other name in the cluster
// domain, REFUSED outside it (nothing is forwarded: the pods here reach no
// other name).
func (d *clusterDNS) answer(ctx context.Context, query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rcode, ip := d.lookup(ctx, q)
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: rcode != dnsmessage.RCodeRefused,
		RecursionDesired: h.RecursionDesired, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if ip != nil && q.Type == dnsmessage.TypeA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		var a dnsmessage.AResource
		copy(a.A[:], ip.To4())
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, a); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// lookup returns the answer's code and, for a Service with a cluster IP,
// that address.
func (d *clusterDNS) lookup(ctx context.Context, q dnsmessage.Question) (dnsmessage.RCode, net.IP) {
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	if q.Class != dnsmessage.ClassINET || name != ClusterDomain && !strings.HasSuffix(name, "."+ClusterDomain) {
		return dnsmessage.RCodeRefused, nil
	}
	svcNS, ok := strings.CutSuffix(name, ".svc."+ClusterDomain)
	parts := strings.Split(svcNS, ".")
	if !ok || len(parts) != 2 {
		return dnsmessage.RCodeNameError, nil
	}
	svc, err := d.c.Client.CoreV1().Services(parts[1]).Get(ctx, parts[0], metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return dnsmessage.RCodeNameError, nil
	}
	if err != nil {
		return dnsmessage.RCodeServerFailure, nil
	}
	ip := net.ParseIP(svc.Spec.ClusterIP).To4()
	if ip == nil {
		return dnsmessage.RCodeSuccess, nil // headless: no record here
	}
	return dnsmessage.RCodeSuccess, ip
}

// RouteLocalService does in each real node's network namespace what
// kube-proxy does for a Service with internalTrafficPolicy Local: its
// cluster IP and ports, from the node's pods and the node itself, go to
// that node's own ready endpoint (DNAT); a pod's connection to an endpoint
// on its own bridge is masqueraded as the bridge's address, so that the
// answer comes back through the node's connection tracking (a pod would
// otherwise answer its neighbour directly, from an address the neighbour
// never asked). It waits (up to timeout) until every real node has a ready
// endpoint, and routes what the EndpointSlices say then: a pod that
// restarts with another address is not followed.
func (c *Cluster) RouteLocalService(ctx context.Context, namespace, name string, timeout time.Duration) error {
	svc, err := c.Client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p := svc.Spec.InternalTrafficPolicy; p == nil || *p != corev1.ServiceInternalTrafficPolicyLocal {
		return fmt.Errorf("service %s/%s: internalTrafficPolicy is not Local", namespace, name)
	}
	if net.ParseIP(svc.Spec.ClusterIP).To4() == nil {
		return fmt.Errorf("service %s/%s has no IPv4 cluster IP (%q)", namespace, name, svc.Spec.ClusterIP)
	}
	c.mu.Lock()
	var nodes []*RealNode
	if c.realNet != nil {
		nodes = append(nodes, c.realNet.nodes...)
	}
	c.mu.Unlock()
	if len(nodes) == 0 {
		return errors.New("RouteLocalService: no real nodes")
	}
	for _, n := range nodes {
		for _, sp := range svc.Spec.Ports {
			if sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			var ep endpoint
			err := waitFor(ctx, timeout, 250*time.Millisecond, fmt.Sprintf("a ready endpoint of %s/%s on %s", namespace, name, n.Name), func(ctx context.Context) (bool, error) {
				ep, err = c.serviceEndpoint(ctx, svc, sp, n.Name)
				return err == nil, err
			})
			if err != nil {
				return err
			}
			epIP, epPort, _ := net.SplitHostPort(ep.addr)
			dest, port := svc.Spec.ClusterIP+"/32", strconv.Itoa(int(sp.Port))
			for _, rule := range [][]string{
				{"PREROUTING", "-d", dest, "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", ep.addr},
				{"OUTPUT", "-d", dest, "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", ep.addr},
				{"POSTROUTING", "-s", n.PodCIDR, "-d", epIP + "/32", "-p", "tcp", "--dport", epPort, "-j", "MASQUERADE"},
			} {
				if err := n.inNetns(ctx, append([]string{"iptables", "-w", "-t", "nat", "-A"}, rule...)...); err != nil {
					return err
				}
			}
			c.log.Logf("service %s/%s %s:%d routed to %s on %s", namespace, name, svc.Spec.ClusterIP, sp.Port, ep.addr, n.Name)
		}
	}
	return nil
}

// inNetns runs a command in the node's network namespace.
func (n *RealNode) inNetns(ctx context.Context, args ...string) error {
	args = append([]string{"--net=/run/netns/" + n.netns, "--"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("in %s's network namespace, %s: %w: %s", n.Name, strings.Join(args[2:], " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
