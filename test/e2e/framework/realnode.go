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
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Real nodes: a real kubelet and a real containerd per node, on this one
// machine, joined to the cluster's control plane (issue 20, step 1).
//
//	nodes, err := c.StartRealNodes(ctx, 2, framework.RealNodeOptions{})
//	err = c.Node(nodes[0].Name).PowerOff(ctx) // every process of the node dies at once
//
// Each node has
//   - its own network namespace, joined by a veth pair to a bridge on the
//     host (10.213.<n>.1/24, the node 10.213.<n>.<10+i>); the apiserver is
//     reached at the bridge's address through a forwarder to its loopback
//     port, so the control plane keeps listening on 127.0.0.1 only;
//   - its own containerd (root, state, socket, CRI with overlayfs, runc, the
//     local pause image, a bridge CNI network with its own pod subnet);
//   - its own kubelet (root dir, config, a client certificate for
//     system:node:NAME, which NodeRestriction holds to its own node);
//   - its own cgroup (/fence-e2e-<n>/NAME in every v1 hierarchy): the
//     kubelet's cgroupRoot, with kubelet and containerd in its child
//     "daemons"; the shims inherit containerd's cgroup and the containers are
//     in the kubelet's pod cgroups, so the subtree holds every process of the
//     node, which PowerOff freezes and kills.
//
// Only the network namespace is entered (nsenter --net): `ip netns exec`
// would also give each process its own mount namespace and sysfs, hiding
// /sys/fs/cgroup and the kubelet's volume mounts from containerd.

// realNodeBinaries are the files hack/node-binaries.sh provides.
var realNodeBinaries = []string{"kubelet", "containerd", "ctr", "containerd-shim-runc-v2"}

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

// RealNodeOptions tune StartRealNodes.
type RealNodeOptions struct {
	// BinDir holds kubelet, containerd, ctr and containerd-shim-runc-v2;
	// default: $FENCE_NODE_BIN or what hack/node-binaries.sh prints
	// (building them if needed).
	BinDir string
	// Prefix names the nodes Prefix-0, Prefix-1, ... (default "real").
	Prefix string
	// ProductImages imports the product's images (AttacherImage,
	// MockImage, WebhookImage) too, for its shipped manifests.
	ProductImages bool
	// PowerFencingImage imports PowerFencingAttacherImage too (with
	// ProductImages): csi-fence-attacher with fence_ipmilan, from this
	// host's Debian packages (hack/install-fence-agents.sh).
	PowerFencingImage bool
}

// RealNode is one node with a real kubelet and containerd.
type RealNode struct {
	Name    string
	IP      string // in its network namespace, on the bridge's subnet
	PodCIDR string // its CNI bridge network
	Dir     string // its kubelet root, containerd root and state, configs
	// ContainerdSocket is its containerd's gRPC socket (ctr --address).
	ContainerdSocket string
	// Kubeconfig is its kubelet's: system:node:NAME.
	Kubeconfig string

	netns      string
	hostVeth   string
	cgroup     string // the kubelet's cgroupRoot, e.g. /fence-e2e-0/real-0
	shims      string // its shims' socket dir, short: a socket path has at most 107 bytes
	containerd *Process
	kubelet    *Process

	mu          sync.Mutex
	poweredOff  bool
	partitioned bool // by Partition, until Heal
}

// realNet is the host side of the real nodes of one cluster.
type realNet struct {
	index   int
	bridge  string
	hostIP  string
	binDir  string
	images  []Image
	forward *forwarder
	nodes   []*RealNode
	// sysctls are the host's values of the kernel tunables a kubelet
	// sets at start, restored by Stop.
	sysctls map[string]string
	// hierarchies are the mount points of the cgroup v1 hierarchies,
	// freezer the freezer controller's.
	hierarchies []string
	freezer     string
}

// MissingKernelFeatureError says that this host's kernel lacks what real
// nodes need; a test may skip on it (errors.As), unlike on any other error.
type MissingKernelFeatureError struct {
	Features []string
}

func (e *MissingKernelFeatureError) Error() string {
	return "this kernel lacks what real nodes need: " + strings.Join(e.Features, "; ")
}

// NodeBinaries returns the directory of the real nodes' binaries, building
// them (minutes, once) when they are not cached yet.
func NodeBinaries(ctx context.Context) (string, error) {
	if d := os.Getenv("FENCE_NODE_BIN"); d != "" {
		return d, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(), "hack", "node-binaries.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the real nodes' binaries (hack/node-binaries.sh): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// CheckRealNodeHost reports what this host lacks for real nodes: a
// *MissingKernelFeatureError for kernel features (network namespaces,
// veth, bridges, overlayfs, cgroup v1 hierarchies with the freezer and pids
// controllers), a plain error for missing programs (hack/install-node-deps.sh
// installs them) or a missing privilege.
func CheckRealNodeHost() error {
	if os.Geteuid() != 0 {
		return errors.New("real nodes need root (network namespaces, cgroups, mounts)")
	}
	_, netnsErr := os.Stat("/proc/self/ns/net")
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	hier, err := cgroupV1Hierarchies()
	if err != nil {
		return err
	}
	if missing := missingKernelFeatures(netnsErr, string(fs), hier); len(missing) > 0 {
		return &MissingKernelFeatureError{Features: missing}
	}
	for _, p := range []string{"ip", "nsenter", "runc", "iptables"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err2 := os.Stat("/usr/sbin/" + p); err2 != nil {
				return fmt.Errorf("%s not found (run hack/install-node-deps.sh): %w", p, err)
			}
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			return fmt.Errorf("CNI plugin %s missing (run hack/install-node-deps.sh): %w", p, err)
		}
	}
	return nil
}

// missingKernelFeatures names what real nodes need and this kernel lacks,
// from the stat of /proc/self/ns/net, /proc/filesystems and the mounted v1
// cgroup hierarchies. (veth and bridge devices are found missing when the
// first is made.)
func missingKernelFeatures(netnsErr error, procFilesystems string, hier map[string]string) []string {
	var missing []string
	if netnsErr != nil {
		missing = append(missing, "network namespaces (CONFIG_NET_NS): /proc/self/ns/net: "+netnsErr.Error())
	}
	if !hasFilesystem(procFilesystems, "overlay") {
		missing = append(missing, "overlayfs (CONFIG_OVERLAY_FS; try modprobe overlay): not in /proc/filesystems")
	}
	for _, ctl := range []string{"pids", "freezer", "memory", "cpu", "cpuset"} {
		if _, ok := hier[ctl]; !ok {
			missing = append(missing, "cgroup v1 controller "+ctl+" (no v1 hierarchy has it mounted: the real nodes run the kubelet with cgroupfs on cgroup v1, and PowerOff freezes and kills through the v1 freezer and pids trees)")
		}
	}
	return missing
}

func hasFilesystem(procFilesystems, name string) bool {
	for _, l := range strings.Split(procFilesystems, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// cgroupV1Hierarchies maps each v1 controller (and named hierarchy, as
// "name=systemd") to the mount point of its hierarchy.
func cgroupV1Hierarchies() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseCgroupV1Hierarchies(string(b)), nil
}

func parseCgroupV1Hierarchies(mountinfo string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(mountinfo, "\n") {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 || sf[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(sf[2], ",") {
			switch opt {
			case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec":
				continue
			}
			if _, seen := out[opt]; !seen {
				out[opt] = pf[4]
			}
		}
	}
	return out
}

// StartRealNodes starts n real nodes and waits until each has registered
// and is Ready. It returns a *MissingKernelFeatureError when the kernel
// lacks what they need (checked first, nothing started). The nodes are
// stopped and everything they made removed with the cluster (Stop).
func (c *Cluster) StartRealNodes(ctx context.Context, n int, opts RealNodeOptions) (nodes []*RealNode, err error) {
	begin := time.Now()
	if err := CheckRealNodeHost(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "real"
	}
	c.mu.Lock()
	started := c.realNet != nil
	c.mu.Unlock()
	if started {
		return nil, errors.New("StartRealNodes was already called on this cluster")
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = NodeBinaries(ctx); err != nil {
			return nil, err
		}
	}
	for _, b := range realNodeBinaries {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("real node binaries in %s are incomplete (run hack/node-binaries.sh, or fix FENCE_NODE_BIN): %w", opts.BinDir, err)
		}
	}
	images, err := BuildImages(ctx, c.log, filepath.Join(c.WorkDir, "images"), ImageOptions{Product: opts.ProductImages, PowerFencing: opts.PowerFencingImage})
	if err != nil {
		return nil, err
	}
	hier, err := cgroupV1Hierarchies()
	if err != nil {
		return nil, err
	}
	rn := &realNet{binDir: opts.BinDir, images: images, freezer: hier["freezer"], sysctls: readSysctls(kubeletSysctls)}
	seen := map[string]bool{}
	for _, mnt := range hier {
		if !seen[mnt] {
			seen[mnt] = true
			rn.hierarchies = append(rn.hierarchies, mnt)
		}
	}
	c.mu.Lock()
	c.realNet = rn
	c.mu.Unlock()
	defer func() {
		if err != nil {
			c.stopRealNodes()
		}
	}()
	if err := c.createBridge(ctx, rn); err != nil {
		return nil, err
	}
	if err := makeSharedMount(c.NodesDir()); err != nil {
		return nil, err
	}
	if c.serviceNetwork {
		if err := c.startClusterDNS(rn.hostIP); err != nil {
			return nil, err
		}
	}
	c.log.Logf("real nodes: bridge %s %s/24, apiserver forwarded to %s (%.1fs)", rn.bridge, rn.hostIP, rn.forward.addr, time.Since(begin).Seconds())
	for i := 0; i < n; i++ {
		node, err := c.startRealNode(ctx, rn, i, fmt.Sprintf("%s-%d", opts.Prefix, i))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	for _, node := range nodes {
		if err := c.waitRealNodeReady(ctx, node, 120*time.Second); err != nil {
			return nil, err
		}
	}
	c.log.Logf("real nodes Ready in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(nodeNames(nodes), ", "))
	return nodes, nil
}

// NodesDir holds every real node's directory (RealNode.Dir), its kubelet's
// root dir among them. It is a shared mount (its own peer group), as a
// systemd host's / is: a DaemonSet's Bidirectional hostPath below it then
// propagates a CSI node plugin's mounts to the host, where the kubelet and
// containerd see them (containerd refuses Bidirectional on a private mount).
func (c *Cluster) NodesDir() string { return filepath.Join(c.WorkDir, "nodes") }

// makeSharedMount bind-mounts dir on itself and makes it shared,
// recursively (mount --bind dir dir; mount --make-rshared dir). unmountUnder
// and reclaim remove it with what is under it.
func makeSharedMount(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// kubeletSysctls are the host-wide kernel tunables a kubelet sets when it
// starts (without protectKernelDefaults, which would instead refuse to run
// on a host that differs): vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1 and so on. Stop puts back what they were.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func readSysctls(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if b, err := os.ReadFile("/proc/sys/" + n); err == nil {
			out[n] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func nodeNames(nodes []*RealNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// ipCmd runs ip with args and returns its combined output in the error.
func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createBridge claims the first free bridge fence-br<n> (creating it is the
// claim: another run holding it makes `ip link add` fail with "exists") and
// forwards the apiserver to its address.
func (c *Cluster) createBridge(ctx context.Context, rn *realNet) error {
	const maxBridges = 32
	c.reclaimStale(ctx, rn)
	for i := 0; i < maxBridges; i++ {
		name := fmt.Sprintf("fence-br%d", i)
		err := ipCmd(ctx, "link", "add", name, "type", "bridge")
		if err != nil && strings.Contains(err.Error(), "exists") {
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "Unknown device type") || strings.Contains(err.Error(), "not supported") {
				return &MissingKernelFeatureError{Features: []string{"bridge devices (CONFIG_BRIDGE): " + err.Error()}}
			}
			return err
		}
		rn.index, rn.bridge, rn.hostIP = i, name, fmt.Sprintf("10.213.%d.1", i)
		break
	}
	if rn.bridge == "" {
		return fmt.Errorf("no free bridge among fence-br0..%d (left over from killed runs? ip link del them)", maxBridges-1)
	}
	if err := c.writeOwner(rn); err != nil {
		return err
	}
	if err := ipCmd(ctx, "addr", "add", rn.hostIP+"/24", "dev", rn.bridge); err != nil {
		return err
	}
	if err := ipCmd(ctx, "link", "set", rn.bridge, "up"); err != nil {
		return err
	}
	u, err := url.Parse(c.apiURL)
	if err != nil {
		return err
	}
	rn.forward, err = newForwarder(net.JoinHostPort(rn.hostIP, u.Port()), u.Host)
	return err
}

// startRealNode makes node i's network namespace, cgroup and directories
// and starts its containerd, imports the images, then starts its kubelet.
func (c *Cluster) startRealNode(ctx context.Context, rn *realNet, i int, name string) (*RealNode, error) {
	begin := time.Now()
	node, err := c.newRealNode(rn, i, name)
	if err != nil {
		return nil, err
	}
	procs, err := c.startRuntime(ctx, rn, node)
	if err != nil {
		return nil, err
	}
	if err := c.writeKubeletFiles(node); err != nil {
		return nil, err
	}
	if err := c.startKubelet(ctx, rn, node, procs); err != nil {
		return nil, err
	}
	c.log.Logf("real node %s: containerd and kubelet up at %s (%.1fs; logs %s, %s)", name, node.IP,
		time.Since(begin).Seconds(), node.containerd.LogPath, node.kubelet.LogPath)
	return node, nil
}

// startKubelet starts the node's kubelet in its daemons' cgroup (procs) and
// waits until it answers on its healthz port.
func (c *Cluster) startKubelet(ctx context.Context, rn *realNet, node *RealNode, procs []string) error {
	kubelet, err := c.startInNode(node, procs, "kubelet", filepath.Join(rn.binDir, "kubelet"),
		"--config="+filepath.Join(node.Dir, "kubelet.yaml"),
		"--kubeconfig="+node.Kubeconfig,
		"--root-dir="+node.KubeletDir(),
		"--hostname-override="+node.Name, "--node-ip="+node.IP,
		"--node-labels="+RealNodeLabel+"=true", "--v=2")
	if err != nil {
		return err
	}
	node.mu.Lock()
	node.kubelet = kubelet
	node.mu.Unlock()
	healthz := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(node.IP, "10248"))
	if err := waitHTTPOf(ctx, kubelet, healthz, nil, 60*time.Second); err != nil {
		return fmt.Errorf("kubelet of %s (log %s): %w", node.Name, kubelet.LogPath, err)
	}
	return nil
}

func (n *RealNode) shimDir() string { return n.shims }

// KubeletLog is the path of the node's kubelet's log (--v=2).
func (n *RealNode) KubeletLog() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet == nil {
		return ""
	}
	return n.kubelet.LogPath
}

// KubeletDir is the node's kubelet root directory (--root-dir).
func (n *RealNode) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// newRealNode names node i and makes its directories.
func (c *Cluster) newRealNode(rn *realNet, i int, name string) (*RealNode, error) {
	node := &RealNode{
		Name:     name,
		IP:       fmt.Sprintf("10.213.%d.%d", rn.index, 10+i),
		PodCIDR:  fmt.Sprintf("10.214.%d.0/24", i),
		Dir:      filepath.Join(c.NodesDir(), name),
		netns:    fmt.Sprintf("fence-%d-%s", rn.index, name),
		hostVeth: fmt.Sprintf("fv%d-%d", rn.index, i),
		cgroup:   fmt.Sprintf("/fence-e2e-%d/%s", rn.index, name),
		shims:    fmt.Sprintf("/run/fence-e2e-%d/%s/s", rn.index, name),
	}
	c.mu.Lock()
	rn.nodes = append(rn.nodes, node)
	c.mu.Unlock()
	node.ContainerdSocket = filepath.Join(node.Dir, "containerd.sock")
	node.Kubeconfig = filepath.Join(node.Dir, "kubelet.kubeconfig")
	for _, d := range []string{"kubelet", "containerd/root", "containerd/state", "cni", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(node.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(node.shims, 0o700); err != nil {
		return nil, err
	}
	return node, nil
}

// startRuntime makes the node's network namespace and cgroup, starts its
// containerd and imports the images into it; it returns the cgroup.procs
// files of the node's daemons' cgroup.
func (c *Cluster) startRuntime(ctx context.Context, rn *realNet, node *RealNode) ([]string, error) {
	if err := node.createNetwork(ctx, rn); err != nil {
		return nil, err
	}
	if err := c.routeKubernetesService(ctx, rn, node); err != nil {
		return nil, err
	}
	if err := node.writeContainerdConfig(); err != nil {
		return nil, err
	}
	procs, err := c.startContainerd(ctx, rn, node)
	if err != nil {
		return nil, err
	}
	for _, im := range rn.images {
		if err := node.ctr(ctx, rn, "-n", "k8s.io", "images", "import", "--local", im.Tarball); err != nil {
			return nil, fmt.Errorf("importing %s into %s's containerd: %w", im.Name, node.Name, err)
		}
	}
	return procs, nil
}

// startContainerd makes the node's daemons' cgroup, starts its containerd
// there and waits until it answers; it returns the cgroup.procs files of
// that cgroup.
func (c *Cluster) startContainerd(ctx context.Context, rn *realNet, node *RealNode) ([]string, error) {
	procs, err := rn.createCgroup(node.cgroup + "/daemons")
	if err != nil {
		return nil, err
	}
	containerd, err := c.startInNode(node, procs, "containerd", filepath.Join(rn.binDir, "containerd"),
		"--config", filepath.Join(node.Dir, "containerd.toml"))
	if err != nil {
		return nil, err
	}
	node.mu.Lock()
	node.containerd = containerd
	node.mu.Unlock()
	if err := node.waitContainerd(ctx, rn, 60*time.Second); err != nil {
		return nil, fmt.Errorf("containerd of %s (log %s): %w", node.Name, containerd.LogPath, err)
	}
	return procs, nil
}

// RealNodeLabel marks the real nodes (their kubelets set it; KWOK ignores
// nodes without its own label).
const RealNodeLabel = "csi-fence.io/real-node"

// createNetwork makes the node's network namespace with eth0 (one end of a
// veth pair whose other end is on the bridge) and lo up.
func (n *RealNode) createNetwork(ctx context.Context, rn *realNet) error {
	if err := ipCmd(ctx, "netns", "add", n.netns); err != nil {
		return err
	}
	peer := n.hostVeth + "p"
	if err := ipCmd(ctx, "link", "add", n.hostVeth, "type", "veth", "peer", "name", peer, "netns", n.netns); err != nil {
		if strings.Contains(err.Error(), "Unknown device type") || strings.Contains(err.Error(), "not supported") {
			return &MissingKernelFeatureError{Features: []string{"veth devices (CONFIG_VETH): " + err.Error()}}
		}
		return err
	}
	for _, args := range [][]string{
		{"link", "set", n.hostVeth, "master", rn.bridge, "up"},
		{"-n", n.netns, "link", "set", peer, "name", "eth0"},
		{"-n", n.netns, "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// routeKubernetesService does in the node's network namespace what
// kube-proxy would do for the one Service pods need, "kubernetes" (no
// kube-proxy runs here): connections to its cluster IP, from the node's
// pods and from the node itself (hostNetwork), go to the apiserver's
// forwarder on the bridge, and the pods' traffic leaving the node is
// masqueraded as the node's address, which the host can answer. In-cluster
// clients (rest.InClusterConfig: KUBERNETES_SERVICE_HOST, the
// ServiceAccount's token and kube-root-ca.crt) then work unchanged: the
// apiserver's certificate names that IP.
func (c *Cluster) routeKubernetesService(ctx context.Context, rn *realNet, n *RealNode) error {
	svc, err := c.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1GetOptions)
	if err != nil {
		return fmt.Errorf("the kubernetes Service, routed to the apiserver on real nodes: %w", err)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.ClusterIP == "" {
		return fmt.Errorf("the kubernetes Service has no cluster IP or port: %v", svc.Spec)
	}
	dest := fmt.Sprintf("%s/32", svc.Spec.ClusterIP)
	port := fmt.Sprint(svc.Spec.Ports[0].Port)
	inNode := func(args ...string) error {
		args = append([]string{"--net=/run/netns/" + n.netns, "--"}, args...)
		out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("in %s's network namespace, %s: %w: %s", n.Name, strings.Join(args[2:], " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for _, rule := range [][]string{
		{"PREROUTING", "-d", dest, "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", rn.forward.addr},
		{"OUTPUT", "-d", dest, "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", rn.forward.addr},
		{"POSTROUTING", "-s", n.PodCIDR, "!", "-d", n.PodCIDR, "-j", "MASQUERADE"},
	} {
		if err := inNode(append([]string{"iptables", "-w", "-t", "nat", "-A"}, rule...)...); err != nil {
			return err
		}
	}
	return inNode("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
}

// createCgroup makes path in every v1 hierarchy (with cpuset's cpus and mems
// copied from the parent, which a new cpuset lacks) and returns the
// cgroup.procs files to join.
func (rn *realNet) createCgroup(path string) ([]string, error) {
	var procs []string
	for _, h := range rn.hierarchies {
		parts := strings.Split(strings.Trim(path, "/"), "/")
		dir := h
		for _, p := range parts {
			parent := dir
			dir = filepath.Join(dir, p)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup %s: %w", dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) != "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return nil, fmt.Errorf("cgroup %s/%s: %w", dir, f, err)
				}
			}
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	return procs, nil
}

// startInNode starts bin in the node's cgroup and network namespace: a
// shell joins the cgroup, then execs nsenter, which execs bin, all one
// process (one PID, its own process group), so nothing of it runs outside
// the cgroup even for an instant.
func (c *Cluster) startInNode(node *RealNode, cgroupProcs []string, what, bin string, args ...string) (*Process, error) {
	const join = `for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 1; shift; done; shift; exec "$@"`
	sh := []string{"-c", join, "sh"}
	sh = append(sh, cgroupProcs...)
	sh = append(sh, "--", "env", "PATH="+c.realNet.binDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"nsenter", "--net=/run/netns/"+node.netns, "--", bin)
	sh = append(sh, args...)
	return c.run(filepath.Join(c.WorkDir, "logs"), node.Name+"-"+what, "/bin/sh", sh...)
}

func (n *RealNode) ctr(ctx context.Context, rn *realNet, args ...string) error {
	args = append([]string{"--address", n.ContainerdSocket}, args...)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(rn.binDir, "ctr"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitContainerd waits until containerd answers on its socket.
func (n *RealNode) waitContainerd(ctx context.Context, rn *realNet, timeout time.Duration) error {
	return waitFor(ctx, timeout, 200*time.Millisecond, "containerd of "+n.Name, func(ctx context.Context) (bool, error) {
		if n.containerd.Exited() {
			return false, n.containerd.exitError()
		}
		if _, err := os.Stat(n.ContainerdSocket); err != nil {
			return false, err
		}
		return n.ctr(ctx, rn, "version") == nil, nil
	})
}

func (n *RealNode) writeContainerdConfig() error {
	d := func(p string) string { return filepath.Join(n.Dir, p) }
	// containerd 2.4's own format (`containerd config default` prints
	// version 4); everything that defaults to a host-wide path is the
	// node's own, so that nodes share nothing (and a cleanup finds it all).
	// restrict_oom_score_adj: a sandbox's -998 needs CAP_SYS_RESOURCE,
	// which root may lack (this VM's does), and then runc cannot start
	// any pod ("failed to update /proc/self/oom_score_adj: Permission
	// denied"); restricted, no container scores below containerd.
	cfg := fmt.Sprintf(`version = 4
root = %q
state = %q
temp = %q
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri']

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q

  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        disable_pause_image_pull = true
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '/usr/sbin/runc'
          Root = %q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'

  [plugins.'io.containerd.internal.v1.opt']
    path = %q

  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = %q

  [plugins.'io.containerd.server.v1.grpc']
    address = %q

  [plugins.'io.containerd.server.v1.ttrpc']
    address = %q

  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %q
`, d("containerd/root"), d("containerd/state"), d("containerd/tmp"), PauseImage, d("containerd/runc"),
		cniBinDir, d("cni"), d("containerd/opt"), d("containerd/verifiers"), n.ContainerdSocket, n.ContainerdSocket+".ttrpc", n.shims)
	if err := os.MkdirAll(d("containerd/tmp"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(d("containerd.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	// The node's pod network: a bridge in its namespace, host-local
	// addresses from its own subnet, state in its own dir.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "fence-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    }
  ]
}
`, n.PodCIDR, d("cni-ipam"))
	return os.WriteFile(d("cni/10-fence-e2e.conflist"), []byte(cni), 0o644)
}

// writeKubeletFiles writes the node's client certificate (system:node:NAME
// in system:nodes, what the Node authorizer and NodeRestriction expect), its
// kubeconfig and its KubeletConfiguration.
func (c *Cluster) writeKubeletFiles(n *RealNode) error {
	d := func(p string) string { return filepath.Join(n.Dir, p) }
	cert := "node-" + n.Name
	if err := c.pki.issue(cert, "system:node:"+n.Name, []string{"system:nodes"}, false); err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	// The node reaches the apiserver at the bridge's address; its serving
	// certificate is checked against its name "localhost" (a SAN), which
	// holds whichever bridge a run claimed.
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: "https://" + c.realNet.forward.addr,
		CertificateAuthority: c.pki.path("ca.crt"), TLSServerName: "localhost"}
	cfg.AuthInfos[n.Name] = &clientcmdapi.AuthInfo{ClientCertificate: c.pki.path(cert + ".crt"), ClientKey: c.pki.path(cert + ".key")}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: n.Name}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, n.Kubeconfig); err != nil {
		return err
	}
	if err := os.WriteFile(d("resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	// The lease is renewed every quarter of its duration: 10 s gives 2.5 s,
	// well inside the control plane's 10 s grace period (40 s, the default,
	// would renew every 10 s and flap).
	//
	// The node status is computed every second and sent when it changed
	// (else every 4 s): a kubelet mounts a volume only once a status it
	// sent lists the volume in use, so a replacement pod's volume waits for
	// the next status computed after the pod arrived: up to 10 s with the
	// kubelet's default, which docs/deploying.md advises against for fast
	// failover (docs/benchmarks-and-trials.md, "On real nodes").
	//
	// Disk eviction only when the host's disk is all but full: the nodes
	// share it with everything else the host runs (other test runs, their
	// caches), and the kubelet's default thresholds (imagefs.available 15%,
	// nodefs.available 10%; containerd's root is on the same file system,
	// so the first applies) evicted a test's writer, node plugin and
	// controller pod, over and over, on a 252 GB disk with 39 GB free: a
	// test failing for the host's free space, not for what it tests. The
	// memory threshold is the kubelet's default; setting any threshold
	// drops the defaults of the others.
	//
	// Image garbage collection is off (a high threshold of 100%): the
	// nodes' images are imported from this host's builds and never pulled
	// (imagePullPolicy: Never), so an image the kubelet removed is gone for
	// good. With the host's disk at 91% (other runs beside), the kubelets
	// of a fence-trials run removed the writer's image, and its next writer
	// failed with ErrImageNeverPull.
	kc := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
containerRuntimeEndpoint: %q
imageServiceEndpoint: %q
address: %q
port: 10250
readOnlyPort: 0
healthzBindAddress: %q
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
staticPodPath: ""
podLogsDir: %q
volumePluginDir: %q
resolvConf: %q
nodeLeaseDurationSeconds: 10
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 4s
shutdownGracePeriod: 0s
maxPods: 30
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
`, n.cgroup, "unix://"+n.ContainerdSocket, "unix://"+n.ContainerdSocket, n.IP, n.IP, c.pki.path("ca.crt"),
		d("pod-logs"), d("volume-plugins"), d("resolv.conf"))
	if c.serviceNetwork {
		// The pods' resolver asks the cluster DNS (servicenet.go) on the
		// bridge's host address.
		kc += fmt.Sprintf("clusterDNS: [%q]\nclusterDomain: %q\n", c.realNet.hostIP, ClusterDomain)
	}
	return os.WriteFile(d("kubelet.yaml"), []byte(kc), 0o644)
}

// waitRealNodeReady waits until the node is registered and Ready, giving up
// at once when its kubelet or containerd has ended.
func (c *Cluster) waitRealNodeReady(ctx context.Context, n *RealNode, timeout time.Duration) error {
	return waitFor(ctx, timeout, 250*time.Millisecond, "node "+n.Name+" Ready", func(ctx context.Context) (bool, error) {
		for _, p := range []*Process{n.containerd, n.kubelet} {
			if p.Exited() {
				return false, p.exitError()
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		return NodeReady(node), nil
	})
}
