// Package framework runs a real Kubernetes control plane on this machine for
// the end-to-end tests and the demo: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler built from pinned modules (see
// hack/e2e-binaries.sh), KWOK for the nodes, on 127.0.0.1 with free ports.
package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
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
	// BinDir holds the control-plane binaries; default: $FENCE_E2E_BIN or
	// what hack/e2e-binaries.sh prints (building them if needed).
	BinDir string
	// WorkDir is where state and logs go (default: a new temp dir).
	WorkDir string
}

// Cluster is a running control plane.
type Cluster struct {
	WorkDir    string
	BinDir     string
	Kubeconfig string // admin
	Config     *rest.Config
	Client     kubernetes.Interface
	Dynamic    dynamic.Interface

	log       Logger
	pki       *pki
	apiURL    string
	processes []*Process
}

// RepoRoot is the root of this repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Binaries returns the directory of the control-plane binaries, building
// them (minutes, once) when they are not cached yet.
func Binaries(ctx context.Context, log Logger) (string, error) {
	if d := os.Getenv("FENCE_E2E_BIN"); d != "" {
		return d, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), "hack", "e2e-binaries.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building control-plane binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
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

// Start starts the control plane and waits until every part is healthy.
// On error everything started is stopped again.
func Start(ctx context.Context, log Logger, opts Options) (c *Cluster, err error) {
	start := time.Now()
	if opts.NodeMonitorGracePeriod == 0 {
		opts.NodeMonitorGracePeriod = 10 * time.Second
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = Binaries(ctx, log); err != nil {
			return nil, err
		}
	}
	if opts.WorkDir == "" {
		if opts.WorkDir, err = os.MkdirTemp("", "fence-e2e-"); err != nil {
			return nil, err
		}
	}
	c = &Cluster{WorkDir: opts.WorkDir, BinDir: opts.BinDir, log: log}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	logs := filepath.Join(c.WorkDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
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
	} {
		if err := c.pki.issue(cert.name, cert.cn, cert.orgs, cert.server); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.apiURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	bin := func(name string) string { return filepath.Join(c.BinDir, name) }

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.run(logs, "etcd", bin("etcd"), "--name=e2e", "--data-dir="+filepath.Join(c.WorkDir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, etcdURL+"/health", nil, 30*time.Second); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	log.Logf("etcd healthy (%.1fs)", time.Since(start).Seconds())

	p := c.pki.path
	if err := c.run(logs, "kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort), "--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"), "--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--authorization-mode=Node,RBAC", "--endpoint-reconciler-type=none", "--allow-privileged=true",
		"--cert-dir="+filepath.Join(c.WorkDir, "pki", "generated")); err != nil {
		return nil, err
	}
	adminTLS, err := c.clientTLS("admin")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, c.apiURL+"/readyz", adminTLS, 60*time.Second); err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	log.Logf("kube-apiserver ready (%.1fs)", time.Since(start).Seconds())

	for _, user := range []string{"admin", "kcm", "scheduler", "kwok"} {
		if err := c.writeCertKubeconfig(user); err != nil {
			return nil, err
		}
	}
	c.Kubeconfig = c.kubeconfigPath("admin")
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}

	kcm := c.kubeconfigPath("kcm")
	controllers := "serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller," +
		"pod-garbage-collector-controller,node-lifecycle-controller,taint-eviction-controller,persistentvolume-attach-detach-controller," +
		"persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller," +
		"statefulset-controller,replicaset-controller,deployment-controller"
	if err := c.run(logs, "kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort), "--leader-elect=false",
		"--use-service-account-credentials=true", "--service-account-private-key-file="+p("sa.key"),
		"--root-ca-file="+p("ca.crt"), "--node-monitor-period=1s",
		"--node-monitor-grace-period="+opts.NodeMonitorGracePeriod.String(), "--allocate-node-cidrs=false",
		"--controllers="+controllers); err != nil {
		return nil, err
	}
	sched := c.kubeconfigPath("scheduler")
	if err := c.run(logs, "kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig="+sched, "--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort)); err != nil {
		return nil, err
	}
	stages, err := os.ReadDir(filepath.Join(c.BinDir, "kwok-stages"))
	if err != nil {
		return nil, fmt.Errorf("kwok stages: %w", err)
	}
	kwokArgs := []string{"--kubeconfig=" + c.kubeconfigPath("kwok"), "--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + KwokLabel + "=fake", "--node-lease-duration-seconds=10",
		"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1", "--server-address=127.0.0.1:" + strconv.Itoa(kwokPort)}
	for _, s := range stages {
		kwokArgs = append(kwokArgs, "--config="+filepath.Join(c.BinDir, "kwok-stages", s.Name()))
	}
	if err := c.run(logs, "kwok", bin("kwok"), kwokArgs...); err != nil {
		return nil, err
	}
	insecure := &tls.Config{InsecureSkipVerify: true}
	for name, url := range map[string]string{
		"kube-controller-manager": fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort),
		"kube-scheduler":          fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort),
		"kwok":                    fmt.Sprintf("http://127.0.0.1:%d/healthz", kwokPort),
	} {
		if err := waitHTTP(ctx, url, insecure, 60*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	// ServiceAccount admission rejects pods until the default SA exists.
	if err := waitFor(ctx, 60*time.Second, 200*time.Millisecond, "default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	log.Logf("control plane up in %.1fs (logs in %s)", time.Since(start).Seconds(), logs)
	return c, nil
}

func (c *Cluster) run(logs, name, bin string, args ...string) error {
	p, err := startProcess(logs, name, bin, args...)
	if err != nil {
		return err
	}
	c.processes = append(c.processes, p)
	return nil
}

// Start runs a product process beside the cluster; it is stopped with it.
func (c *Cluster) StartProcess(name, bin string, args ...string) (*Process, error) {
	p, err := startProcess(filepath.Join(c.WorkDir, "logs"), name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.processes = append(c.processes, p)
	return p, nil
}

// Stop stops every process, the last started first.
func (c *Cluster) Stop() {
	for i := len(c.processes) - 1; i >= 0; i-- {
		c.processes[i].Stop(5 * time.Second)
	}
	c.processes = nil
}

// Cleanup stops the cluster and removes its work dir unless keep.
func (c *Cluster) Cleanup(keep bool) {
	c.Stop()
	if keep {
		c.log.Logf("kept %s (logs in %s/logs)", c.WorkDir, c.WorkDir)
		return
	}
	os.RemoveAll(c.WorkDir)
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
	var tok string
	err := waitFor(ctx, 30*time.Second, 200*time.Millisecond, "token of "+namespace+"/"+name, func(ctx context.Context) (bool, error) {
		exp := int64(24 * 3600)
		tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		tok = tr.Status.Token
		return true, nil
	})
	if err != nil {
		return "", err
	}
	user := "sa-" + namespace + "-" + name
	if err := c.writeKubeconfig(user, &clientcmdapi.AuthInfo{Token: tok}); err != nil {
		return "", err
	}
	return c.kubeconfigPath(user), nil
}

func waitHTTP(ctx context.Context, url string, tlsCfg *tls.Config, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return waitFor(ctx, timeout, 100*time.Millisecond, url, func(ctx context.Context) (bool, error) {
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
