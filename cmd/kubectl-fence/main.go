// Command kubectl-fence is fence-attacher's kubectl plugin (on PATH as
// kubectl-fence, run as `kubectl fence ...`).
//
//	kubectl fence terminate pod/NAME --reason="..." [-n NAMESPACE] [--grace-period=N]
//
// terminate does what the seed's `kubectl delete po NAME --reason=...`
// would: it records the reason on the pod, where its preStop hook reads it
// (pkg/termreason, csi-fence-prestop), then deletes the pod.
//
// Subcommands are a table, so that the fencing status view the plugin is to
// show later is one more entry.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

type command struct {
	usage string
	run   func(args []string) error
}

var commands = map[string]command{
	"terminate": {"terminate pod/NAME --reason=REASON [-n NAMESPACE] [--grace-period=SECONDS]: record why, then delete the pod", terminate},
}

func main() {
	if err := dispatch(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func dispatch(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage()
		return fmt.Errorf("unknown command %q", args[0])
	}
	return c.run(args[1:])
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "Usage: kubectl fence COMMAND\n\nCommands:")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %s\n", commands[n].usage)
	}
}

// kubeFlags are the usual kubectl connection flags.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "path to the kubeconfig file")
	fs.StringVar(&k.context, "context", "", "kubeconfig context")
	fs.StringVar(&k.namespace, "namespace", "", "namespace (default: the context's)")
	fs.StringVar(&k.namespace, "n", "", "namespace (short)")
}

func (k *kubeFlags) client() (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context})
	ns, _, err := cfg.Namespace()
	if err != nil {
		return nil, "", err
	}
	if k.namespace != "" {
		ns = k.namespace
	}
	rc, err := cfg.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := kubernetes.NewForConfig(rc)
	return c, ns, err
}

// interleave lets flags follow the positional argument, as kubectl's do.
func interleave(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func terminate(args []string) error {
	fs := flag.NewFlagSet("terminate", flag.ContinueOnError)
	var k kubeFlags
	k.register(fs)
	reason := fs.String("reason", "", "why the pod is terminated, delivered to its preStop hook (required)")
	grace := fs.Int64("grace-period", -1, "seconds the pod has to stop (default: its own terminationGracePeriodSeconds)")
	timeout := fs.Duration("request-timeout", 30*time.Second, "bound of the API requests")
	pos, err := interleave(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("terminate: want exactly one pod/NAME")
	}
	name, ok := strings.CutPrefix(pos[0], "pod/")
	if !ok {
		name, ok = strings.CutPrefix(pos[0], "pods/")
	}
	if !ok || name == "" {
		return fmt.Errorf("terminate: %q is not pod/NAME (only pods carry a termination reason)", pos[0])
	}
	if *reason == "" {
		return errors.New("terminate: --reason is required")
	}
	client, ns, err := k.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := termreason.Terminate(ctx, client, ns, name, *reason, *grace); err != nil {
		return err
	}
	fmt.Printf("pod/%s terminated (reason: %s)\n", name, *reason)
	return nil
}
