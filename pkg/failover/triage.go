package failover

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/podgc"
)

// triage sorts the pods of a node that may fail over.
type triage struct {
	// candidates are the Terminating pods that fail over once their
	// volumes are fenced (every volume node-local or of a SafeDetach
	// driver that can fence, none RWX, at least one of them a CSI volume).
	candidates []candidate
	// staying holds the volumes (driver^handle) of the pods that stay on
	// the node, which are not fenced under them.
	staying map[string]bool
	// blocked are the Terminating pods that storage fencing cannot move,
	// and why; optedOut those whose owner said no (FailoverAllowed).
	blocked, optedOut []podNote
}

// candidate is a Terminating pod that fails over once its volumes are fenced.
type candidate struct {
	pod  *v1.Pod
	vols []podgc.Volume
}

type podNote struct {
	pod *v1.Pod
	why string
}

// sort triages the pods of node from the caches; it has no effect (sayTriage
// says what it found).
func (c *Controller) sort(node *v1.Node, pods []*v1.Pod) triage {
	t := triage{staying: map[string]bool{}}
	for _, p := range pods {
		vols, err := podgc.Volumes(p, c.resolve(p.Namespace))
		if p.DeletionTimestamp == nil {
			for _, v := range vols {
				t.staying[v.Driver+"^"+v.VolumeHandle] = true
			}
			continue
		}
		if err != nil {
			t.blocked = append(t.blocked, podNote{p, err.Error()})
			continue
		}
		if ok, why := podgc.SafeDetach(p, vols, c.failsOver(node), func(podgc.Volume) bool { return true }); !ok {
			t.blocked = append(t.blocked, podNote{p, why})
			continue
		}
		var nsLabels map[string]string
		if ns, err := c.ns.Get(p.Namespace); err == nil {
			nsLabels = ns.Labels
		}
		if ok, why := podgc.FailoverAllowed(p, nsLabels, c.opts.FailoverOptIn); !ok {
			t.optedOut = append(t.optedOut, podNote{p, why})
			continue
		}
		t.candidates = append(t.candidates, candidate{pod: p, vols: vols})
	}
	return t
}

// sayTriage says why pods do not fail over, and starts timing the
// candidates' failover (the failover duration metric).
func (c *Controller) sayTriage(ctx context.Context, node *v1.Node, t triage) {
	for _, n := range t.blocked {
		c.blocked(ctx, node, n.pod, n.why)
	}
	for _, n := range t.optedOut {
		klog.FromContext(ctx).V(4).Info("Pod does not fail over", "pod", klog.KObj(n.pod), "why", n.why)
		c.recorder.Eventf(n.pod, v1.EventTypeNormal, "FailoverDisabled", "Not failing over pod %s: %s", n.pod.Name, n.why)
	}
	for _, cand := range t.candidates {
		c.eligible.seen(cand.pod)
	}
}
