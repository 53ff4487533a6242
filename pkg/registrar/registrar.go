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

// Package registrar registers a CSI node plugin with the kubelet through the
// kubelet's plugin watcher, as node-driver-registrar does: it serves the
// Registration service of k8s.io/kubelet's pluginregistration/v1 on a socket
// in the kubelet's plugins_registry directory. The kubelet finds the socket,
// asks GetInfo (the driver's name and the plugin's CSI endpoint as the
// kubelet sees it), registers the driver (NodeGetInfo, the CSINode object)
// and reports the outcome with NotifyRegistrationStatus.
package registrar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DefaultVersions are the CSI versions the plugin is registered with: the
// kubelet accepts "1.0.0" (and versions of that major) for CSI.
var DefaultVersions = []string{"1.0.0"}

// gracefulStop bounds how long Run waits for calls under way when it ends.
const gracefulStop = 5 * time.Second

// Options say what to register and where.
type Options struct {
	// DriverName is the CSI driver's name (GetPluginInfo).
	DriverName string
	// Endpoint is the node plugin's CSI socket as the kubelet sees it on
	// the host (node-driver-registrar's --kubelet-registration-path).
	Endpoint string
	// RegistrationDir is the kubelet's plugins_registry directory as this
	// process sees it (node-driver-registrar's --plugin-registration-path).
	RegistrationDir string
	// Versions are the supported CSI versions (default DefaultVersions).
	Versions []string
}

// SocketPath is where the registration socket of driver lives in dir: the
// name node-driver-registrar gives it.
func SocketPath(dir, driver string) string {
	return filepath.Join(dir, driver+"-reg.sock")
}

// Registrar serves the registration of one plugin.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	opts   Options
	socket string

	mu         sync.Mutex
	registered bool
	notified   bool
	// failed is closed with failure set when the kubelet reports that the
	// registration failed.
	failed  chan struct{}
	failure error
}

// New checks opts and returns a Registrar.
func New(opts Options) (*Registrar, error) {
	var errs []error
	if opts.DriverName == "" {
		errs = append(errs, errors.New("the driver name is empty"))
	}
	if !filepath.IsAbs(opts.Endpoint) {
		errs = append(errs, fmt.Errorf("the kubelet registration path %q is not an absolute path", opts.Endpoint))
	}
	if opts.RegistrationDir == "" {
		errs = append(errs, errors.New("the plugin registration directory is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(opts.Versions) == 0 {
		opts.Versions = DefaultVersions
	}
	return &Registrar{opts: opts, socket: SocketPath(opts.RegistrationDir, opts.DriverName), failed: make(chan struct{})}, nil
}

// Socket is the registration socket's path.
func (r *Registrar) Socket() string { return r.socket }

// GetInfo tells the kubelet what the plugin is and where it listens.
func (r *Registrar) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.FromContext(ctx).V(2).Info("The kubelet asked for the plugin's information", "driver", r.opts.DriverName, "endpoint", r.opts.Endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.opts.DriverName,
		Endpoint:          r.opts.Endpoint,
		SupportedVersions: r.opts.Versions,
	}, nil
}

// NotifyRegistrationStatus records the kubelet's verdict. A failed
// registration ends Run with the kubelet's error: the container restarts
// and the kubelet tries again when the socket is back, as with
// node-driver-registrar.
func (r *Registrar) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	logger := klog.FromContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notified = true
	r.registered = st.PluginRegistered
	if st.PluginRegistered {
		logger.Info("The kubelet registered the plugin", "driver", r.opts.DriverName, "endpoint", r.opts.Endpoint)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	logger.Error(nil, "The kubelet failed to register the plugin", "driver", r.opts.DriverName, "error", st.Error)
	if r.failure == nil {
		r.failure = fmt.Errorf("the kubelet failed to register driver %s at %s: %s", r.opts.DriverName, r.opts.Endpoint, st.Error)
		close(r.failed)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Status reports whether the kubelet has said how the registration went,
// and whether it succeeded.
func (r *Registrar) Status() (notified, registered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notified, r.registered
}

// Run serves the registration socket until ctx ends (nil) or the kubelet
// reports a failed registration (its error). A socket left by an earlier
// run is replaced; the socket is removed when Run returns, which tells the
// kubelet the plugin is gone.
func (r *Registrar) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if fi, err := os.Stat(r.opts.RegistrationDir); err != nil {
		return fmt.Errorf("the plugin registration directory: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("the plugin registration directory %s is not a directory", r.opts.RegistrationDir)
	}
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the stale registration socket: %w", err)
	}
	l, err := net.Listen("unix", r.socket)
	if err != nil {
		return fmt.Errorf("listening on the registration socket: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	logger.Info("Serving the plugin registration", "socket", r.socket, "driver", r.opts.DriverName, "endpoint", r.opts.Endpoint)

	var result error
	select {
	case <-ctx.Done():
	case <-r.failed:
		r.mu.Lock()
		result = r.failure
		r.mu.Unlock()
	case err := <-served:
		result = fmt.Errorf("serving the registration socket: %w", err)
	}
	// The kubelet's last call (a failed NotifyRegistrationStatus) gets
	// its answer before the connections close.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(gracefulStop):
		srv.Stop()
	}
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		result = errors.Join(result, fmt.Errorf("removing the registration socket: %w", err))
	}
	return result
}
