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

package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/kubernetes-csi/csi-lib-utils/config"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/nodeagent"
	"github.com/csi-fence/fence-attacher/pkg/registrar"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// runNode runs the node role next to the driver's node plugin: the cleanup
// of volumes fenced on this node (DESIGN.md section 5, step 7). There is one
// per node, so no leader election. A lost connection to the plugin is
// reported on the volumes (cleanupError) instead of crashing the sidecar.
func runNode(ctx context.Context, opts *sidecar.Options, nodeOpts *sidecar.NodeOptions) error {
	logger := klog.FromContext(ctx)
	if err := nodeOpts.Validate(); err != nil {
		return err
	}
	sc := standardflags.Configuration
	httpAddr, err := sidecar.HTTPAddress(sc)
	if err != nil {
		return err
	}
	restConfig, err := config.BuildConfig(sc.KubeConfig, sc)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	connection.SetMaxGRPCLogLength(opts.MaxGRPCLogLength)
	metricsManager := metrics.NewCSIMetricsManager("")
	conn, err := connection.Connect(ctx, sc.CSIAddress, metricsManager)
	if err != nil {
		return fmt.Errorf("connecting to the CSI node plugin at %s: %w", sc.CSIAddress, err)
	}
	if err := rpc.ProbeForever(ctx, conn, opts.Timeout); err != nil {
		return fmt.Errorf("probing the CSI node plugin: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	driverName, err := rpc.GetDriverName(cctx, conn)
	if err != nil {
		return fmt.Errorf("getting the CSI driver name: %w", err)
	}
	logger.Info("CSI node plugin", "driver", driverName, "node", nodeOpts.NodeName)
	metricsManager.SetDriverName(driverName)
	metricsManager.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
	nodeagent.RegisterMetrics()
	if httpAddr != "" {
		mux := http.NewServeMux()
		metricsManager.RegisterToServer(mux, sc.MetricsPath)
		// The termination reason of pods force-deleted from this node while
		// it was away, for their preStop hooks (pkg/termreason), with a
		// client and bounds of its own: not the cleanup's rate limiter.
		reasons, err := nodeagent.ReasonEndpoint(ctx, restConfig, nodeOpts.NodeName)
		if err != nil {
			return err
		}
		mux.Handle(termreason.ServedPath, reasons)
		go func() {
			logger.Info("Serving metrics", "address", httpAddr, "metricsPath", sc.MetricsPath)
			if err := http.ListenAndServe(httpAddr, mux); err != nil {
				logger.Error(err, "HTTP server failed", "address", httpAddr)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		}()
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(v1.NamespaceAll)})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "csi-fence-attacher-node " + driverName, Host: nodeOpts.NodeName})

	agent, err := nodeagent.New(nodeagent.Options{
		DriverName:         driverName,
		NodeName:           nodeOpts.NodeName,
		KubeletDir:         nodeOpts.KubeletDir,
		Conn:               conn,
		Dynamic:            dyn,
		CSINodes:           client.StorageV1().CSINodes(),
		CSIDrivers:         client.StorageV1().CSIDrivers(),
		Pods:               client.CoreV1().Pods(v1.NamespaceAll),
		Nodes:              client.CoreV1().Nodes(),
		Recorder:           recorder,
		Timeout:            opts.Timeout,
		RetryIntervalStart: opts.RetryIntervalStart,
		RetryIntervalMax:   opts.RetryIntervalMax,
		Resync:             opts.Resync,
		Workers:            int(opts.WorkerThreads),
	})
	if err != nil {
		return err
	}
	agent.Run(ctx)
	return nil
}

// runRegistrar registers the driver's node plugin with the kubelet's plugin
// watcher (pkg/registrar), as node-driver-registrar does, until SIGTERM or a
// failed registration (then it exits non-zero and its container restarts).
// With --http-endpoint, /healthz answers 200 once the kubelet has
// registered the plugin.
func runRegistrar(ctx context.Context, opts *sidecar.Options, regOpts *sidecar.RegistrarOptions) error {
	logger := klog.FromContext(ctx)
	if err := regOpts.Validate(); err != nil {
		return err
	}
	sc := standardflags.Configuration
	httpAddr, err := sidecar.HTTPAddress(sc)
	if err != nil {
		return err
	}
	connection.SetMaxGRPCLogLength(opts.MaxGRPCLogLength)
	conn, err := connection.Connect(ctx, sc.CSIAddress, metrics.NewCSIMetricsManager(""))
	if err != nil {
		return fmt.Errorf("connecting to the CSI node plugin at %s: %w", sc.CSIAddress, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	driverName, err := rpc.GetDriverName(cctx, conn)
	if err != nil {
		return fmt.Errorf("getting the CSI driver name: %w", err)
	}
	r, err := registrar.New(registrar.Options{
		DriverName:      driverName,
		Endpoint:        regOpts.KubeletRegistrationPath,
		RegistrationDir: regOpts.PluginRegistrationPath,
	})
	if err != nil {
		return err
	}
	if httpAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if notified, registered := r.Status(); !notified || !registered {
				http.Error(w, fmt.Sprintf("not registered with the kubelet yet (socket %s)", r.Socket()), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		go func() {
			if err := http.ListenAndServe(httpAddr, mux); err != nil {
				logger.Error(err, "HTTP server failed", "address", httpAddr)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		}()
	}
	return r.Run(ctx)
}
