package sidecar

import (
	"errors"
	"flag"
	"os"
)

// NodeOptions are the flags of the node role.
type NodeOptions struct {
	// KubeletDir is the kubelet's root directory as the container sees it.
	KubeletDir string
	// NodeName is the Kubernetes node the sidecar runs on.
	NodeName string
}

// AddFlags registers the node role's flags on fs. --node-name defaults to
// $NODE_NAME, which a DaemonSet sets from spec.nodeName.
func (o *NodeOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "Node role: the kubelet's root directory, where leftovers of fenced volumes are found. It must show the host's mounts (mountPropagation HostToContainer).")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "Node role: the name of the Kubernetes node this sidecar runs on (default $NODE_NAME).")
}

// Validate checks the options the node role needs.
func (o *NodeOptions) Validate() error {
	if o.NodeName == "" {
		return errors.New("--role=node needs --node-name (or $NODE_NAME)")
	}
	if o.KubeletDir == "" {
		return errors.New("--kubelet-dir must not be empty")
	}
	return nil
}
