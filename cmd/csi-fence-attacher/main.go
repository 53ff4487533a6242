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

// Command csi-fence-attacher is a drop-in replacement for external-attacher
// that fences volumes on non-graceful detach. main only wires: flags, the
// CSI connection, capability probing, the choice of handler (pkg/sidecar),
// the HTTP endpoint and leader election.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/config"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"github.com/kubernetes-csi/external-attacher/v4/pkg/features"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // leader_election_* metrics
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // workqueue_* metrics
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/attacher"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/leadership"
	"github.com/csi-fence/fence-attacher/pkg/nodehealth"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	fg, err := sidecar.NewFeatureGate()
	if err != nil {
		panic(err) // a programming error: the gates are static
	}
	flags := sidecar.RegisterFlags(flag.CommandLine, fg)
	loggingConfig, opts, nodeOpts, registrarOpts, failoverOpts := flags.Logging, flags.Options, flags.Node, flags.Registrar, flags.Failover
	logs.InitLogs()
	standardflags.AddAutomaxprocs(klog.Infof)
	flag.Parse()

	logger := klog.Background()
	if err := logsapi.ValidateAndApply(loggingConfig, fg); err != nil {
		logger.Error(err, "Invalid logging configuration")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	if standardflags.Configuration.ShowVersion {
		fmt.Println("csi-fence-attacher", version.String())
		return
	}
	logger.Info("Version", "version", version.Version(), "commit", version.Commit(), "role", opts.Role)
	if err := errors.Join(opts.Validate(), failoverOpts.Validate()); err != nil {
		logger.Error(err, "Invalid flags")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	for _, w := range opts.Warnings() {
		logger.Info("Warning: accepted as external-attacher accepts it", "flag", w)
	}

	ctx := klog.NewContext(context.Background(), logger)
	switch opts.Role {
	case sidecar.RoleController:
		err = runController(ctx, opts, failoverOpts, fg)
	case sidecar.RoleNode:
		// The node agent holds no Lease: it stops on SIGTERM whatever
		// ReleaseLeaderElectionOnExit says, its Events flushed.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		err = runNode(ctx, opts, nodeOpts)
	case sidecar.RoleRegistrar:
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		err = runRegistrar(ctx, opts, registrarOpts)
	}
	if err != nil {
		logger.Error(err, "csi-fence-attacher failed", "role", opts.Role)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// controllerEnv is what the controller role shares between its parts: the
// attacher and the failover controller (under one Lease).
type controllerEnv struct {
	restConfig     *rest.Config
	dynamicConfig  *rest.Config
	client         kubernetes.Interface
	dynamic        dynamic.Interface
	conn           *grpc.ClientConn
	driverName     string
	pluginCaps     rpc.PluginCapabilitySet
	controllerCaps rpc.ControllerCapabilitySet
	mux            *http.ServeMux
}

// runController runs the controller role next to the driver's controller
// plugin: external-attacher's controller with the fencing Attacher, and the
// failover controller, under external-attacher's Lease so that an old and a
// new replica never act at once.
func runController(ctx context.Context, opts *sidecar.Options, failoverOpts *sidecar.FailoverOptions, fg featuregate.FeatureGate) error {
	env, err := connectController(ctx, opts)
	if err != nil {
		return err
	}
	mode := sidecar.AttacherModeFrom(env.pluginCaps, env.controllerCaps)
	// One preflight of the RBAC for every feature; a feature the flags
	// enable that lacks a rule is left out with a warning and an Event,
	// and the others run. Said at start, by a standby too.
	recorder := sync.OnceValue(func() record.EventRecorder {
		return sidecar.NewStartupRecorder(ctx, env.client, env.driverName)
	})
	var atStart featureReport
	if mode.CSIHandler {
		if atStart, err = preflight(ctx, env, failoverOpts, fg); err != nil {
			return err
		}
		atStart.say(ctx, env, recorder)
	}
	// The kubelets' heartbeats are timed from now on, leader or standby,
	// so that a replica taking over can call a silent node down at once.
	var heartbeats *nodehealth.Heartbeats
	if atStart.access.Failover {
		client, err := kubernetes.NewForConfig(failoverConfig(env.restConfig, failoverOpts))
		if err != nil {
			return err
		}
		if heartbeats, err = sidecar.WatchHeartbeats(ctx, client, opts); err != nil {
			return err
		}
	}
	// One informer factory for the controller role: the attacher and the
	// failover watch and cache each kind once.
	factory := sidecar.NewInformerFactory(env.client, opts.Resync)
	health := sidecar.NewSyncHealth()
	health.Install(env.mux)
	// Released on exit unless --feature-gates=ReleaseLeaderElectionOnExit=false
	// (our default, not external-attacher's: sidecar.NewFeatureGate). The
	// signal stops the workers (the attacher's and the failover's, whose
	// node-fencing Lease ends with them); the driver's Lease is released
	// once they have returned, so that the next leader starts at once and
	// never beside a worker of this one.
	releaseOnExit := fg.Enabled(features.ReleaseLeaderElectionOnExit)
	// A replica that leads but cannot start exits. With the Lease released
	// on exit, run returns: that releases the Lease (releaseOnTerm), and
	// csi-lib-utils exits 1, as whenever leading ends, so that a standby
	// need not wait the Lease out. Without leader election, run returns
	// and so does runController, with the error.
	var startErr error
	failed := func(ctx context.Context, err error, msg string) {
		klog.FromContext(ctx).Error(err, msg)
		startErr = fmt.Errorf("%s: %w", msg, err)
		if !releaseOnExit {
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}
	// Built when this replica leads, on the permissions granted then: a
	// standby started before its roles were bound (or a rolling update
	// that adds a feature's roles beside it) runs the features granted by
	// the time it takes over, not those of its start. Its informers only
	// start then anyway.
	leadership.Register()
	leadership.Set(contract.AttacherLeaseName(env.driverName), false)
	run := func(ctx context.Context) {
		// Leading from here until the process exits (csi-lib-utils exits
		// when leading ends).
		leadership.Set(contract.AttacherLeaseName(env.driverName), true)
		var now featureReport
		if mode.CSIHandler {
			var err error
			if now, err = preflight(ctx, env, failoverOpts, fg); err != nil {
				failed(ctx, err, "Checking the permissions of the controller role")
				return
			}
			if sidecar.FeaturesChanged(atStart.checks, now.checks) {
				klog.FromContext(ctx).Info("The permissions of the controller role changed while it waited to lead: it runs with those granted now")
				now.say(ctx, env, recorder)
			}
		}
		lead, err := buildController(ctx, env, mode, opts, failoverOpts, fg, factory, health, heartbeats, now.access, now.checks)
		if err != nil {
			failed(ctx, err, "Starting the controller role")
			return
		}
		lead(ctx)
	}

	leaderCtx := ctx
	if releaseOnExit {
		term, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		var release context.CancelFunc
		leaderCtx, run, release = releaseOnTerm(ctx, term, run)
		defer release()
	}
	// One Lease (external-attacher's) for everything the controller role
	// does: the attacher and the failover always run in the same replica,
	// so their calls reach the same driver instance, and a replica that
	// still attaches is never beside another one that fences. csi-lib-utils
	// renews it on a client of its own (never starved by the workers'
	// throttled one).
	leaderelection.RunWithLeaderElection(leaderCtx, env.restConfig, standardflags.Configuration, run,
		contract.AttacherLeaseName(env.driverName), env.mux, releaseOnExit)
	return startErr
}

// preflight checks which features of the controller role the
// ServiceAccount's RBAC lets run (sidecar.Preflight).
func preflight(ctx context.Context, env *controllerEnv, failoverOpts *sidecar.FailoverOptions, fg featuregate.FeatureGate) (featureReport, error) {
	served, err := sidecar.FencingRequestsServed(env.client.Discovery())
	if err != nil {
		return featureReport{}, err
	}
	stormGuardNamespace := sidecar.StormGuardNamespace(failoverOpts.StormGuardNamespace)
	wanted := sidecar.WantedFeatures(fg.Enabled(featuregate.Feature(contract.NonGracefulFailoverGate)), failoverOpts)
	access, checks := sidecar.Preflight(ctx, env.client, stormGuardNamespace, served, wanted)
	return featureReport{access: access, checks: checks, served: served}, nil
}

// featureReport is what a preflight found.
type featureReport struct {
	access sidecar.Access
	checks []sidecar.FeatureCheck
	served bool
}

// say logs the report, and records a Warning Event on the CSIDriver for
// each feature left out when the role may create Events. The recorder is
// made once, on the first report that needs it, and lives with ctx.
func (r featureReport) say(ctx context.Context, env *controllerEnv, recorder func() record.EventRecorder) {
	logger := klog.FromContext(ctx)
	r.access.Report(logger, r.served)
	var events record.EventRecorder
	if r.access.Events {
		events = recorder()
	}
	sidecar.ReportFeatures(logger, events, r.access, env.driverName, r.checks)
}

// buildController builds the attacher and, when access allows it, the
// failover (with the machine backend when checks say it runs), on
// factory's informers, and returns what runs them.
func buildController(ctx context.Context, env *controllerEnv, mode sidecar.AttacherMode, opts *sidecar.Options, failoverOpts *sidecar.FailoverOptions,
	fg featuregate.FeatureGate, factory informers.SharedInformerFactory, health *sidecar.SyncHealth, heartbeats *nodehealth.Heartbeats,
	access sidecar.Access, checks []sidecar.FeatureCheck) (func(context.Context), error) {
	// The attacher's Events have a client of their own (same limits).
	attacherEvents, err := kubernetes.NewForConfig(env.restConfig)
	if err != nil {
		return nil, err
	}
	runAttacher, err := sidecar.NewAttacher(ctx, sidecar.AttacherDeps{
		Informers:   factory,
		DriverName:  env.driverName,
		Mode:        mode,
		Options:     opts,
		Client:      env.client,
		EventClient: attacherEvents,
		Dynamic:     env.dynamic,
		CSI:         sidecar.NewCSIClients(env.conn, opts.MaxEntries),
		Access:      access,
		Health:      health,
	})
	if err != nil {
		return nil, err
	}
	if !access.Failover {
		return runAttacher, nil
	}
	power := access.Power && sidecar.FenceAgentConfigsServed(ctx, env.client.Discovery())
	runFailover, err := newFailover(ctx, env, mode, opts, failoverOpts, fg, factory, heartbeats, power, sidecar.FeatureRuns(checks, sidecar.FeatureMachineFencing))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { runFailover(ctx) })
		runAttacher(ctx)
		wg.Wait()
	}, nil
}

// newFailover builds the failover controller on API clients of its own,
// rate-limited by --failover-kube-api-qps and --failover-kube-api-burst:
// its fences and force-deletes never wait behind the attacher's requests,
// nor the attaches of the replacements behind a burst of fences. Its Events
// and its election have clients of their own too.
func newFailover(ctx context.Context, env *controllerEnv, mode sidecar.AttacherMode, opts *sidecar.Options,
	failoverOpts *sidecar.FailoverOptions, fg featuregate.FeatureGate, factory informers.SharedInformerFactory, heartbeats *nodehealth.Heartbeats,
	power, machine bool) (func(context.Context), error) {
	limit := func(c *rest.Config) *rest.Config { return failoverConfig(c, failoverOpts) }
	failoverClient, err := kubernetes.NewForConfig(limit(env.restConfig))
	if err != nil {
		return nil, err
	}
	failoverDynamic, err := dynamic.NewForConfig(limit(env.dynamicConfig))
	if err != nil {
		return nil, err
	}
	eventClient, err := kubernetes.NewForConfig(limit(env.restConfig))
	if err != nil {
		return nil, err
	}
	electionClient, err := kubernetes.NewForConfig(env.restConfig)
	if err != nil {
		return nil, err
	}
	return sidecar.NewFailover(ctx, sidecar.FailoverDeps{
		DriverName:          env.driverName,
		CanFence:            mode.Fence,
		NonGracefulFailover: fg.Enabled(featuregate.Feature(contract.NonGracefulFailoverGate)),
		Options:             opts,
		Failover:            failoverOpts,
		Client:              failoverClient,
		Dynamic:             failoverDynamic,
		ElectionClient:      electionClient,
		EventClient:         eventClient,
		Informers:           factory,
		CSI:                 csiclient.New(env.conn, int32(opts.MaxEntries)),
		Power:               power,
		Machine:             machine,
		Heartbeats:          heartbeats,
	})
}

// failoverConfig is c with the failover's own rate limits
// (--failover-kube-api-qps and --failover-kube-api-burst).
func failoverConfig(c *rest.Config, o *sidecar.FailoverOptions) *rest.Config {
	c = rest.CopyConfig(c)
	c.QPS, c.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
	return c
}

// connectController builds the API clients, connects to and probes the
// driver, reads its name and capabilities, and starts the HTTP endpoint
// (metrics; the leader-election health check is added to the same mux).
func connectController(ctx context.Context, opts *sidecar.Options) (*controllerEnv, error) {
	logger := klog.FromContext(ctx)
	sc := standardflags.Configuration
	httpAddr, err := sidecar.HTTPAddress(sc)
	if err != nil {
		return nil, err
	}
	restConfig, err := config.BuildConfig(sc.KubeConfig, sc)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client config: %w", err)
	}
	// Custom resources have no protobuf encoding: the dynamic client keeps
	// JSON, the typed client uses protobuf as external-attacher does.
	dynamicConfig := rest.CopyConfig(restConfig)
	restConfig.ContentType = runtime.ContentTypeProtobuf
	env := &controllerEnv{restConfig: restConfig, dynamicConfig: dynamicConfig, mux: http.NewServeMux()}
	if env.client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, err
	}
	if env.dynamic, err = dynamic.NewForConfig(dynamicConfig); err != nil {
		return nil, err
	}

	connection.SetMaxGRPCLogLength(opts.MaxGRPCLogLength)
	metricsManager := metrics.NewCSIMetricsManager("")
	env.conn, err = connection.Connect(ctx, sc.CSIAddress, metricsManager, connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the CSI driver at %s: %w", sc.CSIAddress, err)
	}
	if err := rpc.ProbeForever(ctx, env.conn, opts.Timeout); err != nil {
		return nil, fmt.Errorf("probing the CSI driver: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if env.driverName, err = rpc.GetDriverName(cctx, env.conn); err != nil {
		return nil, fmt.Errorf("getting the CSI driver name: %w", err)
	}
	logger.Info("CSI driver", "driver", env.driverName)

	metricsManager.SetDriverName(env.driverName)
	metricsManager.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
	attacher.RegisterMetrics()
	if httpAddr != "" {
		metricsManager.RegisterToServer(env.mux, sc.MetricsPath)
		go func() {
			logger.Info("Serving metrics and health checks", "address", httpAddr, "metricsPath", sc.MetricsPath)
			if err := http.ListenAndServe(httpAddr, env.mux); err != nil {
				logger.Error(err, "HTTP server failed", "address", httpAddr)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		}()
	}

	if env.pluginCaps, err = rpc.GetPluginCapabilities(cctx, env.conn); err != nil {
		return nil, fmt.Errorf("getting the plugin capabilities: %w", err)
	}
	if env.pluginCaps[csi.PluginCapability_Service_CONTROLLER_SERVICE] {
		if env.controllerCaps, err = rpc.GetControllerCapabilities(cctx, env.conn); err != nil {
			return nil, fmt.Errorf("getting the controller capabilities: %w", err)
		}
	}
	return env, nil
}
