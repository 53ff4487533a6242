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
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
)

// Health endpoints of the controller role, beside csi-lib-utils'
// /healthz/leader-election on the same --http-endpoint.
const (
	// ReadyzPath answers 503 while this replica leads and its caches have
	// not synced: it cannot attach nor detach anything yet.
	ReadyzPath = "/readyz"
	// SyncHealthzPath answers 503 once this replica has led for
	// SyncGracePeriod without its caches syncing: an informer the
	// ServiceAccount may not list or watch, which external-attacher would
	// wait for forever. A standby replica is healthy.
	SyncHealthzPath = "/healthz/informer-sync"
)

// SyncGracePeriod is how long a leader's caches may take to sync before the
// controller counts as unhealthy: far longer than a list of every object
// takes, far shorter than anyone would wait for an attach.
const SyncGracePeriod = 2 * time.Minute

// syncCheck lists the caches that have not synced.
type syncCheck func() []string

// SyncHealth follows whether the controller this replica runs has synced
// its caches, for the health endpoints.
type SyncHealth struct {
	mu     sync.Mutex
	since  time.Time // when this replica began to lead; zero: standby
	checks []syncCheck
	now    func() time.Time
}

// NewSyncHealth returns the health of a standby replica.
func NewSyncHealth() *SyncHealth { return &SyncHealth{now: time.Now} }

// Leading says this replica now runs the controller, whose caches are
// those of checks.
func (h *SyncHealth) Leading(checks ...syncCheck) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since = h.now()
	h.checks = checks
}

// Standby says this replica runs nothing (any more).
func (h *SyncHealth) Standby() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since = time.Time{}
	h.checks = nil
}

// status returns the caches not synced yet and for how long this replica
// has been leading (0: standby).
func (h *SyncHealth) status() ([]string, time.Duration) {
	h.mu.Lock()
	since, checks := h.since, h.checks
	h.mu.Unlock()
	if since.IsZero() {
		return nil, 0
	}
	var unsynced []string
	for _, c := range checks {
		unsynced = append(unsynced, c()...)
	}
	slices.Sort(unsynced)
	return unsynced, h.now().Sub(since)
}

// Install registers the health endpoints on mux.
func (h *SyncHealth) Install(mux *http.ServeMux) {
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		unsynced, leading := h.status()
		h.answer(w, len(unsynced) > 0, unsynced, leading)
	})
	mux.HandleFunc(SyncHealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		unsynced, leading := h.status()
		h.answer(w, len(unsynced) > 0 && leading >= SyncGracePeriod, unsynced, leading)
	})
}

func (h *SyncHealth) answer(w http.ResponseWriter, failing bool, unsynced []string, leading time.Duration) {
	switch {
	case failing:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "caches not synced after %s: %s (may the ServiceAccount list and watch them?)\n",
			leading.Round(time.Second), strings.Join(unsynced, ", "))
	case leading == 0:
		fmt.Fprintln(w, "ok: standby")
	case len(unsynced) > 0:
		fmt.Fprintf(w, "ok: syncing %s\n", strings.Join(unsynced, ", "))
	default:
		fmt.Fprintln(w, "ok")
	}
}

// factorySynced checks the caches of the informers factory has started.
// Its WaitForCacheSync, given a closed channel, looks once and returns.
func factorySynced(factory informers.SharedInformerFactory) syncCheck {
	return func() []string {
		var out []string
		for typ, ok := range factory.WaitForCacheSync(closed) {
			if !ok {
				out = append(out, typ.String())
			}
		}
		return out
	}
}

// dynamicFactorySynced is factorySynced for a dynamic factory, nil for
// none.
func dynamicFactorySynced(factory dynamicinformer.DynamicSharedInformerFactory) syncCheck {
	return func() []string {
		if factory == nil {
			return nil
		}
		var out []string
		for gvr, ok := range factory.WaitForCacheSync(closed) {
			if !ok {
				out = append(out, gvr.Resource+"."+gvr.Group)
			}
		}
		return out
	}
}

var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
