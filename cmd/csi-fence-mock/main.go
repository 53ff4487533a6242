// Command csi-fence-mock is a CSI driver over a simulated storage array that
// implements the fence/force extension and counts every safety violation.
//
//	csi-fence-mock [serve] --role=controller|node --csi-address=... --state-dir=... [flags]
//	csi-fence-mock status --state-dir=...            print the array (violations, volumes) as JSON
//	csi-fence-mock fault --state-dir=... SPEC...     set faults at run time ("Method:code=...,latency=...,prob=...,count=...")
//	csi-fence-mock fault --state-dir=... --clear     remove every fault
//	csi-fence-mock io --state-dir=... --node-id=N --volume=V [--write] [--count=N]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
)

var version = "unknown"

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "status":
		err = statusCmd(args)
	case "fault":
		err = faultCmd(args)
	case "io":
		err = ioCmd(args)
	default:
		err = fmt.Errorf("unknown command %q: want serve, status, fault or io", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "csi-fence-mock:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	klog.InitFlags(fs)
	role := fs.String("role", "controller", "controller or node")
	endpoint := fs.String("csi-address", "unix:///tmp/csi-fence-mock.sock", "CSI endpoint: unix:///path or tcp://host:port")
	stateDir := fs.String("state-dir", "/var/lib/csi-fence-mock", "Directory of the simulated array's state, shared by all instances")
	name := fs.String("driver-name", "fence.csi-fence.io", "CSI driver name")
	nodeID := fs.String("node-id", "", "Node ID (node role)")
	httpEndpoint := fs.String("http-endpoint", "", "Address of the HTTP server for /metrics and, on a node, the data path /write and /read (empty: off)")
	noPublish := fs.Bool("disable-publish", false, "Do not advertise PUBLISH_UNPUBLISH_VOLUME")
	noFence := fs.Bool("disable-fence", false, "Do not advertise UNPUBLISH_FENCE (and ignore fence=true, as a driver without the extension would)")
	noForce := fs.Bool("disable-force", false, "Do not advertise FORCE_UNPUBLISH")
	noStage := fs.Bool("disable-stage", false, "Do not advertise STAGE_UNSTAGE_VOLUME")
	noList := fs.Bool("disable-list-volumes", false, "Do not advertise LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES")
	policy := fs.String("fence-policy", "revoke", "What a fence does while the node shows recent I/O: revoke, refuse (FAILED_PRECONDITION) or unknown (UNAVAILABLE)")
	recent := fs.Duration("recent-io", 2*time.Second, "How recent a write counts as recent I/O for --fence-policy")
	brokenFence := fs.Bool("broken-fence", false, "NEGATIVE CONTROL: report fences as done without revoking access")
	brokenQuarantine := fs.Bool("broken-quarantine", false, "NEGATIVE CONTROL: let publishes through on nodes where the volume is quarantined")
	var faultSpecs multiFlag
	fs.Var(&faultSpecs, "fault", "Fault to inject, repeatable: Method:code=Unavailable,latency=2s,prob=0.5,count=3")
	fs.Parse(args)

	if *role != "controller" && *role != "node" {
		return fmt.Errorf("--role must be controller or node")
	}
	if *role == "node" && *nodeID == "" {
		return fmt.Errorf("--node-id is required for the node role")
	}
	switch array.FencePolicy(*policy) {
	case array.FenceRevoke, array.FenceRefuse, array.FenceUnknown:
	default:
		return fmt.Errorf("--fence-policy must be revoke, refuse or unknown")
	}
	arr, err := array.Open(*stateDir)
	if err != nil {
		return err
	}
	store := faults.NewStore(*stateDir)
	for _, spec := range faultSpecs {
		m, f, err := faults.Parse(spec)
		if err != nil {
			return err
		}
		if err := store.Set(m, f); err != nil {
			return err
		}
	}
	d := driver.New(driver.Config{
		Name: *name, Version: version, NodeID: *nodeID,
		NoPublish: *noPublish, NoFence: *noFence, NoForce: *noForce, NoStage: *noStage, NoListVolumes: *noList,
		Array: array.Options{FencePolicy: array.FencePolicy(*policy), RecentIO: *recent, BrokenFence: *brokenFence, BrokenQuarantine: *brokenQuarantine},
	}, arr)

	network, addr := "unix", strings.TrimPrefix(*endpoint, "unix://")
	if strings.HasPrefix(*endpoint, "tcp://") {
		network, addr = "tcp", strings.TrimPrefix(*endpoint, "tcp://")
	} else if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(store.Interceptor()))
	csi.RegisterIdentityServer(srv, d)
	if *role == "controller" {
		csi.RegisterControllerServer(srv, d)
	} else {
		csi.RegisterNodeServer(srv, d)
	}

	if *httpEndpoint != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newCollector(arr))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if *role == "node" {
			mux.HandleFunc("/write", ioHandler(arr, *nodeID, true))
			mux.HandleFunc("/read", ioHandler(arr, *nodeID, false))
		}
		hl, err := net.Listen("tcp", *httpEndpoint)
		if err != nil {
			return err
		}
		go http.Serve(hl, mux)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); srv.GracefulStop() }()
	klog.InfoS("Serving", "role", *role, "endpoint", *endpoint, "driver", *name, "node", *nodeID, "stateDir", *stateDir)
	return srv.Serve(lis)
}

// ioHandler is the data path of a simulated workload on this node.
func ioHandler(arr *array.Array, node string, write bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vol := r.URL.Query().Get("volume")
		if vol == "" {
			http.Error(w, "volume is required", http.StatusBadRequest)
			return
		}
		var err error
		var data int64
		if write {
			err = arr.Write(vol, node)
		} else {
			data, err = arr.Read(vol, node)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		fmt.Fprintln(w, data)
	}
}

// collector exports the array's counters, read from the shared state at
// scrape time so that every instance reports the same numbers.
type collector struct {
	arr        *array.Array
	violations *prometheus.Desc
	refused    *prometheus.Desc
	writes     *prometheus.Desc
}

func newCollector(arr *array.Array) *collector {
	return &collector{
		arr:        arr,
		violations: prometheus.NewDesc("csi_fence_mock_safety_violations_total", "Safety invariant violations recorded by the simulated array.", []string{"invariant"}, nil),
		refused:    prometheus.NewDesc("csi_fence_mock_refused_unsafe_requests_total", "Unsafe requests the simulated array refused.", []string{"kind"}, nil),
		writes:     prometheus.NewDesc("csi_fence_mock_writes_total", "Writes accepted by the simulated array.", []string{"volume", "node"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.violations
	ch <- c.refused
	ch <- c.writes
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.arr.Snapshot()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.violations, err)
		return
	}
	for inv, n := range s.CountViolations() {
		ch <- prometheus.MustNewConstMetric(c.violations, prometheus.CounterValue, float64(n), inv)
	}
	for kind, n := range s.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), kind)
	}
	for id, v := range s.Volumes {
		for node, n := range v.Writes {
			ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(n), id, node)
		}
	}
}

func statusCmd(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	stateDir := fs.String("state-dir", "/var/lib/csi-fence-mock", "State directory of the array")
	fs.Parse(args)
	arr, err := array.Open(*stateDir)
	if err != nil {
		return err
	}
	s, err := arr.Snapshot()
	if err != nil {
		return err
	}
	out := struct {
		ViolationCounts map[string]int `json:"violationCounts"`
		*array.State
	}{s.CountViolations(), s}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func faultCmd(args []string) error {
	fs := flag.NewFlagSet("fault", flag.ExitOnError)
	stateDir := fs.String("state-dir", "/var/lib/csi-fence-mock", "State directory of the array")
	clear := fs.Bool("clear", false, "Remove every fault")
	fs.Parse(args)
	store := faults.NewStore(*stateDir)
	if *clear {
		return store.Clear()
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("give at least one fault spec, or --clear")
	}
	for _, spec := range fs.Args() {
		m, f, err := faults.Parse(spec)
		if err != nil {
			return err
		}
		if err := store.Set(m, f); err != nil {
			return err
		}
	}
	return nil
}

func ioCmd(args []string) error {
	fs := flag.NewFlagSet("io", flag.ExitOnError)
	stateDir := fs.String("state-dir", "/var/lib/csi-fence-mock", "State directory of the array")
	node := fs.String("node-id", "", "Node doing the I/O")
	vol := fs.String("volume", "", "Volume ID")
	write := fs.Bool("write", false, "Write (default: read)")
	count := fs.Int("count", 1, "Number of operations")
	fs.Parse(args)
	if *node == "" || *vol == "" {
		return fmt.Errorf("--node-id and --volume are required")
	}
	arr, err := array.Open(*stateDir)
	if err != nil {
		return err
	}
	for i := 0; i < *count; i++ {
		if *write {
			err = arr.Write(*vol, *node)
		} else {
			_, err = arr.Read(*vol, *node)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
