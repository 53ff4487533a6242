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

// Command csi-fence-mock is a CSI driver over a simulated storage array that
// implements the fence/force extension and counts every safety violation.
// See mock-driver/README.md.
//
//	csi-fence-mock [serve] --role=controller|node --csi-address=... --state-dir=... [flags]
//	csi-fence-mock status --state-dir=D [--fail-on-violation]
//	csi-fence-mock fault --state-dir=D SPEC... | --list | --clear
//	csi-fence-mock configure --state-dir=D [--fence-policy=...] [--refuse-unsafe=...] [--broken-fence=...] ... | --reset
//	csi-fence-mock io --state-dir=D (--write|--read) [--count=N] [--interval=100ms [--duration=D]] NODE VOLUME [PATH]
//	csi-fence-mock version
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/mock-driver/server"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

// Exit codes besides 0 (success) and 1 (error).
const (
	exitUsage     = 2 // bad flags or arguments
	exitRefused   = 3 // io: the array refused an operation
	exitViolation = 4 // status --fail-on-violation: violations recorded
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if len(args) == 1 && cmd == "serve" && (args[0] == "--version" || args[0] == "-version") {
		cmd, args = "version", nil
	}
	commands := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"serve": serve, "status": statusCmd, "fault": faultCmd, "configure": configureCmd, "io": ioCmd,
		"version": func(context.Context, []string, io.Writer, io.Writer) error {
			fmt.Fprintln(stdout, "csi-fence-mock", version.String())
			return nil
		},
	}
	fn, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "csi-fence-mock: unknown command %q: want serve, status, fault, configure, io or version\n", cmd)
		return exitUsage
	}
	err := fn(ctx, args, stdout, stderr)
	var ce codeError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ce):
		if ce.msg != "" {
			fmt.Fprintln(stderr, "csi-fence-mock:", ce.msg)
		}
		return ce.code
	}
	fmt.Fprintln(stderr, "csi-fence-mock:", err)
	return 1
}

// codeError ends a command with a given exit code.
type codeError struct {
	code int
	msg  string
}

func (e codeError) Error() string { return e.msg }

func usageErr(format string, args ...interface{}) error {
	return codeError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return codeError{code: exitUsage}
	}
	return nil
}

// parseInterleaved parses flags given before, between or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

const defaultStateDir = "/var/lib/csi-fence-mock"

// refuseUnsafeUsage documents the array's two modes.
const refuseUnsafeUsage = "Strict mode: refuse (FAILED_PRECONDITION) a publish to a node where the volume is quarantined (S2) and a publish of a single-node volume still published to another node (S1), as a strict driver does; status counts them under refusedUnsafe. " +
	"Default (witness mode): carry them out and count them as S1/S2 violations, so that a CO's own guards are what is tested. Use it to run csi-fence-sanity against the mock."

func serve(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	klog.InitFlags(fs)
	var (
		opts  server.Options
		cfg   = &opts.Driver
		arr   = &cfg.Array
		role  = fs.String("role", "controller", "Instance role: controller, or node (one instance per simulated node)")
		specs multiFlag
	)
	fs.StringVar(&opts.Endpoint, "csi-address", "unix:///tmp/csi-fence-mock.sock", "CSI endpoint: unix:///path, or tcp://host:port")
	fs.StringVar(&opts.StateDir, "state-dir", defaultStateDir, "Directory of the simulated array's state, shared by every instance")
	fs.StringVar(&opts.HTTPEndpoint, "http-endpoint", "", "host:port of the HTTP server: /metrics, /status, /healthz, and on a node the data path /write, /read, /writer (empty: off)")
	fs.StringVar(&cfg.Name, "driver-name", driver.DefaultName, "CSI driver name")
	fs.StringVar(&cfg.NodeID, "node-id", "", "Node ID (required for --role=node)")
	fs.Int64Var(&cfg.MaxVolumesPerNode, "max-volumes-per-node", 0, "Volumes this node may have published, reported by NodeGetInfo and enforced by the array (0: no limit)")
	fs.Int64Var(&cfg.Capacity, "capacity", driver.DefaultCapacity, "Total capacity of the array in bytes (GetCapacity)")
	fs.BoolVar(&cfg.NoPublish, "disable-publish", false, "Do not advertise PUBLISH_UNPUBLISH_VOLUME (nor PUBLISH_READONLY, UNPUBLISH_FENCE); node plugins then grant themselves access on NodeStageVolume/NodePublishVolume, until NodeUnpublishVolume/NodeUnstageVolume leave nothing on the node")
	fs.BoolVar(&cfg.NoReadOnly, "disable-readonly", false, "Do not advertise PUBLISH_READONLY")
	fs.BoolVar(&cfg.NoFence, "disable-fence", false, "Do not advertise UNPUBLISH_FENCE, and ignore fence=true as a driver without the extension would")
	fs.BoolVar(&cfg.NoForce, "disable-force", false, "Do not advertise FORCE_UNPUBLISH, and ignore force=true")
	fs.BoolVar(&cfg.NoStage, "disable-stage", false, "Do not advertise STAGE_UNSTAGE_VOLUME")
	fs.BoolVar(&cfg.NoListVolumes, "disable-list-volumes", false, "Do not advertise LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES")
	fs.BoolVar(&cfg.NoExpand, "disable-expand", false, "Do not advertise EXPAND_VOLUME")
	fs.BoolVar(&cfg.NoCapacity, "disable-capacity", false, "Do not advertise GET_CAPACITY")
	dataPath := fs.String("data-path", dataPathNone, "On a node, what a filesystem volume's staging and target paths hold: "+
		"none (a marker file); bind (NodeStageVolume bind-mounts the volume's data directory <state-dir>/data/<volume ID> on the staging path, NodePublishVolume the staging path on the target path; the array does not see the writes); "+
		"fuse (NodeStageVolume mounts a FUSE file system over that directory, served by this process, whose every change asks the array first: EIO once the node is fenced, each accepted write counted; needs /dev/fuse). "+
		"bind and fuse need privileges and mountPropagation Bidirectional on the kubelet's directory")
	bindMounts := fs.Bool("bind-mounts", false, "Same as --data-path=bind")
	fs.BoolVar(&cfg.BlockDevices, "block-devices", false, "With --data-path bind or fuse: a block volume is staged as a filesystem volume is, and published as a loop device over the file "+driver.BlockFileName+" on that path, bind-mounted on the target (a container runtime gives pods devices only); needs the host's /dev")
	fs.BoolVar(&cfg.AnyNode, "any-node", false, "Publish to node IDs that no node instance registered (default: NotFound)")
	policy := fs.String("fence-policy", string(array.FenceRevoke), "What a fence does while the node shows recent I/O: revoke (succeed), refuse (FAILED_PRECONDITION) or unknown (UNAVAILABLE)")
	fs.DurationVar(&arr.RecentIO, "recent-io", array.DefaultRecentIO, "I/O within this window counts as recent for --fence-policy and --plain-unpublish")
	plain := fs.String("plain-unpublish", string(array.PlainUnpublishLinger), "What ControllerUnpublishVolume without fence does to a node still using the volume (staged, published, or recent I/O): linger (its data path stays open until it cleans up or goes quiet, as storage without fencing), revoke (cut off at once, no quarantine) or detach (the volume is taken away as a cloud detach takes a disk: reads and writes through the node's stale mounts fail, and a publish there before the node's plain cleanup counts as S2)")
	detach := fs.String("detach", "", "Play a driver whose owner declares that a plain ControllerUnpublishVolume revokes the node's access (CSIDriver annotation csi-fence.io/unpublish-revokes-access), as a cloud disk driver: "+
		"revokes (true: --plain-unpublish=detach, and with --data-path=fuse reads fail too) or lies (false: --plain-unpublish=linger, the node keeps writing). Either implies --disable-fence and --disable-force. Empty: off")
	fs.BoolVar(&arr.RefuseUnsafe, "refuse-unsafe", false, refuseUnsafeUsage)
	fs.BoolVar(&arr.BrokenFence, "broken-fence", false, "NEGATIVE CONTROL: report fences as done without cutting the node's data path")
	fs.BoolVar(&arr.BrokenQuarantine, "broken-quarantine", false, "NEGATIVE CONTROL: with --refuse-unsafe, let publishes through on nodes where the volume is quarantined (recorded as S2); without it they go through anyway")
	oos := fs.Bool("fence-on-out-of-service", false, "Fence on KEP-2268's out-of-service taint, as ceph-csi's --enable-fencing: ControllerUnpublishVolume from a node that carries node.kubernetes.io/out-of-service is a fence (the node ID must be the Node's name; needs --kubeconfig or in-cluster credentials)")
	powerLoss := fs.Bool("sigterm-is-power-loss", false, "On a node: SIGTERM is the loss of the node's power (a BMC's power off): the array drops what the node had staged or published and closes its lingering data paths, as a powered-off host's mounts and I/O end")
	kubeconfig := fs.String("kubeconfig", "", "With --fence-on-out-of-service: the kubeconfig to read Nodes with (empty: in-cluster)")
	fs.Var(&specs, "fault", "Fault to inject, repeatable: Method:code=Unavailable,latency=2s,prob=0.5,count=3[,node=N][,lie][,answer-delay=D]; written to the shared control file (on a node instance, node= defaults to this node)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("serve takes no arguments, got %q", fs.Args())
	}
	opts.Role = server.Role(*role)
	if *bindMounts {
		if explicit(fs, "data-path") && *dataPath != dataPathBind {
			return usageErr("--bind-mounts and --data-path=%s contradict each other", *dataPath)
		}
		*dataPath = dataPathBind
	}
	switch *dataPath {
	case dataPathNone:
	case dataPathBind, dataPathFUSE:
		cfg.MountDataDir = filepath.Join(opts.StateDir, "data")
		cfg.FUSE = *dataPath == dataPathFUSE
	default:
		return usageErr("--data-path must be none, bind or fuse, not %q", *dataPath)
	}
	if cfg.BlockDevices && cfg.MountDataDir == "" {
		return usageErr("--block-devices needs --data-path bind or fuse: the devices are over a file on the volume's data path")
	}
	arr.FencePolicy = array.FencePolicy(*policy)
	arr.PlainUnpublish = array.PlainUnpublishMode(*plain)
	cfg.Detach = driver.DetachMode(*detach)
	if err := cfg.Detach.Validate(); err != nil {
		return usageErr("--detach: %v", err)
	}
	if cfg.Detach != "" && explicit(fs, "plain-unpublish") {
		return usageErr("--detach=%s sets the plain unpublish itself: drop --plain-unpublish", cfg.Detach)
	}
	cfg.Version = version.Version()
	if opts.Role != server.RoleController && opts.Role != server.RoleNode {
		return usageErr("--role must be controller or node, not %q", *role)
	}
	if opts.Role == server.RoleNode && cfg.NodeID == "" {
		return usageErr("--node-id is required for --role=node")
	}
	if err := arr.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if *oos {
		hook, err := outOfServiceReader(*kubeconfig)
		if err != nil {
			return fmt.Errorf("--fence-on-out-of-service: %w", err)
		}
		cfg.OutOfService = hook
	}
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return err
	}
	store := faults.NewStore(opts.StateDir)
	for _, spec := range specs {
		m, f, err := faults.Parse(spec)
		if err != nil {
			return usageErr("--fault: %v", err)
		}
		if f.Node == "" && opts.Role == server.RoleNode {
			f.Node = cfg.NodeID
		}
		if err := store.Set(m, f); err != nil {
			return err
		}
	}
	inst, err := server.Start(opts)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		klog.InfoS("Stopping on signal")
		if *powerLoss && opts.Role == server.RoleNode {
			if arr, err := array.Open(opts.StateDir); err == nil {
				err = arr.PowerLoss(cfg.NodeID)
				klog.InfoS("Power lost: the node's mounts and I/O are gone", "node", cfg.NodeID, "err", err)
			}
		}
		inst.Stop()
		return nil
	case err := <-inst.Done():
		inst.Stop()
		return err
	}
}

// The values of --data-path.
const (
	dataPathNone = "none"
	dataPathBind = "bind"
	dataPathFUSE = "fuse"
)

// explicit reports whether the flag name was given on the command line.
func explicit(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func stateDirFlag(fs *flag.FlagSet) *string {
	return fs.String("state-dir", defaultStateDir, "State directory of the array (it must exist: the instances create it)")
}

// checkStateDir makes a misspelt --state-dir an error: the commands other
// than serve would otherwise create it and report (or change) an empty array
// that no instance uses.
func checkStateDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("state directory %s does not exist: give the --state-dir of the running instances", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("state directory %s is not a directory", dir)
	}
	return nil
}

// openArray opens the array of an existing state directory.
func openArray(dir string) (*array.Array, error) {
	if err := checkStateDir(dir); err != nil {
		return nil, err
	}
	return array.Open(dir)
}

func statusCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	dir := stateDirFlag(fs)
	failOn := fs.Bool("fail-on-violation", false, fmt.Sprintf("Exit with code %d if any violation is recorded", exitViolation))
	if err := parse(fs, args); err != nil {
		return err
	}
	arr, err := openArray(*dir)
	if err != nil {
		return err
	}
	rep, err := server.BuildReport(arr, faults.NewStore(*dir))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !*failOn {
		return nil
	}
	summary := fmt.Sprintf("S1=%d S2=%d; unsafe publishes refused (--refuse-unsafe): %s=%d %s=%d",
		rep.Violations[array.S1], rep.Violations[array.S2],
		array.RefusedPublishElsewhere, rep.RefusedUnsafe[array.RefusedPublishElsewhere],
		array.RefusedPublishQuarantined, rep.RefusedUnsafe[array.RefusedPublishQuarantined])
	if rep.Violations[array.S1]+rep.Violations[array.S2] > 0 {
		return codeError{code: exitViolation, msg: "safety violations recorded: " + summary}
	}
	fmt.Fprintln(stderr, "csi-fence-mock: no safety violations:", summary)
	return nil
}

func faultCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fault", stderr)
	dir := stateDirFlag(fs)
	clear := fs.Bool("clear", false, "Remove every fault")
	list := fs.Bool("list", false, "List the faults")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: csi-fence-mock fault --state-dir=D [--clear] [--list] [Method:code=C,latency=D,answer-delay=D,prob=P,count=N,node=ID,lie | Method:off]...")
		fs.PrintDefaults()
	}
	specs, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if !*clear && !*list && len(specs) == 0 {
		return usageErr("give fault specs, --clear or --list")
	}
	if err := checkStateDir(*dir); err != nil {
		return err
	}
	store := faults.NewStore(*dir)
	if *clear {
		if err := store.Clear(); err != nil {
			return err
		}
	}
	// Parse them all first: a bad spec changes nothing.
	type set struct {
		method string
		f      faults.Fault
	}
	var sets []set
	for _, spec := range specs {
		m, f, err := faults.Parse(spec)
		if err != nil {
			return usageErr("%v", err)
		}
		sets = append(sets, set{m, f})
	}
	for _, s := range sets {
		if err := store.Set(s.method, s.f); err != nil {
			return err
		}
	}
	if *list {
		fl, err := store.List()
		if err != nil {
			return err
		}
		for _, k := range sortedKeys(fl) {
			fmt.Fprintf(stdout, "%s:%s\n", strings.SplitN(k, "@", 2)[0], fl[k])
		}
	}
	return nil
}

func configureCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("configure", stderr)
	dir := stateDirFlag(fs)
	reset := fs.Bool("reset", false, "Drop every override first: instances go back to their own flags")
	policy := fs.String("fence-policy", "", "Override --fence-policy of every instance: revoke, refuse or unknown")
	recent := fs.Duration("recent-io", 0, "Override --recent-io")
	plain := fs.String("plain-unpublish", "", "Override --plain-unpublish: linger, revoke or detach (reads through a FUSE data path are cut only on instances started with --plain-unpublish=detach or --detach=revokes)")
	refuseUnsafe := fs.Bool("refuse-unsafe", false, "Override --refuse-unsafe (true: strict mode, false: witness mode)")
	brokenFence := fs.Bool("broken-fence", false, "Override --broken-fence")
	brokenQuarantine := fs.Bool("broken-quarantine", false, "Override --broken-quarantine")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("configure takes no arguments, got %q", fs.Args())
	}
	arr, err := openArray(*dir)
	if err != nil {
		return err
	}
	s, err := arr.Snapshot()
	if err != nil {
		return err
	}
	o := s.Overrides
	if *reset {
		o = array.Overrides{}
	}
	// Only the flags given change anything.
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fence-policy":
			o.FencePolicy = array.FencePolicy(*policy)
		case "recent-io":
			o.RecentIO = recent
		case "plain-unpublish":
			o.PlainUnpublish = array.PlainUnpublishMode(*plain)
		case "refuse-unsafe":
			o.RefuseUnsafe = refuseUnsafe
		case "broken-fence":
			o.BrokenFence = brokenFence
		case "broken-quarantine":
			o.BrokenQuarantine = brokenQuarantine
		}
	})
	if err := arr.SetOverrides(o); err != nil {
		return usageErr("%v", err)
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(o)
}

// ioCmd plays a workload on a node. Each operation prints "accepted <data>"
// or "refused: <why>"; the exit code is exitRefused if any was refused. The
// node and volume come from flags or from positional arguments NODE VOLUME
// [PATH] (PATH, the target path, is accepted and ignored: the fence sanity
// suite's --fence.io-check-cmd appends it).
func ioCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("io", stderr)
	dir := stateDirFlag(fs)
	node := fs.String("node-id", "", "Node doing the I/O (or the first argument)")
	vol := fs.String("volume", "", "Volume ID (or the second argument)")
	write := fs.Bool("write", false, "Write")
	read := fs.Bool("read", false, "Read (the default)")
	count := fs.Int("count", 1, "Number of operations, 0 for no limit (with --interval)")
	interval := fs.Duration("interval", 0, "Pause between operations; with it, refusals do not stop the loop (a partitioned node's workload keeps writing)")
	duration := fs.Duration("duration", 0, "Stop after this long (0: after --count operations, or on SIGINT/SIGTERM)")
	quiet := fs.Bool("quiet", false, "Print only the summary")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 3 {
		return usageErr("io takes at most NODE VOLUME [PATH], got %q", pos)
	}
	if *node == "" && len(pos) > 0 {
		*node = pos[0]
	}
	if *vol == "" && len(pos) > 1 {
		*vol = pos[1]
	}
	switch {
	case *node == "" || *vol == "":
		return usageErr("give --node-id and --volume (or NODE VOLUME)")
	case *write && *read:
		return usageErr("--write or --read, not both")
	case *count < 0 || (*count == 0 && *interval == 0):
		return usageErr("--count must be positive, or 0 with --interval")
	}
	arr, err := openArray(*dir)
	if err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	var accepted, refused int
	for i := 0; *count == 0 || i < *count; i++ {
		var data int64
		if *write {
			data, err = arr.WriteData(*vol, *node)
		} else {
			data, err = arr.Read(*vol, *node)
		}
		var ae *array.Error
		switch {
		case err == nil:
			accepted++
			if !*quiet {
				fmt.Fprintf(stdout, "accepted %d\n", data)
			}
		case errors.As(err, &ae):
			refused++
			if !*quiet {
				fmt.Fprintf(stdout, "refused: %v\n", err)
			}
			if *interval == 0 {
				return codeError{code: exitRefused}
			}
		default:
			return err
		}
		if *interval == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return ioSummary(stdout, accepted, refused)
		case <-time.After(*interval):
		}
	}
	if *count == 1 && *interval == 0 {
		return nil // the one line said it all
	}
	return ioSummary(stdout, accepted, refused)
}

func ioSummary(stdout io.Writer, accepted, refused int) error {
	fmt.Fprintf(stdout, "summary: accepted=%d refused=%d\n", accepted, refused)
	if refused > 0 {
		return codeError{code: exitRefused}
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// outOfServiceReader reads, live, whether the Node named by a node ID
// carries the out-of-service taint: what ceph-csi asks the API server before
// it decides that an unpublish is a fence.
func outOfServiceReader(kubeconfig string) (func(ctx context.Context, nodeID string) (bool, error), error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, nodeID string) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, nodeID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, t := range n.Spec.Taints {
			if t.Key == v1.TaintNodeOutOfService {
				return true, nil
			}
		}
		return false, nil
	}, nil
}
