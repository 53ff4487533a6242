// Command csi-fence-attacher is a drop-in replacement for external-attacher
// that fences volumes on non-graceful detach. main only wires: flags, the CSI
// connection, capability probing, the choice of handler and leader election.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/config"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/attacher"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// Feature gates, as external-attacher's plus ours.
const releaseLeaderElectionOnExit featuregate.Feature = "ReleaseLeaderElectionOnExit"

var (
	// Flags of external-attacher v4.13, same names, defaults and meaning.
	timeout            = flag.Duration("timeout", 15*time.Second, "Timeout for waiting for attaching or detaching the volume.")
	retryIntervalStart = flag.Duration("retry-interval-start", time.Second, "Initial retry interval of failed create volume or deletion. It doubles with each failure, up to retry-interval-max.")
	retryIntervalMax   = flag.Duration("retry-interval-max", 5*time.Minute, "Maximum retry interval of failed create volume or deletion.")
	workerThreads      = flag.Uint("worker-threads", 10, "Number of attacher worker threads")
	maxEntries         = flag.Int("max-entries", 0, "Max entries per each page in volume lister call, 0 means no limit.")
	reconcileSync      = flag.Duration("reconcile-sync", 1*time.Minute, "Resync interval of the VolumeAttachment reconciler.")
	resync             = flag.Duration("resync", 10*time.Minute, "Resync interval of the controller.")
	defaultFSType      = flag.String("default-fstype", "", "The default filesystem type of the volume to publish. Defaults to empty string")
	maxGRPCLogLength   = flag.Int("max-grpc-log-length", -1, "The maximum amount of characters logged for every grpc responses. Defaults to no limit")

	// Our own flags.
	role = flag.String("role", "controller", "Which part of fence-attacher to run: 'controller' (beside the driver's controller plugin: attacher and failover) or 'node' (beside the node plugin: cleanup of fenced volumes).")

	version = "unknown"
)

func main() {
	fg := featuregate.NewFeatureGate()
	if err := fg.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		releaseLeaderElectionOnExit:      {Default: false, PreRelease: featuregate.Alpha},
		contract.NonGracefulFailoverGate: {Default: false, PreRelease: featuregate.Alpha},
	}); err != nil {
		panic(err)
	}
	logsapi.AddFeatureGates(fg)
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c, flag.CommandLine)
	standardflags.RegisterCommonFlags(flag.CommandLine)
	standardflags.AddAutomaxprocs(klog.Infof)
	flag.Func("feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+strings.Join(fg.KnownFeatures(), "\n"), fg.Set)
	flag.Parse()
	logs := klog.Background()
	if err := logsapi.ValidateAndApply(c, fg); err != nil {
		logs.Error(err, "Invalid logging configuration")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	opts := standardflags.Configuration
	if opts.ShowVersion {
		fmt.Println(os.Args[0], version)
		return
	}
	logger := klog.Background()
	ctx := klog.NewContext(context.Background(), logger)
	logger.Info("Version", "version", version, "role", *role)

	if err := run(ctx, fg); err != nil {
		logger.Error(err, "csi-fence-attacher failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

func run(ctx context.Context, fg featuregate.FeatureGate) error {
	opts := standardflags.Configuration
	if opts.MetricsAddress != "" && opts.HttpEndpoint != "" {
		return fmt.Errorf("only one of --metrics-address and --http-endpoint can be set")
	}
	if *workerThreads == 0 {
		return fmt.Errorf("--worker-threads must be greater than zero")
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be greater than zero")
	}
	switch *role {
	case "controller":
		return runController(ctx, fg)
	case "node":
		return fmt.Errorf("--role=node is not implemented yet")
	default:
		return fmt.Errorf("unknown --role %q: want controller or node", *role)
	}
}

func runController(ctx context.Context, fg featuregate.FeatureGate) error {
	logger := klog.FromContext(ctx)
	opts := standardflags.Configuration
	cfg, err := config.BuildConfig(opts.KubeConfig, opts)
	if err != nil {
		return fmt.Errorf("building kubeconfig: %w", err)
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dynCfg := *cfg
	dynCfg.ContentType = runtime.ContentTypeJSON
	dyn, err := dynamic.NewForConfig(&dynCfg)
	if err != nil {
		return err
	}

	connection.SetMaxGRPCLogLength(*maxGRPCLogLength)
	metricsManager := metrics.NewCSIMetricsManager("")
	conn, err := connection.Connect(ctx, opts.CSIAddress, metricsManager, connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	if err != nil {
		return fmt.Errorf("connecting to CSI driver: %w", err)
	}
	if err := rpc.ProbeForever(ctx, conn, *timeout); err != nil {
		return fmt.Errorf("probing CSI driver: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	driverName, err := rpc.GetDriverName(cctx, conn)
	if err != nil {
		return fmt.Errorf("getting CSI driver name: %w", err)
	}
	logger = klog.LoggerWithValues(logger, "driver", driverName)
	ctx = klog.NewContext(ctx, logger)
	metricsManager.SetDriverName(driverName)
	metricsManager.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
	attacher.RegisterMetrics()

	mux := http.NewServeMux()
	addr := opts.HttpEndpoint
	if addr == "" {
		addr = opts.MetricsAddress
	}
	if addr != "" {
		metricsManager.RegisterToServer(mux, opts.MetricsPath)
		go func() {
			logger.Info("Serving metrics and health checks", "address", addr)
			if err := http.ListenAndServe(addr, mux); err != nil {
				logger.Error(err, "HTTP server failed")
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		}()
	}

	pluginCaps, err := rpc.GetPluginCapabilities(cctx, conn)
	if err != nil {
		return fmt.Errorf("getting plugin capabilities: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, *resync)
	vaInformer := factory.Storage().V1().VolumeAttachments()
	pvInformer := factory.Core().V1().PersistentVolumes()

	var handler attacher.Handler
	var synced []cache.InformerSynced
	var dynFactory dynamicinformer.DynamicSharedInformerFactory
	ctrlCaps := rpc.ControllerCapabilitySet{}
	if pluginCaps[csi.PluginCapability_Service_CONTROLLER_SERVICE] {
		if ctrlCaps, err = rpc.GetControllerCapabilities(cctx, conn); err != nil {
			return fmt.Errorf("getting controller capabilities: %w", err)
		}
	}
	if !ctrlCaps[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		logger.Info("The driver does not publish volumes: VolumeAttachments are marked attached without CSI calls")
		handler = attacher.NewTrivialHandler(client)
	} else {
		canFence := fence.ControllerCanFence(ctrlCaps)
		logger.Info("The driver publishes volumes", "fence", canFence)
		var lister csiclient.Lister
		csiClient := csiclient.New(conn, int32(*maxEntries))
		if ctrlCaps[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] && ctrlCaps[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES] {
			lister = csiClient
		}
		var frLister attacher.FencingRequestLister
		var frClient *fencingv1alpha1.Client
		if served, err := fencingRequestsServed(client.Discovery()); err != nil {
			return err
		} else if served {
			dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, *resync)
			frInformer := dynFactory.ForResource(fencingv1alpha1.Resource)
			frLister = attacher.NewFencingRequestLister(frInformer.Lister())
			frClient = fencingv1alpha1.NewClient(dyn)
			synced = append(synced, frInformer.Informer().HasSynced)
		} else {
			logger.Info("The FencingRequest CRD is not installed: fences are not recorded and quarantine is read from the node taint only")
		}
		nodeInformer := factory.Core().V1().Nodes()
		csiNodeInformer := factory.Storage().V1().CSINodes()
		synced = append(synced, nodeInformer.Informer().HasSynced, csiNodeInformer.Informer().HasSynced)
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events(v1.NamespaceAll)})
		recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "csi-fence-attacher " + driverName})
		h := attacher.NewCSIHandler(attacher.CSIHandlerOptions{
			DriverName:                    driverName,
			Timeout:                       *timeout,
			DefaultFSType:                 *defaultFSType,
			SupportsPublishReadOnly:       ctrlCaps[csi.ControllerServiceCapability_RPC_PUBLISH_READONLY],
			SupportsSingleNodeMultiWriter: ctrlCaps[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER],
			CanFence:                      canFence,
		}, client, csiClient, lister, pvInformer.Lister(), nodeInformer.Lister(), csiNodeInformer.Lister(),
			vaInformer.Lister(), frLister, fencerecordClient(frClient), recorder)
		if frClient != nil && fg.Enabled(contract.NonGracefulFailoverGate) {
			logger.Info("Feature gate NonGracefulFailover is on")
		}
		handler = h
	}
	sync := *reconcileSync
	if _, ok := handler.(*attacher.CSIHandler); !ok {
		sync = 0
	}
	ctrl, err := attacher.NewController(logger, driverName, handler, vaInformer, pvInformer,
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](*retryIntervalStart, *retryIntervalMax),
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](*retryIntervalStart, *retryIntervalMax),
		sync, synced...)
	if err != nil {
		return err
	}

	runAttacher := func(ctx context.Context) {
		factory.Start(ctx.Done())
		if dynFactory != nil {
			dynFactory.Start(ctx.Done())
		}
		ctrl.Run(ctx, int(*workerThreads))
	}
	leaderelection.RunWithLeaderElection(ctx, cfg, opts, runAttacher,
		contract.AttacherLeaseName(driverName), mux, fg.Enabled(releaseLeaderElectionOnExit))
	return nil
}

// fencingRequestsServed reports whether the FencingRequest CRD is installed:
// without it the attacher still works as external-attacher does.
func fencingRequestsServed(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		if strings.Contains(err.Error(), "not found") || strings.Contains(err.Error(), "could not find") {
			return false, nil
		}
		return false, fmt.Errorf("discovering %s: %w", fencingv1alpha1.SchemeGroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == contract.FencingResource {
			return true, nil
		}
	}
	return false, nil
}

// fencerecordClient avoids a typed nil inside a non-nil interface.
func fencerecordClient(c *fencingv1alpha1.Client) fencerecord.Client {
	if c == nil {
		return nil
	}
	return c
}
