package sidecar

import (
	"context"

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
	powerfence.Backend
}

func newPowerFencer(client kubernetes.Interface, dyn dynamic.Interface, f dynamicinformer.DynamicSharedInformerFactory, allowed []string) *powerFencer {
	inf := f.ForResource(fencingv1alpha1.FenceAgentConfigResource)
	return &powerFencer{
		informer: inf.Informer(),
		configs:  inf.Lister(),
		Backend:  powerfence.NewBackend(&powerfence.Resolver{Dynamic: dyn, Kube: client, AllowedAgents: allowed}),
	}
}

// start runs the config cache and waits for it.
func (p *powerFencer) start(ctx context.Context) {
	go p.informer.Run(ctx.Done())
	cache.WaitForNamedCacheSync("csi-fence-power", ctx.Done(), p.informer.HasSynced)
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
