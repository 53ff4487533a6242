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
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/test/bmcsim"
	"github.com/csi-fence/fence-attacher/test/kubeletsim"
)

// DriverName is the mock driver's name in the e2e tests and the demo: the
// product's first driver.
const DriverName = "fence.csi-fence.io"

// Product is fence-attacher running beside the cluster. Each CSI driver
// (DriverName always, more with AddDriver) has its mock controller instance
// with csi-fence-attacher beside it, on a simulated array of its own; each
// node has, for each of its drivers, a mock node instance, a simulated
// kubelet and the node agent.
type Product struct {
	// Driver is the first driver, the one single-driver tests use:
	// p.Array, p.Attacher, p.StartAttacher and the like are its.
	*Driver
	// Drivers are every driver, the first one first.
	Drivers []*Driver
	BinDir  string
	Nodes   map[string]*NodeInstance
	// PowerSwitches make a driver's node plugin on a node the machine of a
	// real BMC (key: node + "/" + driver; see SetPowerSwitch).
	PowerSwitches map[string]*bmcsim.Config

	c *Cluster
}

// SetPowerSwitch makes the node plugin of driver d on node, once StartNode
// starts it, the machine of a real IPMI BMC (test/bmcsim): ipmi_sim starts
// it at power on and kills it at power off, so that a power fence really
// stops the node's I/O on d's volumes. cfg gives the BMC's directory and
// administrator; its Machine is set here.
func (p *Product) SetPowerSwitch(node string, d *Driver, cfg bmcsim.Config) {
	if p.PowerSwitches == nil {
		p.PowerSwitches = map[string]*bmcsim.Config{}
	}
	p.PowerSwitches[node+"/"+d.Name] = &cfg
}

// Driver is one CSI driver of the product: its CSIDriver object (annotated
// SafeDetach), its mock controller instance and csi-fence-attacher in the
// controller role beside it (with the Lease of its own that
// external-attacher's leader election names after the driver), on a
// simulated array of its own.
type Driver struct {
	Name string
	// StorageClass is the storageClassName of its volumes and their claims.
	StorageClass string
	StateDir     string
	Array        *array.Array
	Attacher     *Process
	// AttacherHTTP is the address of the attacher's metrics.
	AttacherHTTP string
	Mock         *Process

	c *Cluster
	// suffix tells its processes, logs and sockets from the first
	// driver's, which keep the names they have always had.
	suffix   string
	mockBin  string
	fenceBin string
	sock     string
	mockArgs []string
	// attacherArgs are csi-fence-attacher's flags for an HTTP address, kept
	// to start it again after a crash.
	attacherArgs func(addr string) []string
	// standbys counts StartStandbyAttacher's replicas, each named anew.
	standbys int
}

// NodeInstance is what runs on one simulated node: a NodePlugin per driver.
type NodeInstance struct {
	Name       string
	KubeletDir string
	// NodePlugin is the first driver's: n.Process, n.Agent, n.HTTP and
	// n.Write are its.
	*NodePlugin
	// Plugins are every driver's, the first driver's first.
	Plugins []*NodePlugin
}

// NodePlugin is what one driver runs on one node: its mock node plugin, a
// simulated kubelet volume manager for its volumes (in this process) and
// csi-fence-attacher in the node role. The plugins of a node share its
// kubelet directory, as the drivers of a real node share its kubelet.
type NodePlugin struct {
	Driver  *Driver
	Process *Process // mock node plugin
	Agent   *Process // csi-fence-attacher --role=node
	// AgentHTTP is the node agent's --http-endpoint address (host:port).
	AgentHTTP string
	HTTP      string // data path: http://HTTP/write?volume=V
	// NodeID is the CSI node ID the plugin reports from its next power-on
	// ("": the node's name, which CreateNode registers in its CSINode).
	NodeID string
	sock   string

	// BMC powers the plugin when its node has a power switch
	// (SetPowerSwitch); then Process is nil.
	BMC    *bmcsim.BMC
	bmcCfg *bmcsim.Config

	kubelet       *kubeletsim.Kubelet
	kubeletCancel context.CancelFunc
	conn          *grpc.ClientConn
}

// BuildProduct builds the product binaries into dir.
func BuildProduct(ctx context.Context, dir string) error {
	if err := BuildCommands(ctx, dir, "./cmd/csi-fence-attacher", "./cmd/csi-fence-mock"); err != nil {
		return fmt.Errorf("building product: %w", err)
	}
	return nil
}

// BuildCommands builds the packages (./cmd/x) of this repository into dir
// for this machine, the way the release images are built
// (imagebuild.GoBuild: static, -trimpath), which is also how make test
// builds its test binaries: on a cold machine they all compile their
// dependencies once, not once per set of build flags.
func BuildCommands(ctx context.Context, dir string, pkgs ...string) error {
	return imagebuild.GoBuild(ctx, RepoRoot(), dir, runtime.GOOS, runtime.GOARCH, "", pkgs...)
}

// ProductOptions tune the product processes.
type ProductOptions struct {
	MockArgs     []string // extra flags of every mock instance
	AttacherArgs []string // extra flags of csi-fence-attacher
}

// csiDriverManifest is the CSIDriver of the mock driver: attachRequired and
// the SafeDetach annotation.
const csiDriverManifest = "deploy/kubernetes/mock-example/csidriver.yaml"

// StartProduct applies deploy/ (CRD, RBAC, CSIDriver) and starts the mock
// controller instance and csi-fence-attacher with the ServiceAccount of
// deploy/kubernetes/rbac-controller.yaml.
func (c *Cluster) StartProduct(ctx context.Context, opts ProductOptions) (*Product, error) {
	begin := time.Now()
	p := &Product{c: c, BinDir: filepath.Join(c.WorkDir, "bin"), Nodes: map[string]*NodeInstance{}}
	if err := BuildProduct(ctx, p.BinDir); err != nil {
		return nil, err
	}
	c.log.Logf("csi-fence-attacher and csi-fence-mock built (%.1fs)", time.Since(begin).Seconds())
	for _, f := range []string{"deploy/kubernetes/base/crd-fencingrequests.yaml", "deploy/kubernetes/base/crd-fenceagentconfigs.yaml", "deploy/kubernetes/base/rbac-controller.yaml",
		"deploy/kubernetes/base/rbac-node.yaml", "deploy/kubernetes/base/admission-node.yaml", csiDriverManifest} {
		if err := c.ApplyManifest(ctx, f, ""); err != nil {
			return nil, err
		}
	}
	// The sidecars look for both at start (power fencing needs the second).
	if err := WaitFor(ctx, 30*time.Second, "FencingRequest and FenceAgentConfig CRDs served", func(ctx context.Context) (bool, error) {
		list, err := c.Client.Discovery().ServerResourcesForGroupVersion("fencing.csi-fence.io/v1alpha1")
		if err != nil {
			return false, nil
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		return served["fencingrequests"] && served["fenceagentconfigs"], nil
	}); err != nil {
		return nil, err
	}
	d := &Driver{Name: DriverName, StorageClass: "fence-static", StateDir: filepath.Join(c.WorkDir, "array"),
		sock: filepath.Join(c.WorkDir, "controller.sock")}
	if err := p.startDriver(ctx, d, opts.MockArgs, opts.AttacherArgs); err != nil {
		return nil, err
	}
	p.Driver, p.Drivers = d, []*Driver{d}
	c.atStop(p.stop)
	c.log.Logf("deploy/ applied, mock controller and csi-fence-attacher up (%.1fs)", time.Since(begin).Seconds())
	return p, nil
}

// DriverOptions describe a driver for AddDriver.
type DriverOptions struct {
	// Name is the CSI driver's name, e.g. "fence2.csi-fence.io". Required.
	Name         string
	MockArgs     []string // extra flags of every mock instance of the driver
	AttacherArgs []string // extra flags of its csi-fence-attacher
	// Annotations are added to its CSIDriver before its sidecar starts.
	Annotations map[string]string
}

// AddDriver adds a CSI driver to the product, as a second storage system of
// a cluster: its CSIDriver (the mock example's, under its name), a
// StorageClass, its mock controller instance on an array of its own and its
// csi-fence-attacher. Nodes started afterwards run it when StartNode is told
// to; RemoveDriver stops it.
func (p *Product) AddDriver(ctx context.Context, opts DriverOptions) (*Driver, error) {
	short, _, _ := strings.Cut(opts.Name, ".")
	if short == "" {
		return nil, fmt.Errorf("invalid driver name %q", opts.Name)
	}
	b, err := os.ReadFile(filepath.Join(RepoRoot(), csiDriverManifest))
	if err != nil {
		return nil, err
	}
	objs, err := decodeManifests(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", csiDriverManifest, err)
	}
	for _, o := range objs {
		o.SetName(opts.Name)
		if len(opts.Annotations) > 0 {
			a := o.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			for k, v := range opts.Annotations {
				a[k] = v
			}
			o.SetAnnotations(a)
		}
	}
	if err := p.c.createObjects(ctx, objs, ApplyOptions{}); err != nil {
		return nil, err
	}
	d := &Driver{Name: opts.Name, StorageClass: short + "-static", StateDir: filepath.Join(p.c.WorkDir, "array-"+short),
		sock: filepath.Join(p.c.WorkDir, "controller-"+short+".sock"), suffix: short}
	// Its claims name a class of their own, so that they never bind to
	// another driver's volumes. The volumes are pre-provisioned: the class
	// says what a provisioner would use.
	retain := corev1.PersistentVolumeReclaimRetain
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: d.StorageClass}, Provisioner: d.Name,
		ReclaimPolicy: &retain, VolumeBindingMode: &immediate}
	if _, err := p.c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := p.startDriver(ctx, d, opts.MockArgs, opts.AttacherArgs); err != nil {
		return nil, err
	}
	p.Drivers = append(p.Drivers, d)
	p.c.log.Logf("driver %s added: CSIDriver, StorageClass %s, mock controller and csi-fence-attacher up", d.Name, d.StorageClass)
	return d, nil
}

// RemoveDriver stops a driver AddDriver added, on the controller side and
// on every node, leaving its API objects and its array as they are.
func (p *Product) RemoveDriver(d *Driver) {
	for _, n := range p.Nodes {
		n.Plugins = slices.DeleteFunc(n.Plugins, func(pl *NodePlugin) bool {
			if pl.Driver != d {
				return false
			}
			pl.stop()
			if pl.Process != nil {
				pl.Process.Stop(5 * time.Second)
			}
			if pl.BMC != nil {
				pl.BMC.Stop()
			}
			return true
		})
	}
	d.Attacher.Stop(10 * time.Second)
	d.Mock.Stop(5 * time.Second)
	p.Drivers = slices.DeleteFunc(p.Drivers, func(x *Driver) bool { return x == d })
}

// startDriver starts a driver's mock controller instance and its
// csi-fence-attacher, with the ServiceAccount of
// deploy/kubernetes/rbac-controller.yaml.
func (p *Product) startDriver(ctx context.Context, d *Driver, mockArgs, attacherArgs []string) error {
	d.c, d.mockArgs = p.c, mockArgs
	d.mockBin, d.fenceBin = filepath.Join(p.BinDir, "csi-fence-mock"), filepath.Join(p.BinDir, "csi-fence-attacher")
	var err error
	if d.Array, err = array.Open(d.StateDir); err != nil {
		return err
	}
	args := append([]string{"--role=controller", "--csi-address=unix://" + d.sock, "--state-dir=" + d.StateDir, "--driver-name=" + d.Name}, mockArgs...)
	if d.Mock, err = p.c.StartProcess(d.procName("mock-controller"), d.mockBin, args...); err != nil {
		return err
	}
	kubeconfig, err := p.c.ServiceAccountKubeconfig(ctx, "default", "csi-fence-attacher")
	if err != nil {
		return err
	}
	d.attacherArgs = func(addr string) []string {
		return append([]string{"--csi-address=" + d.sock, "--kubeconfig=" + kubeconfig, "--v=5",
			"--leader-election", "--leader-election-namespace=default", "--http-endpoint=" + addr,
			"--timeout=5s", "--retry-interval-start=200ms", "--retry-interval-max=5s", "--reconcile-sync=10s",
			"--feature-gates=NonGracefulFailover=true"}, attacherArgs...)
	}
	return d.StartAttacher(ctx)
}

// procName is the name of one of the driver's processes (and log files):
// the first driver's keep their plain names.
func (d *Driver) procName(base string) string {
	if d.suffix == "" {
		return base
	}
	return base + "-" + d.suffix
}

// StartAttacher starts csi-fence-attacher (controller role) with the flags
// StartProduct gave it, e.g. after KillAttacher. Its leader-election Lease
// may still be held by the killed one: it acts once it has taken it.
func (d *Driver) StartAttacher(ctx context.Context) error {
	return d.startAttacher(ctx)
}

func (d *Driver) startAttacher(ctx context.Context, extra ...string) error {
	var err error
	d.Attacher, d.AttacherHTTP, err = d.c.startServer(ctx, d.procName("csi-fence-attacher"), d.fenceBin, "/metrics", 60*time.Second,
		func(addr string) []string { return append(d.attacherArgs(addr), extra...) })
	return err
}

// StartStandbyAttacher starts a second replica of csi-fence-attacher
// (controller role) with StartProduct's flags: it waits for the leader's
// Lease, as the new pod of a rolling update does.
//
// Like a pod, it runs in a UTS namespace of its own with a hostname of its
// own, its process name (proc.Name), new on each call: leader election
// (csi-lib-utils) tells replicas apart by hostname, and two processes of one
// host would both believe they hold the Lease. A standby started earlier may
// lead by now (a test or trial that terminated the leader before). extra
// flags come after StartProduct's (the last value of a flag wins).
func (d *Driver) StartStandbyAttacher(ctx context.Context, extra ...string) (proc *Process, httpAddr string, err error) {
	d.standbys++
	name := d.procName("csi-fence-attacher-standby")
	if d.standbys > 1 {
		name += "-" + strconv.Itoa(d.standbys)
	}
	return d.c.startServer(ctx, name, "unshare", "/metrics", 60*time.Second, func(addr string) []string {
		return slices.Concat([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, name, d.fenceBin}, d.attacherArgs(addr), extra)
	})
}

// Leading reports whether the csi-fence-attacher serving metrics at
// httpAddr says it holds its leader-election Lease.
func Leading(ctx context.Context, httpAddr string) (bool, error) {
	v, err := MetricSum(ctx, httpAddr, "leader_election_master_status", nil)
	return v > 0, err
}

// MetricSum returns the sum of the samples of the metric name whose labels
// include labels (nil: all), as the process serving metrics at httpAddr
// exposes them now (0 when there is none).
func MetricSum(ctx context.Context, httpAddr, name string, labels map[string]string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		// The text format: name{l1="v1",l2="v2"} value, or name value.
		series, value, ok := strings.Cut(line, " ")
		metric, rest, _ := strings.Cut(series, "{")
		if !ok || metric != name {
			continue
		}
		matches := true
		for k, v := range labels {
			if !strings.Contains(","+rest, ","+k+"="+strconv.Quote(v)) {
				matches = false
			}
		}
		if !matches {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		sum += f
	}
	return sum, nil
}

// RestartAttacher kills csi-fence-attacher (controller role) and starts it
// again with extra flags after StartProduct's (the last value of a flag
// wins); none restores StartProduct's flags.
func (d *Driver) RestartAttacher(ctx context.Context, extra ...string) error {
	d.KillAttacher()
	return d.startAttacher(ctx, extra...)
}

// KillAttacher kills csi-fence-attacher (controller role) with SIGKILL: it
// writes nothing more, releases nothing, wherever it is.
func (d *Driver) KillAttacher() {
	if d.Attacher == nil { // its last start failed: nothing runs
		return
	}
	d.Attacher.Kill()
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

// StartNode starts what runs on node for the first driver and for each
// of more: its mock node plugin, its simulated kubelet and
// csi-fence-attacher in the node role.
func (p *Product) StartNode(ctx context.Context, node string, more ...*Driver) (*NodeInstance, error) {
	dir := filepath.Join(p.c.WorkDir, "nodes", node)
	n := &NodeInstance{Name: node, KubeletDir: filepath.Join(dir, "kubelet")}
	for _, d := range []string{n.KubeletDir + "/pods", n.KubeletDir + "/plugins"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range append([]*Driver{p.Driver}, more...) {
		// The array learns its nodes as a real array learns its hosts' initiators.
		if err := d.Array.RegisterNode(node, 0); err != nil {
			return nil, err
		}
		n.Plugins = append(n.Plugins, &NodePlugin{Driver: d, sock: filepath.Join(dir, d.procName("csi")+".sock"), bmcCfg: p.PowerSwitches[node+"/"+d.Name]})
	}
	n.NodePlugin = n.Plugins[0]
	p.Nodes[node] = n
	return n, p.PowerOn(ctx, node)
}

// PowerOn (re)starts everything of a node that StartNode started.
func (p *Product) PowerOn(ctx context.Context, node string) error {
	n := p.Nodes[node]
	// Node agents authenticate as a DaemonSet pod's projected token does:
	// bound to a pod on the node, which deploy/'s admission policy checks.
	kubeconfig, err := p.c.NodeBoundKubeconfig(ctx, "default", "csi-fence-attacher-node", node)
	if err != nil {
		return err
	}
	for _, pl := range n.Plugins {
		if err := pl.powerOn(ctx, n, kubeconfig); err != nil {
			return err
		}
	}
	return nil
}

// Socket is the node plugin's CSI socket, for a node agent of a test's own.
func (pl *NodePlugin) Socket() string { return pl.sock }

// powerOn starts the driver's plugin, kubelet and node agent on node n;
// the node agent authenticates with kubeconfig.
func (pl *NodePlugin) powerOn(ctx context.Context, n *NodeInstance, kubeconfig string) error {
	d, c := pl.Driver, pl.Driver.c
	nodeID := n.Name
	if pl.NodeID != "" {
		nodeID = pl.NodeID
	}
	args := func(addr string) []string {
		return append([]string{"--role=node", "--node-id=" + nodeID, "--csi-address=unix://" + pl.sock, "--state-dir=" + d.StateDir,
			"--driver-name=" + d.Name, "--http-endpoint=" + addr}, d.mockArgs...)
	}
	var err error
	if pl.bmcCfg != nil {
		err = pl.powerOnByBMC(ctx, args)
	} else {
		pl.Process, pl.HTTP, err = c.startServer(ctx, d.procName("mock-node-"+n.Name), d.mockBin, "/metrics", 30*time.Second, args)
	}
	if err != nil {
		return err
	}
	if pl.conn, err = grpc.NewClient("unix://"+pl.sock, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return err
	}
	// One simulated kubelet per driver: each writes only its own driver's
	// entries of the node's status.volumesInUse.
	if pl.kubelet, err = kubeletsim.New(kubeletsim.Options{
		Client: c.Client, NodeName: n.Name, DriverName: d.Name, KubeletDir: n.KubeletDir, Conn: pl.conn,
		Period: 200 * time.Millisecond, ReportVolumesInUse: true, Informers: c.KubeletInformers(),
	}); err != nil {
		return err
	}
	c.StartKubeletInformers()
	// The simulated kubelet runs in this process; its log goes to the
	// node's file beside the others, not to the test's output.
	kubeletLog, err := os.OpenFile(filepath.Join(c.WorkDir, "logs", d.procName("kubelet-"+n.Name)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(kubeletLog), textlogger.Verbosity(4)))
	kctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	pl.kubeletCancel = func() { cancel(); kubeletLog.Close() }
	go func() { _ = pl.kubelet.Run(kctx) }()

	pl.Agent, pl.AgentHTTP, err = c.startServer(ctx, d.procName("node-agent-"+n.Name), d.fenceBin, "/metrics", 30*time.Second,
		func(addr string) []string {
			return []string{"--role=node", "--node-name=" + n.Name, "--kubelet-dir=" + n.KubeletDir, "--csi-address=" + pl.sock,
				"--kubeconfig=" + kubeconfig, "--http-endpoint=" + addr, "--v=4",
				"--retry-interval-start=200ms", "--retry-interval-max=5s", "--timeout=5s"}
		})
	return err
}

// stop ends, before the cluster stops its processes, what of the product
// the cluster's process list does not hold: every node's simulated kubelets
// (their informers stopped and waited for) and gRPC connections, and the
// BMCs with their machines.
func (p *Product) stop() {
	for _, n := range p.Nodes {
		for _, pl := range n.Plugins {
			pl.stop()
			if pl.BMC != nil {
				pl.BMC.Stop()
			}
		}
	}
}

// RemoveNode ends everything StartNode started on node, its BMCs
// included, and forgets the node; the Node object is the caller's. A run of
// many scenarios on one cluster (fence-trials) removes each finished one's
// nodes, or it carries every node's plugin and node agent to its end.
func (p *Product) RemoveNode(node string) {
	n := p.Nodes[node]
	if n == nil {
		return
	}
	n.PowerOff()
	for _, pl := range n.Plugins {
		if pl.BMC != nil {
			pl.BMC.Stop()
		}
	}
	delete(p.Nodes, node)
}

// PowerOff cuts the node's power: every driver's kubelet, node agent and
// plugin stop at once and leave everything on disk as it was.
func (n *NodeInstance) PowerOff() {
	for _, pl := range n.Plugins {
		pl.stop()
		if pl.Process != nil {
			pl.Process.Kill()
		}
	}
}

// powerOnByBMC starts the plugin as the machine of its BMC, the first time
// with the BMC itself (the machine starts powered on); later the machine is
// up once someone powered it on through the BMC, and this waits for it.
func (pl *NodePlugin) powerOnByBMC(ctx context.Context, args func(addr string) []string) error {
	if pl.BMC == nil {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		pl.HTTP = "127.0.0.1:" + strconv.Itoa(ports[0])
		cfg := *pl.bmcCfg
		// The BMC's power off sends its machine SIGTERM: the loss of the
		// node's power, its mounts and I/O (--sigterm-is-power-loss).
		cfg.Machine = append([]string{pl.Driver.mockBin}, append(args(pl.HTTP), "--sigterm-is-power-loss")...)
		if pl.BMC, err = bmcsim.Start(ctx, cfg); err != nil {
			return err
		}
	}
	if err := waitHTTP(ctx, "http://"+pl.HTTP+"/metrics", nil, 30*time.Second); err != nil {
		return fmt.Errorf("the machine of the BMC on %s:%d (%s): %w; BMC output: %s", pl.BMC.Host, pl.BMC.Port, pl.HTTP, err, pl.BMC.Output())
	}
	return nil
}

// Partition cuts the node off the control plane: its kubelets and node
// agents can no longer act, but its plugins keep serving its workload's I/O.
func (n *NodeInstance) Partition() {
	for _, pl := range n.Plugins {
		pl.stop()
	}
}

// stop stops the plugin's kubelet and node agent at once, leaving its
// plugin running.
func (pl *NodePlugin) stop() {
	if pl.kubelet != nil {
		pl.kubelet.PowerOff()
		pl.kubeletCancel()
		pl.kubelet = nil
	}
	if pl.conn != nil {
		pl.conn.Close()
		pl.conn = nil
	}
	if pl.Agent != nil {
		pl.Agent.Kill()
	}
}

// Write is one write of a workload on this node to volume, through the
// driver's node plugin's data path.
func (pl *NodePlugin) Write(ctx context.Context, volume string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+pl.HTTP+"/write?volume="+volume, nil)
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

// Violations returns the driver's array's safety violations per invariant.
func (d *Driver) Violations() (map[string]int, error) {
	s, err := d.Array.Snapshot()
	if err != nil {
		return nil, err
	}
	return s.CountViolations(), nil
}
