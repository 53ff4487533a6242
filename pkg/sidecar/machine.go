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
	"flag"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/failover"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
)

// MachineRules let the failover fence nodes through their Cluster API
// Machines: read them (and be told when they change) and delete them, or,
// with --machine-remediation=mhc, annotate them for MachineHealthCheck.
// Reading the InfraMachines (whose disappearance confirms the fence) needs
// get on the provider's kind as well, which no fixed rule can name: the
// RBAC of deploy/kubernetes/machine-fencing says where to add it.
// Granted by deploy/kubernetes/machine-fencing, not by the base:
// only clusters that list the machine backend give the sidecar the right to
// delete Machines.
var MachineRules = []rbacv1.PolicyRule{
	{APIGroups: []string{machinefence.Group}, Resources: []string{"machines"}, Verbs: []string{"get", "list", "watch", "delete", "update"}},
}

// addMachineFlags registers the machine backend's flags.
func (o *FailoverOptions) addMachineFlags(fs *flag.FlagSet) {
	o.MachineRemediation = string(machinefence.ModeDelete)
	fs.StringVar(&o.MachineRemediation, "machine-remediation", o.MachineRemediation, "How the machine backend remediates a dead node's Cluster API Machine: delete (delete the Machine, as MachineHealthCheck's own remediation does) or mhc (annotate it "+machinefence.RemediateMachineAnnotation+" and let the cluster's MachineHealthCheck delete it). Either way the node counts as fenced only once the infrastructure provider reports the instance gone.")
}

// validateMachine checks the machine backend's flags.
func (o *FailoverOptions) validateMachine() error {
	switch machinefence.Mode(o.MachineRemediation) {
	case machinefence.ModeDelete, machinefence.ModeMHC, "":
		return nil
	}
	return fmt.Errorf("--machine-remediation: %q is neither delete nor mhc", o.MachineRemediation)
}

// newMachineFencer builds the machine backend when --fencing-backends
// lists it, Cluster API's Machines are served and the sidecar may read and
// delete them (granted: MachineRules, as the start-up preflight found); otherwise it says once why the backend is off and returns
// nil. It also watches the Machines, so that a fence waiting for an
// instance's deletion looks again as soon as its Machine changes.
func newMachineFencer(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, f dynamicinformer.DynamicSharedInformerFactory, opts *FailoverOptions, granted bool) (*machinefence.Backend, cache.SharedIndexInformer) {
	if !slices.Contains(opts.Backends, fencingv1alpha1.BackendMachine) {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	if !machinesServed(client.Discovery()) {
		logger.Info("Machine fencing is off: Cluster API's Machine API (" + machinefence.MachineResource.GroupVersion().String() + ") is not served")
		return nil, nil
	}
	if !granted {
		// Which rules are missing was said at start (ReportFeatures).
		logger.Info("Machine fencing is off: the ServiceAccount may not read or delete Machines", "grant", "deploy/kubernetes/machine-fencing")
		return nil, nil
	}
	b := &machinefence.Backend{
		Dynamic: dyn,
		// Any provider's InfraMachine kind, resolved by discovery (a kind
		// installed later is found: the mapper refreshes on a miss).
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery())),
		Mode:   machinefence.Mode(opts.MachineRemediation),
	}
	return b, f.ForResource(machinefence.MachineResource).Informer()
}

// watchMachines queues the node of each Machine that changes.
func watchMachines(inf cache.SharedIndexInformer, c *failover.Controller) error {
	node := func(o interface{}) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		c.MachineChanged(machinefence.NodeOfMachine(o))
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    node,
		UpdateFunc: func(_, o interface{}) { node(o) },
		DeleteFunc: node,
	})
	return err
}

func machinesServed(d discovery.DiscoveryInterface) bool {
	list, err := d.ServerResourcesForGroupVersion(machinefence.MachineResource.GroupVersion().String())
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == machinefence.MachineResource.Resource })
}
