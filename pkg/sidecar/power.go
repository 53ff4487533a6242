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
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
)

// powerFencer is the failover's power backend (failover.PowerFencer): which
// node has a power switch comes from a cache of the FenceAgentConfigs (asked
// on every pass over a dead node), the fence itself resolves the config and
// its Secret live (powerfence.Resolver) and runs the agent in this process:
// the sidecar's image carries the agents, so that credentials go from the
// Secret to the agent's stdin and nowhere else, with no Job, Pod or extra
// RBAC to create them, and only the one owner of node-level state runs one.
type powerFencer struct {
	informer cache.SharedIndexInformer
	configs  cache.GenericLister
	resolver *powerfence.Resolver
	powerfence.Backend
}

func newPowerFencer(client kubernetes.Interface, dyn dynamic.Interface, f dynamicinformer.DynamicSharedInformerFactory, allowed []string) *powerFencer {
	inf := f.ForResource(fencingv1alpha1.FenceAgentConfigResource)
	r := &powerfence.Resolver{Dynamic: dyn, Kube: client, AllowedAgents: allowed}
	return &powerFencer{
		informer: inf.Informer(),
		configs:  inf.Lister(),
		resolver: r,
		Backend:  powerfence.NewBackend(r),
	}
}

// configCheckTimeout bounds the live reads of one config's check.
const configCheckTimeout = 30 * time.Second

// start runs the config cache and waits for it. Each config is checked as
// it is loaded, changed, and at every resync (a Secret can lose its label
// or a key without the config changing).
func (p *powerFencer) start(ctx context.Context) {
	check := func(obj interface{}) { p.check(ctx, obj) }
	if _, err := p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj interface{}) { check(obj) },
	}); err != nil {
		klog.FromContext(ctx).Error(err, "FenceAgentConfigs will not be checked as they are loaded")
	}
	go p.informer.Run(ctx.Done())
	cache.WaitForNamedCacheSync("csi-fence-power", ctx.Done(), p.informer.HasSynced)
}

// check says in the log whether a fence of the config's nodes could run as
// the config and its Secrets are now (powerfence.Resolver.Check): an admin
// learns of a Secret without the opt-in label, a missing key or agent, when
// the config is loaded, not when a node has died. It decides nothing; every
// fence reads the config and its Secrets again, live. The error names
// options, Secrets, keys and labels, never a value (S7).
func (p *powerFencer) check(ctx context.Context, obj interface{}) {
	logger := klog.FromContext(ctx)
	cfg, err := fencingv1alpha1.FenceAgentConfigFromUnstructured(obj)
	if err != nil {
		logger.Error(err, "FenceAgentConfig ignored: its nodes cannot be power-fenced")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, configCheckTimeout)
	defer cancel()
	if err := p.resolver.Check(ctx, cfg); err != nil {
		logger.Error(err, "FenceAgentConfig cannot fence its nodes as it is: their power fences will fail until it (or its Secret) is fixed", "config", cfg.Name)
		return
	}
	logger.V(2).Info("FenceAgentConfig checked: its nodes can be power-fenced", "config", cfg.Name, "agent", cfg.Spec.Agent)
}

// Config names the one FenceAgentConfig that lists node, and its agent.
func (p *powerFencer) Config(node string) (string, string, bool) {
	objs, err := p.configs.List(labels.Everything())
	if err != nil {
		return "", "", false
	}
	list := make([]fencingv1alpha1.FenceAgentConfig, 0, len(objs))
	for _, o := range objs {
		c, err := fencingv1alpha1.FenceAgentConfigFromUnstructured(o)
		if err != nil {
			continue
		}
		list = append(list, *c)
	}
	cfg, err := powerfence.ConfigFor(list, node)
	if err != nil {
		return "", "", false
	}
	return cfg.Name, cfg.Spec.Agent, true
}

// FenceAgentConfigsServed reports whether the FenceAgentConfig API is
// installed; without it there is no power fencing, and the failover says so.
func FenceAgentConfigsServed(ctx context.Context, d discovery.DiscoveryInterface) bool {
	list, err := d.ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String())
	if err == nil {
		for _, r := range list.APIResources {
			if r.Name == contract.FenceAgentConfigResource {
				return true
			}
		}
	}
	klog.FromContext(ctx).Info("Power fencing is off: the FenceAgentConfig CRD is not installed (deploy/kubernetes/base/crd-fenceagentconfigs.yaml)")
	return false
}
