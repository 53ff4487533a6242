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
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/podgc"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// Node-level fencing: when fencing the storage of a dead node cannot free
// its pods (a driver without UNPUBLISH_FENCE, a driver refusing), the owner
// of node-level state escalates to the backends the admin configured
// (--fencing-backends), in their order, each a nodeBackend: a power fence
// through the node's fence agent (powerfence.go), the deletion of its
// Cluster API Machine (machinefence.go), KEP-2268's out-of-service taint
// where every driver on the node fences on it (outofservice.go). A
// node confirmed off is fenced as a whole (S9): FencingComplete, the
// out-of-service taint (KEP-2268) with its provenance, so that the pod GCs
// and the unmodified attach/detach controller move every driver's volumes.
// When the node is back (powered on by someone) and clean, the taint goes
// with the quarantine, never by time.

// backendEnabled reports whether the admin configured backend.
func (c *Controller) backendEnabled(backend string) bool {
	return slices.Contains(c.opts.Backends, backend)
}

// storageFences reports whether driver's volumes are fenced by storage
// fencing: the backend is on and the driver can fence, with the fence
// field or with an unpublish its owner declared revokes access (this
// driver by its capabilities and its CSIDriver as cached, another one by
// its registration). It decides whether to wait for the storage fence or
// to try another backend, never whether anything moves: only a fence
// recorded done does that.
func (c *Controller) storageFences(driver string) bool {
	if !c.backendEnabled(fencingv1alpha1.BackendStorage) {
		return false
	}
	if driver == c.opts.DriverName {
		return c.cachedFenceMode().Fences()
	}
	return c.registry.canFence(driver)
}

// needsNodeFence reports whether storage fencing alone cannot free the
// candidates: the power fence comes first, or one of their volumes is of a
// driver that does not fence (protection.NeedsNodeFence), or its fence
// failed. A candidate whose volumes are all fenced needs nothing.
func (c *Controller) needsNodeFence(fr *fencingv1alpha1.FencingRequest, candidates []candidate) (bool, string) {
	var vols []podgc.Volume
	for _, cand := range candidates {
		vols = append(vols, cand.vols...)
	}
	if need, why := protection.NeedsNodeFence(c.opts.Backends, vols, c.storageFences); need {
		return true, why
	}
	for _, v := range vols {
		if e := fencerecord.Find(fr, v.Driver, v.VolumeHandle); e != nil && e.FencedTime == nil && e.CleanedTime == nil && e.FenceError != "" {
			return true, fmt.Sprintf("driver %s failed to fence volume %s: %s", v.Driver, v.PVName, e.FenceError)
		}
	}
	return false, ""
}

// fenceNodeLevel is the owner's node-level step for a dead node, after the
// storage fences of this pass: it powers the node off when storage fencing
// cannot free its candidates, and marks a node confirmed off out of service.
// It returns the record read back.
func (c *Controller) fenceNodeLevel(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, candidates []candidate) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	if fencerecord.NodeFenced(fr, node) {
		return fr, c.addOutOfServiceTaint(ctx, node)
	}
	need, why := c.needsNodeFence(fr, candidates)
	if !need {
		return fr, nil
	}
	// The node-level backends in the admin's order; one that fails lets
	// the next one try.
	var errs error
	for _, name := range protection.NodeBackends(c.opts.Backends, func(name string) bool {
		b := c.nodeBackend(name)
		return b != nil && b.configured(node)
	}) {
		b := c.nodeBackend(name)
		var done bool
		var err error
		fr, done, err = b.fence(ctx, node, fr, why)
		if done {
			return fr, errors.Join(errs, err)
		}
		errs = errors.Join(errs, err)
	}
	if errs != nil {
		return fr, errs
	}
	logger.V(2).Info("Storage fencing cannot free the node's pods and no node-level backend can fence it", "why", why)
	c.recorder.Eventf(node, v1.EventTypeWarning, "NoFencingBackend", "Node %s: %s, and no other backend can fence it (--fencing-backends=%s: no FenceAgentConfig lists it, no Cluster API Machine owns it, or not every driver on it fences on the out-of-service taint)",
		node.Name, why, strings.Join(c.opts.Backends, ","))
	return fr, nil
}

// nodeBackend is a node-level fencing backend, as fenceNodeLevel uses it.
type nodeBackend interface {
	// configured reports whether the backend can fence node.
	configured(node *v1.Node) bool
	// fence takes one pass of the backend's fence of node, which storage
	// fencing cannot free (why). It returns the record read back, and
	// done when the backend has taken the node, fenced or waiting for its
	// infrastructure: no later backend acts on it then. An error with done
	// false lets the next backend try.
	fence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, why string) (_ *fencingv1alpha1.FencingRequest, done bool, err error)
}

// nodeBackend returns the backend of a --fencing-backends name (nil for
// storage, which is not node-level).
func (c *Controller) nodeBackend(name string) nodeBackend {
	switch name {
	case fencingv1alpha1.BackendPower:
		return powerBackend{c}
	case fencingv1alpha1.BackendMachine:
		return machineBackend{c}
	case fencingv1alpha1.BackendOutOfService:
		return outOfServiceBackend{c}
	}
	return nil
}

// readRecord reads the node's record back live after a write; it returns
// err (the step's own outcome) unless the read failed.
func (c *Controller) readRecord(ctx context.Context, nodeName string, fr *fencingv1alpha1.FencingRequest, err error) (*fencingv1alpha1.FencingRequest, error) {
	got, gerr := c.frClient.Get(ctx, nodeName)
	if gerr != nil {
		return fr, errors.Join(err, gerr)
	}
	return got, err
}
