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

package nodehealth

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Heartbeats is an Observer fed by an informer on the kubelets' heartbeat
// Leases: from Start on, it times every renewal on this process's clock.
//
// A replica must start it before it leads, standby or not: an Observer
// that starts watching when its replica takes over sees every Lease for
// the first time then, and calls no node down for a whole lease duration
// after each hand-over, however long the node has been silent.
type Heartbeats struct {
	*Observer
	factory informers.SharedInformerFactory
	handled cache.InformerSynced
}

// NewHeartbeats returns the watch of the heartbeat Leases through client,
// timed on c (nil: the real clock). Its Observer's live reads use client.
func NewHeartbeats(client kubernetes.Interface, resync time.Duration, c clock.PassiveClock) (*Heartbeats, error) {
	if c == nil {
		c = clock.RealClock{}
	}
	h := &Heartbeats{
		Observer: NewObserverWithClock(client, c),
		factory:  informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(LeaseNamespace)),
	}
	handled, err := h.factory.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { h.heartbeat(o, false) },
		UpdateFunc: func(_, o interface{}) { h.heartbeat(o, false) },
		DeleteFunc: func(o interface{}) { h.heartbeat(o, true) },
	})
	if err != nil {
		return nil, err
	}
	h.handled = handled.HasSynced
	return h, nil
}

// Start starts the watch until stop is closed. It does not block; a second
// call does nothing more.
func (h *Heartbeats) Start(stop <-chan struct{}) {
	h.factory.Start(stop)
}

// HasSynced reports whether every Lease of the watch's first list has been
// observed.
func (h *Heartbeats) HasSynced() bool {
	return h.handled()
}

// heartbeat hands a kubelet's Lease to the Observer.
func (h *Heartbeats) heartbeat(o interface{}, deleted bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	// A deleted Lease is not forgotten here: its last renewal still
	// counts until a lease duration has passed (Observer.Check).
	if l, ok := o.(*coordinationv1.Lease); ok && !deleted {
		h.Observe(l)
	}
}
