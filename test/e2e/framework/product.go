package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/test/kubeletsim"
)

// DriverName is the mock driver's name in the e2e tests and the demo.
const DriverName = "fence.csi-fence.io"

// Product is fence-attacher running beside the cluster: the mock driver's
// controller instance with csi-fence-attacher, and a mock node instance per
// node, all on one simulated array.
type Product struct {
	c        *Cluster
	BinDir   string
	StateDir string
	Array    *array.Array
	Attacher *Process
	// AttacherHTTP is the address of csi-fence-attacher's metrics endpoint.
	AttacherHTTP string
	Mock         *Process
	Nodes        map[string]*NodeInstance

	// attacherArgs are csi-fence-attacher's flags for an HTTP address, kept
	// to start it again after a crash.
	attacherArgs func(addr string) []string
}

// NodeInstance is what runs on one simulated node: the mock node plugin, a
// simulated kubelet volume manager (in this process) and csi-fence-attacher
// in the node role.
type NodeInstance struct {
	Name       string
	Process    *Process // mock node plugin
	Agent      *Process // csi-fence-attacher --role=node
	HTTP       string   // data path: http://HTTP/write?volume=V
	KubeletDir string
	sock       string

	kubelet       *kubeletsim.Kubelet
	kubeletCancel context.CancelFunc
	conn          *grpc.ClientConn
}

// BuildProduct builds the product binaries into dir.
func BuildProduct(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/csi-fence-attacher", "./cmd/csi-fence-mock")
	cmd.Dir = RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("building product: %v\n%s", err, out)
	}
	return nil
}

// ProductOptions tune the product processes.
type ProductOptions struct {
	MockArgs     []string // extra flags of every mock instance
	AttacherArgs []string // extra flags of csi-fence-attacher
}

// StartProduct applies deploy/ (CRD, RBAC, CSIDriver) and starts the mock
// controller instance and csi-fence-attacher with the ServiceAccount of
// deploy/kubernetes/rbac-controller.yaml.
func (c *Cluster) StartProduct(ctx context.Context, opts ProductOptions) (*Product, error) {
	begin := time.Now()
	p := &Product{c: c, BinDir: filepath.Join(c.WorkDir, "bin"), StateDir: filepath.Join(c.WorkDir, "array"), Nodes: map[string]*NodeInstance{}}
	if err := BuildProduct(ctx, p.BinDir); err != nil {
		return nil, err
	}
	c.log.Logf("csi-fence-attacher and csi-fence-mock built (%.1fs)", time.Since(begin).Seconds())
	for _, f := range []string{"deploy/kubernetes/base/crd-fencingrequests.yaml", "deploy/kubernetes/base/rbac-controller.yaml",
		"deploy/kubernetes/base/rbac-node.yaml", "deploy/kubernetes/mock-example/csidriver.yaml"} {
		if err := c.ApplyManifest(ctx, f, ""); err != nil {
			return nil, err
		}
	}
	if err := WaitFor(ctx, 30*time.Second, "FencingRequest CRD served", func(ctx context.Context) (bool, error) {
		_, err := c.Client.Discovery().ServerResourcesForGroupVersion("fencing.csi-fence.io/v1alpha1")
		return err == nil, nil
	}); err != nil {
		return nil, err
	}
	var err error
	if p.Array, err = array.Open(p.StateDir); err != nil {
		return nil, err
	}
	sock := filepath.Join(c.WorkDir, "controller.sock")
	mockArgs := append([]string{"--role=controller", "--csi-address=unix://" + sock, "--state-dir=" + p.StateDir, "--driver-name=" + DriverName}, opts.MockArgs...)
	if p.Mock, err = c.StartProcess("mock-controller", filepath.Join(p.BinDir, "csi-fence-mock"), mockArgs...); err != nil {
		return nil, err
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher")
	if err != nil {
		return nil, err
	}
	p.attacherArgs = func(addr string) []string {
		return append([]string{"--csi-address=" + sock, "--kubeconfig=" + kubeconfig, "--v=5",
			"--leader-election", "--leader-election-namespace=default", "--http-endpoint=" + addr,
			"--timeout=5s", "--retry-interval-start=200ms", "--retry-interval-max=5s", "--reconcile-sync=10s",
			"--feature-gates=NonGracefulFailover=true"}, opts.AttacherArgs...)
	}
	if err := p.StartAttacher(ctx); err != nil {
		return nil, err
	}
	c.log.Logf("deploy/ applied, mock controller and csi-fence-attacher up (%.1fs)", time.Since(begin).Seconds())
	return p, nil
}

// StartAttacher starts csi-fence-attacher (controller role) with the flags
// StartProduct gave it, e.g. after KillAttacher. Its leader-election Lease
// may still be held by the killed one: it acts once it has taken it.
func (p *Product) StartAttacher(ctx context.Context) error {
	var err error
	p.Attacher, p.AttacherHTTP, err = p.c.startServer(ctx, "csi-fence-attacher", filepath.Join(p.BinDir, "csi-fence-attacher"), "/metrics", 60*time.Second, p.attacherArgs)
	return err
}

// StartStandbyAttacher starts a second replica of csi-fence-attacher
// (controller role) with StartProduct's flags: it waits for the leader's
// Lease, as the new pod of a rolling update does.
//
// Like a pod, it runs in a UTS namespace of its own with a hostname of its
// own: leader election (csi-lib-utils) tells replicas apart by hostname, and
// two processes of one host would both believe they hold the Lease.
func (p *Product) StartStandbyAttacher(ctx context.Context) (proc *Process, httpAddr string, err error) {
	const name = "csi-fence-attacher-standby"
	bin := filepath.Join(p.BinDir, "csi-fence-attacher")
	return p.c.startServer(ctx, name, "unshare", "/metrics", 60*time.Second, func(addr string) []string {
		return append([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, name, bin}, p.attacherArgs(addr)...)
	})
}

// Leading reports whether the csi-fence-attacher serving metrics at
// httpAddr says it holds its leader-election Lease.
func Leading(ctx context.Context, httpAddr string) (bool, error) {
	lines, err := Metrics(ctx, httpAddr)
	if err != nil {
		return false, err
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true, nil
		}
	}
	return false, nil
}

// Metrics returns the lines of the Prometheus text exposition served at
// http://httpAddr/metrics.
func Metrics(ctx context.Context, httpAddr string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}

// MetricSum adds up the samples of the metric name (a counter, or a
// histogram's name_count) served at httpAddr whose labels contain every
// one of labels (each as `key="value"`).
func MetricSum(ctx context.Context, httpAddr, name string, labels ...string) (float64, error) {
	lines, err := Metrics(ctx, httpAddr)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range lines {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 || !containsAll(rest[:i], labels) {
			continue
		}
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// RestartAttacher kills csi-fence-attacher (controller role) and starts it
// again with extra flags after StartProduct's (the last value of a flag
// wins); none restores StartProduct's flags.
func (p *Product) RestartAttacher(ctx context.Context, extra ...string) error {
	p.KillAttacher()
	var err error
	p.Attacher, p.AttacherHTTP, err = p.c.startServer(ctx, "csi-fence-attacher", filepath.Join(p.BinDir, "csi-fence-attacher"), "/metrics", 60*time.Second,
		func(addr string) []string { return append(p.attacherArgs(addr), extra...) })
	return err
}

// KillAttacher kills csi-fence-attacher (controller role) with SIGKILL: it
// writes nothing more, releases nothing, wherever it is.
func (p *Product) KillAttacher() {
	p.Attacher.Kill()
}

// startServer starts a process that serves HTTP on a free port (args gets
// its address) and waits until path answers 200 there. When the process
// lost the race for its port (see Start), it is started again on another.
func (c *Cluster) startServer(ctx context.Context, name, bin, path string, timeout time.Duration, args func(addr string) []string) (*Process, string, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		proc, err := c.StartProcess(name, bin, args(addr)...)
		if err != nil {
			return nil, "", err
		}
		err = waitHTTPOf(ctx, proc, "http://"+addr+path, nil, timeout)
		if err == nil && proc.Exited() {
			err = proc.exitError() // someone else answered on its port
		}
		if err == nil {
			return proc, addr, nil
		}
		proc.Stop(5 * time.Second)
		var exited *ExitedError
		if attempt < startAttempts && errors.As(err, &exited) && exited.PortConflict {
			c.log.Logf("%s lost its port to another process; starting it again on another port", name)
			continue
		}
		return nil, "", fmt.Errorf("%s did not come up (see %s): %w", name, proc.LogPath, err)
	}
}

// StartNode starts what runs on node: its mock node plugin, its simulated
// kubelet and csi-fence-attacher in the node role.
func (p *Product) StartNode(ctx context.Context, node string) (*NodeInstance, error) {
	dir := filepath.Join(p.c.WorkDir, "nodes", node)
	n := &NodeInstance{Name: node, KubeletDir: filepath.Join(dir, "kubelet"), sock: filepath.Join(dir, "csi.sock")}
	for _, d := range []string{n.KubeletDir + "/pods", n.KubeletDir + "/plugins"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The array learns its nodes as a real array learns its hosts' initiators.
	if err := p.Array.RegisterNode(node, 0); err != nil {
		return nil, err
	}
	p.Nodes[node] = n
	return n, p.PowerOn(ctx, node)
}

// PowerOn (re)starts everything of a node that StartNode started.
func (p *Product) PowerOn(ctx context.Context, node string) error {
	n := p.Nodes[node]
	var err error
	if n.Process, n.HTTP, err = p.c.startServer(ctx, "mock-node-"+node, filepath.Join(p.BinDir, "csi-fence-mock"), "/metrics", 30*time.Second,
		func(addr string) []string {
			return []string{"--role=node", "--node-id=" + node, "--csi-address=unix://" + n.sock, "--state-dir=" + p.StateDir,
				"--driver-name=" + DriverName, "--http-endpoint=" + addr}
		}); err != nil {
		return err
	}
	if n.conn, err = grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return err
	}
	if n.kubelet, err = kubeletsim.New(kubeletsim.Options{
		Client: p.c.Client, NodeName: node, DriverName: DriverName, KubeletDir: n.KubeletDir, Conn: n.conn,
		Period: 200 * time.Millisecond, ReportVolumesInUse: true,
	}); err != nil {
		return err
	}
	// The simulated kubelet runs in this process; its log goes to the
	// node's file beside the others, not to the test's output.
	kubeletLog, err := os.OpenFile(filepath.Join(p.c.WorkDir, "logs", "kubelet-"+node+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(kubeletLog), textlogger.Verbosity(4)))
	kctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	n.kubeletCancel = cancel
	go func() { _ = n.kubelet.Run(kctx) }()

	kubeconfig, err := p.c.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher-node")
	if err != nil {
		return err
	}
	n.Agent, _, err = p.c.startServer(ctx, "node-agent-"+node, filepath.Join(p.BinDir, "csi-fence-attacher"), "/metrics", 30*time.Second,
		func(addr string) []string {
			return []string{"--role=node", "--node-name=" + node, "--kubelet-dir=" + n.KubeletDir, "--csi-address=" + n.sock,
				"--kubeconfig=" + kubeconfig, "--http-endpoint=" + addr, "--v=4",
				"--retry-interval-start=200ms", "--retry-interval-max=5s", "--timeout=5s"}
		})
	return err
}

// PowerOff cuts the node's power: its kubelet, node agent and plugin stop
// at once and leave everything on disk as it was.
func (n *NodeInstance) PowerOff() {
	n.Partition()
	n.Process.Kill()
}

// Partition cuts the node off the control plane: its kubelet and node agent
// can no longer act, but its plugin keeps serving its workload's I/O.
func (n *NodeInstance) Partition() {
	if n.kubelet != nil {
		n.kubelet.PowerOff()
		n.kubeletCancel()
		n.kubelet = nil
	}
	if n.conn != nil {
		n.conn.Close()
		n.conn = nil
	}
	if n.Agent != nil {
		n.Agent.Kill()
	}
}

// Write is one write of a workload on this node to volume, through the node
// instance's data path.
func (n *NodeInstance) Write(ctx context.Context, volume string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+n.HTTP+"/write?volume="+volume, nil)
	rsp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		return fmt.Errorf("write refused: %s", rsp.Status)
	}
	return nil
}

// Violations returns the array's safety violations per invariant.
func (p *Product) Violations() (map[string]int, error) {
	s, err := p.Array.Snapshot()
	if err != nil {
		return nil, err
	}
	return s.CountViolations(), nil
}
