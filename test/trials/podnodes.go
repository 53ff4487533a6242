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

package trials

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podNodes remembers, for each pod of a trial's namespace, the node it was
// bound to and when it was seen gone. The audit log names a deleted pod only
// by its name, which a StatefulSet's replacement reuses: S3 is judged on the
// node of the pod that a delete removed, not on the replica's first node
// (a replacement may be bound to another node that failed, and be
// force-deleted there while the first node is back and Ready).
type podNodes struct {
	mu   sync.Mutex
	pods map[string][]podLife // by name, in the order first seen
}

// podLife is one pod object: its node, and when its deletion was seen
// (zero while it exists).
type podLife struct {
	uid  types.UID
	node string
	gone time.Time
}

// watch follows the pods of namespace until stop is closed.
func (p *podNodes) watch(client kubernetes.Interface, namespace string, stop <-chan struct{}) error {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", namespace, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	seen := func(o interface{}) {
		if pod, ok := o.(*corev1.Pod); ok {
			p.bound(pod.Name, pod.UID, pod.Spec.NodeName)
		}
	}
	gone := func(o interface{}) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if pod, ok := o.(*corev1.Pod); ok {
			p.deleted(pod.Name, pod.UID, pod.Spec.NodeName, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o interface{}) { seen(o) }, DeleteFunc: gone}); err != nil {
		return err
	}
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		return fmt.Errorf("pods of %s: cache not synced", namespace)
	}
	return nil
}

func (p *podNodes) life(name string, uid types.UID) *podLife {
	if p.pods == nil {
		p.pods = map[string][]podLife{}
	}
	for i := range p.pods[name] {
		if p.pods[name][i].uid == uid {
			return &p.pods[name][i]
		}
	}
	p.pods[name] = append(p.pods[name], podLife{uid: uid})
	return &p.pods[name][len(p.pods[name])-1]
}

func (p *podNodes) bound(name string, uid types.UID, node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.life(name, uid); node != "" {
		l.node = node
	}
}

func (p *podNodes) deleted(name string, uid types.UID, node string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.life(name, uid)
	if node != "" {
		l.node = node
	}
	if l.gone.IsZero() {
		l.gone = at
	}
}

// nodeOfDeleted returns the node of the pod called name that a delete at
// (the apiserver's time) removed: the first of that name seen gone after
// it, the one deleted then. Without one (not watched, or not bound),
// fallback.
func (p *podNodes) nodeOfDeleted(name string, at time.Time, fallback string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *podLife
	for i := range p.pods[name] {
		l := &p.pods[name][i]
		if l.gone.IsZero() || l.gone.Before(at) || l.node == "" {
			continue
		}
		if best == nil || l.gone.Before(best.gone) {
			best = l
		}
	}
	if best == nil {
		return fallback
	}
	return best.node
}
