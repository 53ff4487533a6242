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
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	upstreamattacher "github.com/kubernetes-csi/external-attacher/v4/pkg/attacher"
	"github.com/kubernetes-csi/external-attacher/v4/pkg/controller"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	csitrans "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/attacher"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/csiclient"
	"github.com/csi-fence/fence-attacher/pkg/fence"
	"github.com/csi-fence/fence-attacher/pkg/fencemode"
)

// EventComponent is the source component of the Events the attacher emits.
const EventComponent = "csi-fence-attacher"

// AttacherMode is what the driver's capabilities make of the attacher, as
// external-attacher's main decides it, plus UNPUBLISH_FENCE.
type AttacherMode struct {
	// CSIHandler: the driver has a controller service with
	// PUBLISH_UNPUBLISH_VOLUME; otherwise external-attacher's trivial
	// handler marks VolumeAttachments attached without calling the driver.
	CSIHandler bool
	// Reconcile: LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES, so that
	// the VolumeAttachment reconciler runs.
	Reconcile             bool
	PublishReadOnly       bool
	SingleNodeMultiWriter bool
	// Fence: UNPUBLISH_FENCE (fence.ControllerCanFence).
	Fence bool
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
		PublishReadOnly:       controller[csi.ControllerServiceCapability_RPC_PUBLISH_READONLY],
		SingleNodeMultiWriter: controller[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER],
		Fence:                 fence.ControllerCanFence(controller),
	}
}

// CSIClients are the attacher's clients of the driver; NewCSIClients
// builds them on one connection, tests substitute fakes.
type CSIClients struct {
	// Attacher and Lister are external-attacher's own (publish, plain
	// unpublish, ListVolumes), so that those requests are its requests.
	Attacher upstreamattacher.Attacher
	Lister   controller.VolumeLister
	// Fence sends the fenced unpublish, which external-attacher cannot.
	Fence csiclient.Attacher
}

// NewCSIClients returns the clients of the driver on conn; maxEntries is
// the ListVolumes page size (--max-entries).
func NewCSIClients(conn *grpc.ClientConn, maxEntries int) CSIClients {
	return CSIClients{
		Attacher: upstreamattacher.NewAttacher(conn),
		Lister:   upstreamattacher.NewVolumeLister(conn, maxEntries),
		Fence:    csiclient.New(conn, int32(maxEntries)),
	}
}

// AttacherDeps are the clients and facts the attacher is built from.
type AttacherDeps struct {
	DriverName string
	Mode       AttacherMode
	Options    *Options
	Client     kubernetes.Interface
	// EventClient posts the attacher's Events: a client of its own, with
	// the same limits, so that an Event per fenced detach never waits in
	// front of the detaches' own requests; nil: Client.
	EventClient kubernetes.Interface
	// Dynamic serves FencingRequests, when Access says they may be used.
	Dynamic dynamic.Interface
	CSI     CSIClients
	// Access is what the ServiceAccount may do (CheckAccess).
	Access Access
	// Informers is the controller role's shared factory (NewInformerFactory);
	// nil: one of its own.
	Informers informers.SharedInformerFactory
	// Health is told when the attacher leads and which caches it waits
	// for; nil: none.
	Health *SyncHealth
}

// NewAttacher builds external-attacher's controller with the fencing
// Attacher and returns the function that runs it until its context is done
// and its workers have stopped: the leader-election callback. Building does
// not talk to the driver nor to the API.
func NewAttacher(ctx context.Context, d AttacherDeps) (func(context.Context), error) {
	logger := klog.FromContext(ctx)
	if d.Options == nil || d.Client == nil || d.DriverName == "" ||
		(d.Mode.CSIHandler && (d.CSI.Attacher == nil || d.CSI.Lister == nil || d.CSI.Fence == nil)) {
		return nil, errors.New("attacher: options, client, driver name and (for a publishing driver) the CSI clients are required")
	}
	o := d.Options
	factory := d.Informers
	if factory == nil {
		factory = NewInformerFactory(d.Client, o.Resync)
	}
	vaInformer := factory.Storage().V1().VolumeAttachments()
	pvInformer := factory.Core().V1().PersistentVolumes()
	var dynFactory dynamicinformer.DynamicSharedInformerFactory
	var broadcaster record.EventBroadcaster

	var handler controller.Handler
	var fencing *attacher.Attacher
	var declaration *fencemode.Reader
	switch {
	case !d.Mode.CSIHandler:
		logger.Info("The driver does not publish volumes: VolumeAttachments are marked attached without calling it")
		handler = controller.NewTrivialHandler(d.Client)
	case o.DisableFencing:
		// external-attacher's main, verbatim: its handler on its attacher.
		logger.Info("Fencing disabled (--disable-fencing): external-attacher's controller runs unchanged")
		handler = controller.NewCSIHandler(d.Client, d.DriverName, d.CSI.Attacher, d.CSI.Lister,
			pvInformer.Lister(), factory.Storage().V1().CSINodes().Lister(), vaInformer.Lister(), &o.Timeout,
			d.Mode.PublishReadOnly, d.Mode.SingleNodeMultiWriter, csitrans.New(), o.DefaultFSType)
	default:
		csiNodeInformer := factory.Storage().V1().CSINodes()
		nodeIDs, err := attacher.NewNodeIDs(d.DriverName, csiNodeInformer.Informer())
		if err != nil {
			return nil, err
		}
		broadcaster = record.NewBroadcaster(record.WithContext(ctx))
		if d.Access.Events {
			events := d.EventClient
			if events == nil {
				events = d.Client
			}
			broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events(v1.NamespaceAll)})
		} else {
			broadcaster.StartStructuredLogging(0)
		}
		cfg := attacher.Config{
			DriverName: d.DriverName,
			CanFence:   d.Mode.Fence,
			CSI:        d.CSI.Attacher,
			FenceCSI:   d.CSI.Fence,
			NodeIDs:    nodeIDs,
			PVs:        pvInformer.Lister(),
			VAs:        vaInformer.Lister(),
			// external-attacher's client and verb (patch): the record
			// of a previous node ID.
			VolumeAttachments: d.Client.StorageV1().VolumeAttachments(),
			Recorder:          broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: EventComponent}),
			// As many fences at once as external-attacher's workers would
			// have sent, in workers of their own.
			FenceWorkers: int(o.WorkerThreads),
			Timeout:      o.Timeout,
		}
		if d.Access.Failover {
			cfg.FencesOnOutOfService = FencesOnOutOfService(ctx, d.Client, d.DriverName)
			// The declaration that the driver's unpublish revokes access
			// is read live by each detach that must be fenced, never
			// from a cache nor once at start: a withdrawn declaration
			// must not turn a plain unpublish into a recorded fence.
			// Reading CSIDrivers is granted with the failover's rules.
			cfg.Declaration = fencemode.NewReader(d.Client.StorageV1(), d.DriverName, cfg.Recorder)
		}
		if d.Access.Nodes {
			cfg.Nodes = factory.Core().V1().Nodes().Lister()
			cfg.Client = d.Client
		}
		if d.Access.Record {
			dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(d.Dynamic, o.Resync)
			frInformer := dynFactory.ForResource(fencingv1alpha1.Resource)
			cfg.FencingRequests = fencingv1alpha1.NewLister(frInformer.Lister())
			cfg.FenceRecord = fencingv1alpha1.NewClient(d.Dynamic)
		}
		fencing, err = attacher.NewAttacher(cfg)
		if err != nil {
			return nil, err
		}
		csiHandler := controller.NewCSIHandler(d.Client, d.DriverName, fencing, d.CSI.Lister,
			pvInformer.Lister(), csiNodeInformer.Lister(), vaInformer.Lister(), &o.Timeout,
			d.Mode.PublishReadOnly, d.Mode.SingleNodeMultiWriter, csitrans.New(), o.DefaultFSType)
		h, err := attacher.NewHandler(csiHandler, d.DriverName, vaInformer.Informer())
		if err != nil {
			return nil, err
		}
		h.Connect(fencing)
		if d.Access.Nodes {
			if err := h.WatchNodes(factory.Core().V1().Nodes().Informer()); err != nil {
				return nil, err
			}
		}
		if dynFactory != nil {
			if err := h.WatchFencingRequests(dynFactory.ForResource(fencingv1alpha1.Resource).Informer()); err != nil {
				return nil, err
			}
		}
		handler = h
		logger.Info("The driver publishes volumes", "reconcile", d.Mode.Reconcile, "fence", d.Mode.Fence,
			"publishReadOnly", d.Mode.PublishReadOnly, "singleNodeMultiWriter", d.Mode.SingleNodeMultiWriter)
		switch {
		case d.Mode.Fence:
		case cfg.Declaration != nil:
			logger.Info("The driver does not advertise UNPUBLISH_FENCE: a detach that must be fenced is fenced by its plain unpublish only while its CSIDriver declares that one revokes access",
				"annotation", contract.UnpublishRevokesAccessAnnotation)
		default:
			logger.Info("The driver does not advertise UNPUBLISH_FENCE and the sidecar may not read CSIDrivers (the failover's role): detaches are never fenced",
				"annotation", contract.UnpublishRevokesAccessAnnotation)
		}
		declaration = cfg.Declaration
	}
	ctrl := controller.NewCSIAttachController(logger, d.Client, d.DriverName, handler, vaInformer, pvInformer,
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryIntervalStart, o.RetryIntervalMax),
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryIntervalStart, o.RetryIntervalMax),
		d.Mode.CSIHandler && d.Mode.Reconcile, o.ReconcileSync)
	return func(ctx context.Context) {
		factory.Start(ctx.Done())
		if dynFactory != nil {
			dynFactory.Start(ctx.Done())
		}
		if d.Health != nil {
			d.Health.Leading(factorySynced(factory), dynamicFactorySynced(dynFactory))
			defer d.Health.Standby()
		}
		if fencing != nil {
			logFenceMode(ctx, declaration, d.Mode.Fence)
		}
		// external-attacher's Run waits for its workers through wg only
		// with its ReleaseLeaderElectionOnExit gate; without it, they stop
		// with ctx as it returns.
		var wg sync.WaitGroup
		if fencing != nil {
			wg.Go(func() { fencing.RunFences(ctx) })
		}
		ctrl.Run(ctx, int(o.WorkerThreads), &wg)
		wg.Wait()
		factory.Shutdown()
		if dynFactory != nil {
			dynFactory.Shutdown()
		}
		if broadcaster != nil {
			broadcaster.Shutdown()
		}
	}, nil
}

// logFenceMode says, as the attacher starts leading, how a detach that
// must be fenced is fenced now (fencemode.Mode), on a live read of the
// CSIDriver: the mode each such detach reads again.
func logFenceMode(ctx context.Context, declaration *fencemode.Reader, canFence bool) {
	logger := klog.FromContext(ctx)
	mode, err := declaration.Mode(ctx, canFence)
	if err != nil {
		logger.Error(err, "Cannot tell how detaches are fenced now: each one that must be reads the CSIDriver again")
		return
	}
	logger.Info("Fencing detaches", "fenceMode", mode, "unpublishFence", canFence)
}

// FencingRequestsServed reports whether the FencingRequest CRD is
// installed. Without it the attacher works as external-attacher does and
// never fences: nothing could record a fence nor lift its quarantine.
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

// FencesOnOutOfService reads, once at start, whether the driver's CSIDriver
// declares that it fences on the out-of-service taint
// (contract.FencesOnOutOfServiceAnnotation). Unreadable means no: such a
// detach is then a plain unpublish, as external-attacher's.
func FencesOnOutOfService(ctx context.Context, client kubernetes.Interface, driver string) bool {
	d, err := client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the CSIDriver: its detaches from out-of-service nodes are not recorded as fences", "driver", driver, "err", err)
		return false
	}
	return d.Annotations[contract.FencesOnOutOfServiceAnnotation] == "true"
}
