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

// Package server runs one instance of the mock driver: the CSI gRPC server
// of its role (controller, or the node plugin of one node) with fault
// injection, and its HTTP endpoint (metrics, status, and on a node the
// workload's data path). csi-fence-mock's main and in-process tests start
// instances the same way.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/driver"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/mock-driver/workload"
	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// Role of an instance.
type Role string

const (
	RoleController Role = "controller"
	RoleNode       Role = "node"
)

// Options configure an instance.
type Options struct {
	Role Role
	// Endpoint of the CSI server: unix:///path, unix:path, an absolute path,
	// or tcp://host:port (port 0 picks a free one).
	Endpoint string
	// HTTPEndpoint, if set, is host:port of the HTTP server.
	HTTPEndpoint string
	StateDir     string
	// Driver configures the driver; for the node role Driver.NodeID is required.
	Driver driver.Config
}

// Instance is one running instance.
type Instance struct {
	opts    Options
	arr     *array.Array
	faults  *faults.Store
	grpc    *grpc.Server
	lis     net.Listener
	http    *http.Server
	httpLis net.Listener
	writers workload.Set
	metrics *metrics
	served  chan error
}

// Start listens on the endpoints and serves in the background until Stop.
// A node instance registers its node with the array first, so that the
// controller can publish to it.
func Start(opts Options) (*Instance, error) {
	switch opts.Role {
	case RoleController:
	case RoleNode:
		if opts.Driver.NodeID == "" {
			return nil, errors.New("the node role needs a node ID")
		}
	default:
		return nil, fmt.Errorf("unknown role %q: want controller or node", opts.Role)
	}
	if err := opts.Driver.Array.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Driver.Detach.Validate(); err != nil {
		return nil, err
	}
	arr, err := array.Open(opts.StateDir)
	if err != nil {
		return nil, err
	}
	if opts.Role == RoleNode {
		if err := arr.RegisterNode(opts.Driver.NodeID, opts.Driver.MaxVolumesPerNode); err != nil {
			return nil, fmt.Errorf("registering node %s with the array: %w", opts.Driver.NodeID, err)
		}
	}
	inst := &Instance{opts: opts, arr: arr, faults: faults.NewStore(opts.StateDir), served: make(chan error, 2)}

	inst.metrics = newMetrics(arr)
	node := ""
	if opts.Role == RoleNode {
		node = opts.Driver.NodeID
	}
	inst.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(
		inst.metrics.countRPC,
		logRPC,
		inst.faults.InterceptorFor(node, inst.metrics.countFault),
	))
	d := driver.New(opts.Driver, arr)
	csi.RegisterIdentityServer(inst.grpc, d)
	if opts.Role == RoleController {
		csi.RegisterControllerServer(inst.grpc, d)
	} else {
		csi.RegisterNodeServer(inst.grpc, d)
	}
	if inst.lis, err = Listen(opts.Endpoint); err != nil {
		return nil, err
	}
	if opts.HTTPEndpoint != "" {
		if inst.httpLis, err = net.Listen("tcp", opts.HTTPEndpoint); err != nil {
			inst.lis.Close()
			return nil, fmt.Errorf("HTTP endpoint: %w", err)
		}
		inst.http = &http.Server{Handler: inst.handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { inst.served <- ignoreClosed(inst.http.Serve(inst.httpLis)) }()
	}
	go func() { inst.served <- inst.grpc.Serve(inst.lis) }()
	klog.InfoS("Serving", "role", opts.Role, "endpoint", inst.Endpoint(), "http", inst.HTTPAddr(), "driver", d.Config().Name, "node", node, "stateDir", opts.StateDir)
	return inst, nil
}

// Endpoint is the CSI address clients dial: unix:///path or tcp host:port.
func (i *Instance) Endpoint() string {
	if i.lis.Addr().Network() == "unix" {
		return "unix://" + i.lis.Addr().String()
	}
	return i.lis.Addr().String()
}

// HTTPAddr is the address of the HTTP server, "" if none.
func (i *Instance) HTTPAddr() string {
	if i.httpLis == nil {
		return ""
	}
	return i.httpLis.Addr().String()
}

// Array is the instance's handle on the array.
func (i *Instance) Array() *array.Array { return i.arr }

// Faults is the instance's fault store.
func (i *Instance) Faults() *faults.Store { return i.faults }

// Done receives the end of each server (gRPC, HTTP): nil after Stop, or
// the error that stopped it.
func (i *Instance) Done() <-chan error { return i.served }

// Stop stops the writers and the servers, letting calls in flight finish
// for up to a few seconds.
func (i *Instance) Stop() {
	i.writers.StopAll()
	if i.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = i.http.Shutdown(ctx)
	}
	stopped := make(chan struct{})
	go func() { i.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		i.grpc.Stop()
	}
	if i.lis.Addr().Network() == "unix" {
		os.Remove(i.lis.Addr().String())
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Listen listens on a CSI endpoint. An existing unix socket at the path is
// removed first (a previous instance's); any other file there is an error.
func Listen(endpoint string) (net.Listener, error) {
	network, addr, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%s exists and is not a socket", addr)
			}
			if err := os.Remove(addr); err != nil {
				return nil, err
			}
		}
	}
	return net.Listen(network, addr)
}

// ParseEndpoint splits a CSI endpoint into network and address.
func ParseEndpoint(endpoint string) (string, string, error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		return "unix", strings.TrimPrefix(endpoint, "unix://"), nil
	case strings.HasPrefix(endpoint, "unix:"):
		return "unix", strings.TrimPrefix(endpoint, "unix:"), nil
	case strings.HasPrefix(endpoint, "tcp://"):
		return "tcp", strings.TrimPrefix(endpoint, "tcp://"), nil
	case strings.HasPrefix(endpoint, "/"):
		return "unix", endpoint, nil
	}
	return "", "", fmt.Errorf("endpoint %q: want unix:///path, an absolute path or tcp://host:port", endpoint)
}

// logRPC logs every call (V(3)) with its request and response without
// secrets (V(5)), and failures (V(2)). A node-side teardown
// (NodeUnpublishVolume, NodeUnstageVolume) is logged at V(2) with its
// volume, path and force field, done or failed: who cleaned what, forced or
// not, is what a node's return is judged by.
func logRPC(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
	logger := klog.FromContext(ctx).WithValues("method", path.Base(info.FullMethod))
	// The fence and force fields are unknown fields, which the request's
	// JSON does not show: say what was asked, as it arrived.
	teardown := false
	switch r := req.(type) {
	case *csi.ControllerUnpublishVolumeRequest:
		if f, err := fence.GetFence(r); err == nil {
			logger = logger.WithValues("fence", f)
		}
	case *csi.NodeUnpublishVolumeRequest:
		f, _ := fence.GetNodeUnpublishForce(r)
		logger, teardown = logger.WithValues("volumeID", r.GetVolumeId(), "path", r.GetTargetPath(), "force", f), true
	case *csi.NodeUnstageVolumeRequest:
		f, _ := fence.GetNodeUnstageForce(r)
		logger, teardown = logger.WithValues("volumeID", r.GetVolumeId(), "path", r.GetStagingTargetPath(), "force", f), true
	}
	logger.V(5).Info("GRPC request", "request", protosanitizer.StripSecrets(req))
	rsp, err := handler(ctx, req)
	switch {
	case err != nil:
		logger.V(2).Info("GRPC failed", "code", status.Code(err), "err", err)
	case teardown:
		logger.V(2).Info("GRPC done")
	default:
		logger.V(3).Info("GRPC done")
		logger.V(5).Info("GRPC response", "response", protosanitizer.StripSecrets(rsp))
	}
	return rsp, err
}
