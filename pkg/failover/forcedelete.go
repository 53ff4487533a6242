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

package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// deleteFenced is the pod GC's SafeDetach rule: each candidate whose every
// volume is confirmed fenced (or whose node is confirmed off) goes, if the
// node is still down by a live read (S3, in the guarded delete). As a pod
// goes, once that live read found the node down and before the pod is
// marked Failed, the fenced attachments of the volumes that no other pod on
// the node (pods, the cache's) still uses go too: each volume is free to
// attach elsewhere as soon as its last pod goes, not when the node's last
// pod does, and the attach/detach controller's detach, which the pod's
// Failed phase starts, finds the attachment gone and does not wait for it.
func (c *Controller) deleteFenced(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, candidates []candidate, pods []*v1.Pod) error {
	nodeOff := c.nodeFencedLive(ctx, node, fr)
	var ready []*v1.Pod
	for _, cand := range candidates {
		if ok, why := podgc.SafeDetach(cand.pod, cand.vols, c.failsOver(node), func(v podgc.Volume) bool {
			return nodeOff || fencerecord.IsFenced(fr, v.Driver, v.VolumeHandle)
		}); !ok {
			klog.FromContext(ctx).V(2).Info("Pod waits", "pod", klog.KObj(cand.pod), "why", why)
			continue
		}
		ready = append(ready, cand.pod)
	}
	if len(ready) == 0 {
		return nil
	}
	vas, cacheErr := c.vasOn(node.Name)
	users := c.volumeUsers(pods)
	// Each pod's volumes, so that the pod that goes looks at its own.
	pvsOf := map[types.UID][]string{}
	for pv, uids := range users {
		for _, uid := range uids {
			pvsOf[uid] = append(pvsOf[uid], pv)
		}
	}
	var (
		mu         sync.Mutex
		going      = map[types.UID]bool{}
		releaseErr error
	)
	deleteErr := c.forceDeleteAll(ctx, node.Name, ready, func(*v1.Pod) string { return podgc.ReasonSafeDetach }, func(p *v1.Pod) {
		// The pods that share a volume decide under one lock: the
		// last of them to go frees it.
		mu.Lock()
		going[p.UID] = true
		freed := map[string]bool{}
		for _, pv := range pvsOf[p.UID] {
			if !slices.ContainsFunc(users[pv], func(uid types.UID) bool { return !going[uid] }) {
				freed[pv] = true
			}
		}
		mu.Unlock()
		if err := c.releaseFencedAttachments(ctx, node.Name, fr, vas, freed); err != nil {
			mu.Lock()
			releaseErr = errors.Join(releaseErr, err)
			mu.Unlock()
		}
	}, c.eligible.deleted)
	return errors.Join(cacheErr, releaseErr, deleteErr)
}

// nodeFencedLive reports whether the node is confirmed off by the record
// and, by a live read, has not been Ready since: the pod GC deletes pods
// on that, so a node powered back on since must not pass on a cache.
func (c *Controller) nodeFencedLive(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) bool {
	if !fencerecord.NodeFenced(fr, node) {
		return false
	}
	live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	return err == nil && fencerecord.NodeFenced(fr, live)
}

// forceDeleteWorkers is how many of a node's pods the pod GC deletes at
// once. Each delete is a live read of the node, shared by the deletes that
// ask at the same time (pkg/nodehealth), and three writes (the pod's
// condition, the pod, its fenced attachments), one after another: it is
// round trips, not work, and the API client's rate limit
// (--failover-kube-api-qps) is to pace them, not the workers. With 16, a
// 110-pod node's deletes took 2.6 s at 300 QPS (about 42 pods a second,
// each worker waiting on four round trips of about 90 ms on a loaded
// control plane), under half what the rate allowed; with 64, 1.4 to 1.7 s.
// Measured with fence-bench on KWOK nodes (the failed node's kubelet
// simulated, the mock driver) on a 2-core machine, not on real nodes.
const forceDeleteWorkers = 64

// forceDeleteAll hands each pod to the pod GC's one guarded delete, which
// reads the node live and refuses if it is alive (S3), for the reason that
// reason gives it, forceDeleteWorkers at a time. From the worker that
// deletes a pod, going is called once the live read found the node down,
// before the pod is marked Failed (podgc.GC.ForceDelete), and gone after
// the pod went; either may be nil. It returns the errors of the pods that
// did not go, so that the pass is retried with the queue's backoff: nothing
// else queues the node again before the resync, since a refused write
// changes no object.
//
// The pods that asked for their termination reason (termreason.OptedIn)
// get it recorded in the node's FencingRequest first, in one write: their
// containers' preStop hooks run when the node is back, once the pod and the
// ServiceAccount token bound to it are gone from the API, and the node's
// agent serves the reason from the record. A record that cannot be written
// does not hold up the failover: those hooks get Unknown.
func (c *Controller) forceDeleteAll(ctx context.Context, nodeName string, pods []*v1.Pod, reason func(*v1.Pod) string, going, gone func(*v1.Pod)) error {
	var record []fencingv1alpha1.ForceDeletedPod
	for _, pod := range pods {
		if termreason.OptedIn(pod) {
			record = append(record, fencingv1alpha1.ForceDeletedPod{
				Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, TerminationReason: podgc.TerminationReason(pod)})
		}
	}
	if err := fencerecord.RecordForceDeletedPods(ctx, c.frClient, nodeName, record); err != nil {
		klog.FromContext(ctx).Error(err, "Termination reasons not recorded; the pods' preStop hooks will get Unknown", "pods", len(record))
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	workqueue.ParallelizeUntil(ctx, forceDeleteWorkers, len(pods), func(i int) {
		pod, why := pods[i], reason(pods[i])
		msg := fmt.Sprintf("csi-fence-attacher: node %s is not Ready (%s)", nodeName, why)
		var before func()
		if going != nil {
			before = func() { going(pod) }
		}
		if err := c.pgc.ForceDelete(ctx, pod, why, podgc.TerminationReason(pod), msg, before); err != nil {
			klog.FromContext(ctx).Error(err, "Pod not force-deleted", "pod", klog.KObj(pod), "reason", why)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return
		}
		if gone != nil {
			gone(pod)
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d pods not force-deleted: %w", len(errs), len(pods), errors.Join(errs...))
	}
	return nil
}
