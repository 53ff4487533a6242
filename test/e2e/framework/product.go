package framework

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
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
	Mock     *Process
	Nodes    map[string]*NodeInstance
}

// NodeInstance is the mock node plugin of one node.
type NodeInstance struct {
	Name    string
	Process *Process
	HTTP    string // data path: http://HTTP/write?volume=V
	args    []string
	bin     string
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
	p := &Product{c: c, BinDir: filepath.Join(c.WorkDir, "bin"), StateDir: filepath.Join(c.WorkDir, "array"), Nodes: map[string]*NodeInstance{}}
	if err := BuildProduct(ctx, p.BinDir); err != nil {
		return nil, err
	}
	for _, f := range []string{"deploy/kubernetes/crd-fencingrequests.yaml", "deploy/kubernetes/rbac-controller.yaml", "deploy/kubernetes/csidriver-example.yaml"} {
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
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	attArgs := append([]string{"--csi-address=" + sock, "--kubeconfig=" + kubeconfig, "--v=5",
		"--leader-election", "--leader-election-namespace=default", "--http-endpoint=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--timeout=5s", "--retry-interval-start=200ms", "--retry-interval-max=5s", "--reconcile-sync=10s"}, opts.AttacherArgs...)
	if p.Attacher, err = c.StartProcess("csi-fence-attacher", filepath.Join(p.BinDir, "csi-fence-attacher"), attArgs...); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), nil, 60*time.Second); err != nil {
		return nil, fmt.Errorf("csi-fence-attacher did not come up (see %s): %w", p.Attacher.LogPath, err)
	}
	return p, nil
}

// StartNode starts the mock node instance of node.
func (p *Product) StartNode(ctx context.Context, node string) (*NodeInstance, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(p.c.WorkDir, "nodes", node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &NodeInstance{Name: node, HTTP: "127.0.0.1:" + strconv.Itoa(ports[0]), bin: filepath.Join(p.BinDir, "csi-fence-mock")}
	n.args = []string{"--role=node", "--node-id=" + node, "--csi-address=unix://" + filepath.Join(dir, "csi.sock"),
		"--state-dir=" + p.StateDir, "--driver-name=" + DriverName, "--http-endpoint=" + n.HTTP}
	if n.Process, err = p.c.StartProcess("mock-node-"+node, n.bin, n.args...); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "http://"+n.HTTP+"/metrics", nil, 30*time.Second); err != nil {
		return nil, err
	}
	p.Nodes[node] = n
	return n, nil
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
