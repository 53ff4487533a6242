package sidecar

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/attacher"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
)

// EventComponent is the source component of the Events the attacher emits.
const EventComponent = "csi-fence-attacher"

// AttacherMode is what the driver's capabilities make of the attacher.
type AttacherMode struct {
	// CSIHandler: the driver has a controller service with
	// PUBLISH_UNPUBLISH_VOLUME; otherwise the trivial handler marks
	// VolumeAttachments attached without calling the driver.
	CSIHandler bool
	// Reconcile: LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES, so that
	// ReconcileVA can run.
	Reconcile    bool
	Capabilities attacher.Capabilities
}

// AttacherModeFrom decides the attacher's mode from the capability sets
// csi-lib-utils' rpc package returns (controller may be nil when the driver
// has no controller service). Unknown or duplicate values a driver may
// return are simply not looked at: only the capabilities named here count.
func AttacherModeFrom(plugin rpc.PluginCapabilitySet, controller rpc.ControllerCapabilitySet) AttacherMode {
	if !plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE] || !controller[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME] {
		return AttacherMode{}
	}
	return AttacherMode{
		CSIHandler: true,
		Reconcile: controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] &&
			controller[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES],
		Capabilities: attacher.Capabilities{
			PublishReadOnly:       controller[csi.ControllerServiceCapability_RPC_PUBLISH_READONLY],
			SingleNodeMultiWriter: controller[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER],
			Fence:                 fence.ControllerCanFence(controller),
		},
	}
}

// CSIClient is what the attacher needs of the driver connection
// (csiclient.Client; tests substitute a fake).
type CSIClient interface {
	csiclient.Attacher
	csiclient.Lister
}

// AttacherDeps are the clients and facts the attacher is built from.
type AttacherDeps struct {
	DriverName string
	Mode       AttacherMode
	Options    *Options
	Client     kubernetes.Interface
	// Dynamic serves FencingRequests; it is used only when discovery says
	// the FencingRequest CRD is installed.
	Dynamic dynamic.Interface
	CSI     CSIClient
	// Informers is the controller role's shared factory (NewInformerFactory);
	// nil: one of its own.
	Informers informers.SharedInformerFactory
}

// NewAttacher builds the attacher (informers, handler, controller) and
// returns the function that runs it until its context is done: the
// leader-election callback. Building does not talk to the driver; it asks
// discovery once whether FencingRequests are served.
func NewAttacher(ctx context.Context, d AttacherDeps) (func(context.Context), error) {
	logger := klog.FromContext(ctx)
	if d.Options == nil || d.Client == nil || d.DriverName == "" || (d.Mode.CSIHandler && d.CSI == nil) {
		return nil, errors.New("attacher: options, client, driver name and (for a publishing driver) the CSI client are required")
	}
	o := d.Options
	factory := d.Informers
	if factory == nil {
		factory = NewInformerFactory(d.Client, o.Resync)
	}
	ctrlCfg := attacher.ControllerConfig{
		DriverName:    d.DriverName,
		VAInformer:    factory.Storage().V1().VolumeAttachments(),
		PVInformer:    factory.Core().V1().PersistentVolumes(),
		VARateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryIntervalStart, o.RetryIntervalMax),
		PVRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryIntervalStart, o.RetryIntervalMax),
	}
	var dynFactory dynamicinformer.DynamicSharedInformerFactory
	var broadcaster record.EventBroadcaster

	if !d.Mode.CSIHandler {
		logger.Info("The driver does not publish volumes: VolumeAttachments are marked attached without calling it")
		ctrlCfg.Handler = attacher.NewTrivialHandler(d.Client)
	} else {
		hc := attacher.CSIHandlerConfig{
			DriverName:    d.DriverName,
			Timeout:       o.Timeout,
			DefaultFSType: o.DefaultFSType,
			Capabilities:  d.Mode.Capabilities,
			Client:        d.Client,
			Attacher:      d.CSI,
			PVLister:      ctrlCfg.PVInformer.Lister(),
			NodeLister:    factory.Core().V1().Nodes().Lister(),
			CSINodeLister: factory.Storage().V1().CSINodes().Lister(),
			VALister:      ctrlCfg.VAInformer.Lister(),
		}
		ctrlCfg.NodeInformer = factory.Core().V1().Nodes()
		ctrlCfg.CSINodeInformer = factory.Storage().V1().CSINodes()
		if d.Mode.Reconcile {
			hc.Lister = d.CSI
			ctrlCfg.ReconcileSync = o.ReconcileSync
		}
		served, err := FencingRequestsServed(d.Client.Discovery())
		if err != nil {
			return nil, err
		}
		switch {
		case served && d.Dynamic != nil:
			dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(d.Dynamic, o.Resync)
			frInformer := dynFactory.ForResource(fencingv1alpha1.Resource)
			hc.FencingRequests = fencingv1alpha1.NewLister(frInformer.Lister())
			hc.FenceRecord = fencerecord.NewRecorder(fencingv1alpha1.NewClient(d.Dynamic))
			ctrlCfg.FencingRequestInformer = frInformer.Informer()
		default:
			logger.Info("The FencingRequest API is not served: fences are not recorded, and quarantine is read from the node taint only",
				"resource", fencingv1alpha1.Resource.String())
		}
		broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: d.Client.CoreV1().Events(v1.NamespaceAll)})
		hc.Recorder = broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: EventComponent})
		h, err := attacher.NewCSIHandler(hc)
		if err != nil {
			return nil, err
		}
		ctrlCfg.Handler = h
		logger.Info("The driver publishes volumes", "reconcile", d.Mode.Reconcile, "fence", d.Mode.Capabilities.Fence,
			"publishReadOnly", d.Mode.Capabilities.PublishReadOnly, "singleNodeMultiWriter", d.Mode.Capabilities.SingleNodeMultiWriter)
		if !d.Mode.Capabilities.Fence {
			logger.Info("The driver does not advertise UNPUBLISH_FENCE: detaches are never fenced")
		}
	}
	ctrl, err := attacher.NewController(logger, ctrlCfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		factory.Start(ctx.Done())
		if dynFactory != nil {
			dynFactory.Start(ctx.Done())
		}
		ctrl.Run(ctx, int(o.WorkerThreads))
		factory.Shutdown()
		if dynFactory != nil {
			dynFactory.Shutdown()
		}
		if broadcaster != nil {
			broadcaster.Shutdown()
		}
	}, nil
}

// FencingRequestsServed reports whether the FencingRequest CRD is
// installed. Without it the attacher still works as external-attacher does,
// and still fences, but keeps no record.
func FencingRequestsServed(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", fencingv1alpha1.SchemeGroupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == contract.FencingResource {
			return true, nil
		}
	}
	return false, nil
}
