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

// Package framework runs a real Kubernetes control plane on this machine for
// the end-to-end tests, the demo and the benchmark: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler built from pinned modules (see
// hack/e2e-binaries.sh), KWOK for the nodes, on 127.0.0.1 with free ports,
// and the product beside it as real processes.
//
// It reports through a Logger and returns errors, so a command uses it with a
// plain context as well as a test (a *testing.T is a Logger):
//
//	c, err := framework.Start(ctx, log, framework.Options{}) // ~4-5 s warm
//	defer c.Cleanup(failed)                                  // keeps logs when failed
//	p, err := c.StartProduct(ctx, framework.ProductOptions{}) // deploy/ applied, attacher up
//	nodes, err := c.CreateNodes(ctx, "n", 3, framework.DriverName)
//	_, err = p.StartNode(ctx, nodes[0])                      // mock node, kubelet sim, node agent
//	d2, err := p.AddDriver(ctx, framework.DriverOptions{Name: "fence2.csi-fence.io"}) // a second driver
//	_, err = p.StartNode(ctx, nodes[1], d2)                  // a node with both drivers
//	err = p.Node(nodes[0]).PowerOff(ctx)                     // heartbeat and processes stop -> NotReady after 10 s
//	err = p.Node(nodes[0]).PowerOn(ctx)                      // boots again, returns once Ready
//
// A test fails nodes through Node (node.go), which KWOK and real nodes both
// implement: PowerOff, PowerOn, Partition, Heal.
//
// Binaries: $FENCE_E2E_BIN, else what hack/e2e-binaries.sh prints (it builds
// them once, minutes, into ~/.cache/fence-attacher/e2e-bin, or
// $FENCE_E2E_CACHE). Every log goes to <work dir>/logs; the work dir (a new
// temp dir unless Options.WorkDir) is logged first and kept on failure.
// Every process started dies with the calling process, however it ends.
//
// The apiserver keeps an audit log of ServiceAccount requests (Cluster.RBAC):
// the product runs with the ServiceAccount tokens and RBAC of deploy/, and the
// audit log shows what it used and what was denied.
package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/modfile"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// Logger is what the framework reports progress to (a *testing.T adapter, or
// the demo's printer).
type Logger interface {
	Logf(format string, args ...interface{})
}

// Options tune the control plane.
type Options struct {
	// NodeMonitorGracePeriod of the node lifecycle controller (default 10s).
	NodeMonitorGracePeriod time.Duration
	// NodeLeaseDuration of KWOK's nodes (default 10s): KWOK renews each
	// node's Lease every quarter of it. A large cluster on a small machine
	// needs a kubelet's 40 s (and a grace period to match), or the
	// heartbeats alone load the apiserver.
	NodeLeaseDuration time.Duration
	// ControlPlaneQPS, when set, is kube-controller-manager's and
	// kube-scheduler's --kube-api-qps (their burst twice as much), instead
	// of their defaults of 20 and 50: at 20, the StatefulSet and ReplicaSet
	// controllers create thirty thousand pods in 25 minutes.
	ControlPlaneQPS int
	// KwokParallelism, when set, is how many pod stages, node stages and
	// Lease renewals kwok plays at once (its default is 4): at 1,000
	// nodes its Lease renewals (100 a second) and 30,000 pods' stages
	// queued behind those 4, where each real kubelet would have done its
	// own at once. The end-to-end tests keep kwok's default.
	KwokParallelism int
	// BinDir holds the control-plane binaries; default: $FENCE_E2E_BIN or
	// what hack/e2e-binaries.sh prints (building them if needed).
	BinDir string
	// WorkDir is where state and logs go (default: a new temp dir).
	WorkDir string
	// ServiceNetwork gives the real nodes (StartRealNodes) what Services
	// need of a cluster's network (servicenet.go): the apiserver reaches
	// Services in the nodes (admission webhooks) through an egress proxy,
	// the kube-controller-manager runs the endpointslice controller, the
	// kubelets get a cluster DNS, and RouteLocalService routes node-local
	// Services.
	ServiceNetwork bool
}

// Cluster is a running control plane.
type Cluster struct {
	WorkDir    string
	BinDir     string
	Kubeconfig string // admin
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface

	log    Logger
	pki    *pki
	apiURL string
	// kube-apiserver, kept to restart it
	api     *Process
	apiBin  string
	apiArgs []string

	mu        sync.Mutex
	processes []*Process
	realNet   *realNet // the real nodes (StartRealNodes), nil without
	// serviceNetwork is Options.ServiceNetwork.
	serviceNetwork bool
	// stops end what runs in this process against the cluster (simulated
	// kubelets, informers) and what the process list does not hold (BMCs
	// and their machines); Stop runs them, last added first, before it
	// stops any process.
	stops []func()
	// kubeletInformers is what the simulated kubelets of this process
	// share (KubeletInformers); nil until the first asks.
	kubeletInformers informers.SharedInformerFactory
	kubeletStop      chan struct{}
}

// RepoRoot is the root of this repository: where this file was compiled
// from, or, in a -trimpath build (make test's, which records no build
// paths), the nearest directory above the working directory whose go.mod is
// this module's. Tests run in their package's directory, the commands from
// the repository's root.
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	}
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("finding the repository: %v", err))
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modfile.ModulePath(data) == repoModule {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("finding the repository: no go.mod of " + repoModule + " above the working directory; run from the checkout")
		}
		dir = parent
	}
}

// repoModule is this repository's Go module.
const repoModule = "github.com/csi-fence/fence-attacher"

// Binaries returns the directory of the control-plane binaries, building
// them (minutes, once) when they are not cached yet, as `make test` does
// (hack/e2e-binaries.sh), and checks that every one is there.
func Binaries(ctx context.Context, log Logger) (string, error) {
	dir := os.Getenv("FENCE_E2E_BIN")
	if dir == "" {
		out, err := RunScript(ctx, "hack/e2e-binaries.sh")
		if err != nil {
			return "", fmt.Errorf("building control-plane binaries: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		dir = lines[len(lines)-1]
	}
	return dir, checkBinaries(dir)
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// startAttempts bounds the retries of Start when a component lost the race
// for one of its free ports to another process.
const startAttempts = 3

// Start starts the control plane and waits until every part is healthy.
// On error everything started is stopped again. Every process it starts dies
// with the calling process (see startProcess), so a panic or a test timeout
// leaves nothing running; the work dir is then kept (its path is logged
// first).
func Start(ctx context.Context, log Logger, opts Options) (c *Cluster, err error) {
	begin := time.Now()
	if opts.NodeMonitorGracePeriod == 0 {
		opts.NodeMonitorGracePeriod = 10 * time.Second
	}
	if opts.NodeLeaseDuration == 0 {
		opts.NodeLeaseDuration = 10 * time.Second
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = Binaries(ctx, log); err != nil {
			return nil, err
		}
	} else if err := checkBinaries(opts.BinDir); err != nil {
		return nil, err
	}
	if opts.WorkDir == "" {
		if opts.WorkDir, err = os.MkdirTemp("", "fence-e2e-"); err != nil {
			return nil, err
		}
	}
	log.Logf("control plane work dir %s (logs in %s/logs, kept on failure)", opts.WorkDir, opts.WorkDir)
	c = &Cluster{WorkDir: opts.WorkDir, BinDir: opts.BinDir, log: log, serviceNetwork: opts.ServiceNetwork}
	if c.pki, err = newPKI(filepath.Join(c.WorkDir, "pki")); err != nil {
		return nil, err
	}
	for _, cert := range []struct {
		name, cn string
		orgs     []string
		server   bool
	}{
		{"apiserver", "kube-apiserver", nil, true},
		{"admin", "admin", []string{"system:masters"}, false},
		{"kcm", "system:kube-controller-manager", nil, false},
		{"scheduler", "system:kube-scheduler", nil, false},
		{"kwok", "kwok", []string{"system:masters"}, false},
		// The apiserver's client certificate for the real nodes' kubelets
		// (logs, exec), which authorize it by its group.
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
	} {
		if err := c.pki.issue(cert.name, cert.cn, cert.orgs, cert.server); err != nil {
			return nil, err
		}
	}
	log.Logf("certificates issued (%.1fs)", time.Since(begin).Seconds())
	for attempt := 1; ; attempt++ {
		err = c.start(ctx, opts, begin)
		if err == nil {
			return c, nil
		}
		c.Stop()
		var exited *ExitedError
		if attempt == startAttempts || !errors.As(err, &exited) || !exited.PortConflict {
			return nil, err
		}
		// Free ports are only free until someone binds them; another run
		// (or an outgoing connection) won the race. Start over on new ports.
		log.Logf("attempt %d: %s lost its port to another process; starting again on other ports", attempt, exited.Name)
		_ = os.Rename(filepath.Join(c.WorkDir, "logs"), filepath.Join(c.WorkDir, fmt.Sprintf("logs-attempt-%d", attempt)))
		if err := os.RemoveAll(filepath.Join(c.WorkDir, "etcd")); err != nil {
			return nil, err
		}
	}
}

// kwokConfiguration is kwok's own configuration: how many stages and Lease
// renewals it plays at once (Options.KwokParallelism).
func kwokConfiguration(parallel int) string {
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: %[1]d
  nodePlayStageParallelism: %[1]d
  nodeLeaseParallelism: %[1]d
`, parallel)
}

// controlPlaneBinaries are the files hack/e2e-binaries.sh provides.
var controlPlaneBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages"}

func checkBinaries(dir string) error {
	for _, b := range controlPlaneBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return fmt.Errorf("control-plane binaries in %s are incomplete (run hack/e2e-binaries.sh, or fix FENCE_E2E_BIN): %w", dir, err)
		}
	}
	return nil
}

// start starts every component on fresh free ports.
func (c *Cluster) start(ctx context.Context, opts Options, begin time.Time) error {
	log := c.log
	logs := filepath.Join(c.WorkDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.apiURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }
	since := func() float64 { return time.Since(begin).Seconds() }

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := c.run(logs, "etcd", bin("etcd"), "--name=e2e", "--data-dir="+filepath.Join(c.WorkDir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	if err := waitHTTPOf(ctx, etcd, etcdURL+"/health", nil, 30*time.Second); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	log.Logf("etcd healthy (%.1fs)", since())

	p := c.pki.path
	audit, err := c.auditFlags()
	if err != nil {
		return err
	}
	c.apiArgs = append(audit,
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort), "--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--authorization-mode=Node,RBAC", "--endpoint-reconciler-type=none", "--allow-privileged=true",
		// Real nodes' kubelets (StartRealNodes) may change only their own
		// Node and their pods; nothing else in the tests is a node.
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+p("apiserver-kubelet-client.crt"), "--kubelet-client-key="+p("apiserver-kubelet-client.key"),
		// A node's name is not in any DNS here: reach kubelets by address.
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir="+filepath.Join(c.WorkDir, "pki", "generated"))
	controllers := Controllers
	if c.serviceNetwork {
		egress, err := c.startEgress()
		if err != nil {
			return err
		}
		c.apiArgs = append(c.apiArgs, egress)
		controllers = append(slices.Clone(Controllers), "endpointslice-controller")
	}
	c.apiBin = bin("kube-apiserver")
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	if err := c.alive(); err != nil {
		return err
	}
	log.Logf("kube-apiserver ready at %s (%.1fs)", c.apiURL, since())

	for _, user := range []string{"admin", "kcm", "scheduler", "kwok"} {
		if err := c.writeCertKubeconfig(user); err != nil {
			return err
		}
	}
	c.Kubeconfig = c.kubeconfigPath("admin")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	// The certificates in memory, not as files: client-go reloads a client
	// certificate file from a goroutine of its own that nothing stops (it
	// ends when the transport is garbage collected), and once Cleanup has
	// removed the work dir it logs "Loading client cert failed" until then.
	if err := rest.LoadTLSFiles(c.Config); err != nil {
		return err
	}
	c.Config.CertFile, c.Config.KeyFile, c.Config.CAFile = "", "", ""
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return err
	}

	var qps []string
	if opts.ControlPlaneQPS > 0 {
		qps = []string{"--kube-api-qps=" + strconv.Itoa(opts.ControlPlaneQPS), "--kube-api-burst=" + strconv.Itoa(2*opts.ControlPlaneQPS)}
	}
	kcm := c.kubeconfigPath("kcm")
	kcmProc, err := c.run(logs, "kube-controller-manager", bin("kube-controller-manager"), append([]string{
		"--kubeconfig=" + kcm, "--authentication-kubeconfig=" + kcm, "--authorization-kubeconfig=" + kcm,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort), "--leader-elect=false",
		"--use-service-account-credentials=true", "--service-account-private-key-file=" + p("sa.key"),
		"--root-ca-file=" + p("ca.crt"), "--node-monitor-period=1s",
		"--node-monitor-grace-period=" + opts.NodeMonitorGracePeriod.String(), "--allocate-node-cidrs=false",
		"--controllers=" + strings.Join(controllers, ",")}, qps...)...)
	if err != nil {
		return err
	}
	sched := c.kubeconfigPath("scheduler")
	schedProc, err := c.run(logs, "kube-scheduler", bin("kube-scheduler"), append([]string{
		"--kubeconfig=" + sched, "--authentication-kubeconfig=" + sched, "--authorization-kubeconfig=" + sched,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(schedPort)}, qps...)...)
	if err != nil {
		return err
	}
	stages, err := os.ReadDir(filepath.Join(c.BinDir, "kwok-stages"))
	if err != nil {
		return fmt.Errorf("kwok stages: %w", err)
	}
	// kwok renews a node's Lease every quarter of its duration: 10 s gives
	// 2.5 s, well inside the grace period (kwok's kubelet-like 40 s would
	// renew every 10 s and flap against a 10 s grace period).
	kwokArgs := []string{"--kubeconfig=" + c.kubeconfigPath("kwok"), "--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokLabel + "=" + KwokLabelValue, "--node-lease-duration-seconds=" + strconv.Itoa(int(opts.NodeLeaseDuration.Seconds())),
		"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1", "--server-address=127.0.0.1:" + strconv.Itoa(kwokPort)}
	for _, s := range stages {
		kwokArgs = append(kwokArgs, "--config="+filepath.Join(c.BinDir, "kwok-stages", s.Name()))
	}
	if opts.KwokParallelism > 0 {
		kwokConfig := filepath.Join(c.WorkDir, "kwok.yaml")
		if err := os.WriteFile(kwokConfig, []byte(kwokConfiguration(opts.KwokParallelism)), 0o644); err != nil {
			return err
		}
		kwokArgs = append(kwokArgs, "--config="+kwokConfig)
	}
	kwokProc, err := c.run(logs, "kwok", bin("kwok"), kwokArgs...)
	if err != nil {
		return err
	}
	insecure := &tls.Config{InsecureSkipVerify: true}
	for _, h := range []struct {
		p   *Process
		url string
		tls *tls.Config
	}{
		{kcmProc, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), insecure},
		{schedProc, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), insecure},
		{kwokProc, fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort), nil},
	} {
		if err := waitHTTPOf(ctx, h.p, h.url, h.tls, 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w", h.p.Name, err)
		}
	}
	// ServiceAccount admission rejects pods until the default SA exists.
	if err := waitFor(ctx, 60*time.Second, 200*time.Millisecond, "default ServiceAccount", func(ctx context.Context) (bool, error) {
		if err := c.alive(); err != nil {
			return false, err
		}
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	// A health endpoint may have been answered by another run's process on
	// the same port while ours failed to bind it: only ours still running
	// proves ours answered.
	if err := c.alive(); err != nil {
		return err
	}
	log.Logf("control plane up in %.1fs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok", since())
	return nil
}

// Controllers are the kube-controller-manager controllers the tests rely on:
// the attach/detach controller, node lifecycle with taint-based eviction,
// pod GC (out-of-service force delete), StatefulSets and what a cluster
// needs to run pods with volumes at all (ServiceAccounts and their tokens,
// PV binding and protection, namespaces, garbage collection; the
// kube-root-ca.crt ConfigMap of every namespace, which the ServiceAccount
// token volume of a pod on a real node projects as its in-cluster CA).
var Controllers = []string{
	"root-ca-certificate-publisher-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "namespace-controller", "garbage-collector-controller",
	"pod-garbage-collector-controller", "node-lifecycle-controller", "taint-eviction-controller",
	"persistentvolume-attach-detach-controller", "persistentvolume-binder-controller",
	"persistentvolume-protection-controller", "persistentvolumeclaim-protection-controller",
	"statefulset-controller", "replicaset-controller", "deployment-controller", "daemonset-controller",
}

// alive returns an ExitedError for the first process that has ended
// without being stopped.
func (c *Cluster) alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.processes {
		if p.Unexpected() {
			return p.exitError()
		}
	}
	return nil
}

// Alive reports an error when any process the cluster started (control plane
// or product) has ended without Stop or Kill (a crash), with the end of its
// log.
func (c *Cluster) Alive() error {
	return c.alive()
}

// startAPIServer starts kube-apiserver and waits until it is ready.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	api, err := c.run(filepath.Join(c.WorkDir, "logs"), "kube-apiserver", c.apiBin, c.apiArgs...)
	if err != nil {
		return err
	}
	c.api = api
	adminTLS, err := c.clientTLS("admin")
	if err != nil {
		return err
	}
	// Our admin certificate is only accepted by our own apiserver: another
	// run's apiserver on this port cannot pass for it.
	if err := waitHTTPOf(ctx, api, c.apiURL+"/readyz", adminTLS, apiReadyTimeout); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

// apiReadyTimeout bounds the wait for kube-apiserver's /readyz. A restart
// on a loaded machine is slow: in the trial campaign of 2026-11-27 (two
// fence-trials runs beside four engineers' builds and real-node tests, load
// 60 on 2 cores) a restarted apiserver, reloading a full etcd, still timed
// out TLS handshakes after a minute.
const apiReadyTimeout = 3 * time.Minute

// APIReady waits until kube-apiserver answers /readyz, for at most timeout:
// what a run of many trials checks after one that failed, before it trusts
// the control plane with the next.
func (c *Cluster) APIReady(ctx context.Context, timeout time.Duration) error {
	adminTLS, err := c.clientTLS("admin")
	if err != nil {
		return err
	}
	if err := waitHTTPOf(ctx, c.api, c.apiURL+"/readyz", adminTLS, timeout); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver (SIGTERM) and starts it again with
// the same flags, as a control-plane upgrade does; every client (the
// controllers, KWOK, the product) must ride it out. It returns once the new
// one is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.api.Stop(30 * time.Second)
	c.mu.Lock()
	c.processes = slices.DeleteFunc(c.processes, func(p *Process) bool { return p == c.api })
	c.mu.Unlock()
	return c.startAPIServer(ctx)
}

// restartable are the control-plane processes a node's kubelet would
// restart as static pods when they exit: kube-scheduler, for one, exits on
// purpose when it finds its cache corrupted (seen after a slow
// kube-apiserver restart).
var restartable = []string{"kube-controller-manager", "kube-scheduler", "kwok"}

// RestartCrashed starts again, with the same flags, every control-plane
// process of restartable that ended on its own, and returns what it
// restarted, each with how it ended. kube-apiserver and etcd are not
// restarted: a test that stops them restarts them itself.
func (c *Cluster) RestartCrashed() ([]string, error) {
	c.mu.Lock()
	var crashed []*Process
	for _, p := range c.processes {
		if slices.Contains(restartable, p.Name) && p.Unexpected() {
			crashed = append(crashed, p)
		}
	}
	c.mu.Unlock()
	var out []string
	for _, p := range crashed {
		np, err := startProcess(filepath.Dir(p.LogPath), p.Name, p.cmd.Path, p.cmd.Args[1:]...)
		if err != nil {
			return out, err
		}
		c.mu.Lock()
		c.processes = slices.DeleteFunc(c.processes, func(q *Process) bool { return q == p })
		c.processes = append(c.processes, np)
		c.mu.Unlock()
		out = append(out, fmt.Sprintf("%s exited on its own (%v: %s); restarted", p.Name, p.Err(), lastLine(p.Tail(1))))
	}
	return out, nil
}

// lastLine shortens a log line for a one-line report.
func lastLine(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func (c *Cluster) run(logs, name, bin string, args ...string) (*Process, error) {
	p, err := startProcess(logs, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.processes = append(c.processes, p)
	c.mu.Unlock()
	return p, nil
}

// Running returns the processes the cluster runs now: its control plane
// and what was started beside it.
func (c *Cluster) Running() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.processes)
}

// StartProcess runs a product process beside the cluster, logging to the
// cluster's log dir; it is stopped with the cluster.
func (c *Cluster) StartProcess(name, bin string, args ...string) (*Process, error) {
	return c.run(filepath.Join(c.WorkDir, "logs"), name, bin, args...)
}

// Stop stops everything the cluster runs, clients before servers: first
// the real nodes (powered off, and what they made removed), then what runs
// in this process against the control plane (each simulated kubelet and its
// informers, waited for) and the BMCs with their machines, then every other
// process started after the control plane (the product), then the control
// plane from kwok down to etcd, each group in parallel (SIGTERM, SIGKILL
// after a grace period).
func (c *Cluster) Stop() {
	c.stopRealNodes()
	c.mu.Lock()
	stops := c.stops
	c.stops = nil
	c.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	c.mu.Lock()
	procs := c.processes
	c.processes = nil
	c.mu.Unlock()
	var product, etcd []*Process
	var controlPlane []*Process
	for _, p := range procs {
		switch p.Name {
		case "etcd":
			etcd = append(etcd, p)
		case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok":
			controlPlane = append(controlPlane, p)
		default:
			product = append(product, p)
		}
	}
	for _, group := range [][]*Process{product, controlPlane, etcd} {
		var wg sync.WaitGroup
		for _, p := range group {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.Stop(5 * time.Second)
			}()
		}
		wg.Wait()
	}
}

// KubeletInformers is the informer factory of the cluster-wide claims,
// volumes and attachments that every simulated kubelet of this process
// shares (kubeletsim.Options.Informers): with a hundred simulated nodes, one
// watch and one cache of each, not a hundred. Call StartKubeletInformers
// once a kubelet has asked for its informers; Stop stops them.
func (c *Cluster) KubeletInformers() informers.SharedInformerFactory {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kubeletInformers == nil {
		c.kubeletInformers = informers.NewSharedInformerFactory(c.Client, 0)
		c.kubeletStop = make(chan struct{})
		f, stop := c.kubeletInformers, c.kubeletStop
		c.stops = append(c.stops, func() {
			close(stop)
			f.Shutdown()
		})
	}
	return c.kubeletInformers
}

// StartKubeletInformers starts the shared informers asked for since the
// last call.
func (c *Cluster) StartKubeletInformers() {
	c.mu.Lock()
	f, stop := c.kubeletInformers, c.kubeletStop
	c.mu.Unlock()
	if f != nil {
		f.Start(stop)
	}
}

// atStop makes Stop call stop before it stops any process (see Stop).
func (c *Cluster) atStop(stop func()) {
	c.mu.Lock()
	c.stops = append(c.stops, stop)
	c.mu.Unlock()
}

// Cleanup stops the cluster and removes its work dir unless keep; a kept
// work dir keeps the logs, PKI and kubeconfigs, but not etcd's data (over
// 100 MB of preallocated WAL, of no use after the run).
func (c *Cluster) Cleanup(keep bool) {
	c.Stop()
	if keep {
		_ = os.RemoveAll(filepath.Join(c.WorkDir, "etcd"))
		c.log.Logf("kept %s (logs in %s/logs)", c.WorkDir, c.WorkDir)
		return
	}
	_ = os.RemoveAll(c.WorkDir)
}

func (c *Cluster) clientTLS(user string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path(user+".crt"), c.pki.path(user+".key"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}, nil
}

func (c *Cluster) kubeconfigPath(user string) string {
	return filepath.Join(c.WorkDir, user+".kubeconfig")
}

func (c *Cluster) writeCertKubeconfig(user string) error {
	return c.writeKubeconfig(user, &clientcmdapi.AuthInfo{
		ClientCertificate: c.pki.path(user + ".crt"),
		ClientKey:         c.pki.path(user + ".key"),
	})
}

func (c *Cluster) writeKubeconfig(user string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.apiURL, CertificateAuthority: c.pki.path("ca.crt")}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, c.kubeconfigPath(user))
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a token from the TokenRequest API, so that processes run
// with exactly the RBAC granted to that account.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	return c.tokenKubeconfig(ctx, namespace, name, "sa-"+namespace+"-"+name, nil)
}

// NodeBoundKubeconfig writes a kubeconfig for the ServiceAccount with a token
// bound to a pod on node, as a DaemonSet pod's projected token is: the
// apiserver names the node in the token (user extra
// authentication.kubernetes.io/node-name), which the node agent's admission
// policy checks. Each call binds a new pod (tolerating everything, as a
// DaemonSet's does) and deletes the previous one, whose token dies with it,
// so that a node deleted and registered again gets a token for its new
// incarnation.
func (c *Cluster) NodeBoundKubeconfig(ctx context.Context, namespace, name, node string) (string, error) {
	pods := c.Client.CoreV1().Pods(namespace)
	holder := "token-" + name + "-" + node
	if old, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "csi-fence.io/token-holder=" + holder}); err == nil {
		for _, p := range old.Items {
			_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: holder + "-", Labels: map[string]string{"csi-fence.io/token-holder": holder}},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: name, AutomountServiceAccountToken: ptr.To(false),
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("pod to bind the token of %s/%s on %s: %w", namespace, name, node, err)
	}
	return c.tokenKubeconfig(ctx, namespace, name, "sa-"+namespace+"-"+name+"-"+node,
		&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
}

func (c *Cluster) tokenKubeconfig(ctx context.Context, namespace, name, user string, bound *authenticationv1.BoundObjectReference) (string, error) {
	var tok string
	err := waitFor(ctx, 30*time.Second, 200*time.Millisecond, "token of "+namespace+"/"+name, func(ctx context.Context) (bool, error) {
		exp := int64(24 * 3600)
		tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp, BoundObjectRef: bound}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		tok = tr.Status.Token
		return true, nil
	})
	if err != nil {
		return "", err
	}
	if err := c.writeKubeconfig(user, &clientcmdapi.AuthInfo{Token: tok}); err != nil {
		return "", err
	}
	return c.kubeconfigPath(user), nil
}

func waitHTTP(ctx context.Context, url string, tlsCfg *tls.Config, timeout time.Duration) error {
	return waitHTTPOf(ctx, nil, url, tlsCfg, timeout)
}

// waitHTTPOf waits until url answers 200 OK, and gives up at once when p
// (if not nil), the process that should answer, has ended.
func waitHTTPOf(ctx context.Context, p *Process, url string, tlsCfg *tls.Config, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	return waitFor(ctx, timeout, 100*time.Millisecond, url, func(ctx context.Context) (bool, error) {
		if p != nil && p.Exited() {
			return false, p.exitError()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		rsp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s", url, rsp.Status)
		}
		return true, nil
	})
}
