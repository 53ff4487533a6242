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

package sidecar

import (
	"errors"
	"flag"
	"os"
)

// NodeOptions are the flags of the node role.
type NodeOptions struct {
	// KubeletDir is the kubelet's root directory, which the container must
	// see at the kubelet's own path (--root-dir): the paths found under it
	// are handed to the node plugin, which knows the volume by the paths
	// the kubelet staged and published it at.
	KubeletDir string
	// NodeName is the Kubernetes node the sidecar runs on.
	NodeName string
}

// AddFlags registers the node role's flags on fs. --node-name defaults to
// $NODE_NAME, which a DaemonSet sets from spec.nodeName.
func (o *NodeOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "/var/lib/kubelet", "Node role: the kubelet's root directory, where leftovers of fenced volumes are found, mounted at the kubelet's own path (as the node plugin sees it: the paths found are handed to the plugin). It must show the host's mounts (mountPropagation HostToContainer).")
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

// RegistrarOptions are the flags of the registrar role, named as
// node-driver-registrar names them.
type RegistrarOptions struct {
	// KubeletRegistrationPath is the node plugin's CSI socket as the
	// kubelet sees it on the host.
	KubeletRegistrationPath string
	// PluginRegistrationPath is the kubelet's plugins_registry directory
	// as the container sees it.
	PluginRegistrationPath string
}

// AddFlags registers the registrar role's flags on fs.
func (o *RegistrarOptions) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.KubeletRegistrationPath, "kubelet-registration-path", "", "Registrar role: the node plugin's CSI socket as the kubelet sees it on the host, e.g. /var/lib/kubelet/plugins/<driver>/csi.sock.")
	fs.StringVar(&o.PluginRegistrationPath, "plugin-registration-path", "/registration", "Registrar role: the kubelet's plugins_registry directory as the container sees it.")
}

// Validate checks the options the registrar role needs.
func (o *RegistrarOptions) Validate() error {
	if o.KubeletRegistrationPath == "" {
		return errors.New("--role=registrar needs --kubelet-registration-path")
	}
	if o.PluginRegistrationPath == "" {
		return errors.New("--plugin-registration-path must not be empty")
	}
	return nil
}
