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

// Package fencemode says how the storage backend fences an attachment of a
// driver (issue 37): with the fence field of the CSI extension, when the
// driver advertises UNPUBLISH_FENCE; with a plain ControllerUnpublishVolume,
// when the driver's owner declared on its CSIDriver that a successful one
// revokes the node's access (contract.UnpublishRevokesAccessAnnotation); or
// not at all.
//
// The declaration is read live (Reader) by every step that sends a fence
// and so may let a volume move: a cached CSIDriver could still show a
// declaration its owner has withdrawn, and a plain unpublish recorded as a
// fence of a driver whose unpublish does not revoke access would let a
// second node publish the volume while the first still writes it (S1).
// Steps that only decide whether to wait for the storage fence or to try
// another backend may read it from a cache (Declared): a stale answer there
// delays a failover, it moves nothing.
package fencemode

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	storagev1client "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/liveread"
)

// Mode is how the storage backend fences one attachment of a driver. Its
// values appear in logs and in the driver's registration.
type Mode string

const (
	// None: the driver's attachments are not fenced by the storage backend.
	None Mode = "none"
	// FenceField: ControllerUnpublishVolume with fence=true; the driver
	// advertises UNPUBLISH_FENCE.
	FenceField Mode = "unpublish-fence"
	// RevokingUnpublish: a plain ControllerUnpublishVolume, which the
	// driver's owner declared revokes the node's access; the driver does
	// not advertise UNPUBLISH_FENCE, so the fence field is never sent.
	RevokingUnpublish Mode = "unpublish-revokes-access"
)

// Of is the mode of a driver that advertises UNPUBLISH_FENCE (canFence) or
// not, and whose declaration is declared or not. UNPUBLISH_FENCE wins: a
// driver that can be asked to fence is asked to.
func Of(canFence, declared bool) Mode {
	switch {
	case canFence:
		return FenceField
	case declared:
		return RevokingUnpublish
	}
	return None
}

// Fences reports whether the storage backend fences in this mode.
func (m Mode) Fences() bool { return m == FenceField || m == RevokingUnpublish }

// SendsFenceField reports whether the fence is ControllerUnpublishVolume
// with fence=true; otherwise a fence is a plain unpublish.
func (m Mode) SendsFenceField() bool { return m == FenceField }

// Declared reads the declaration on d (nil: no CSIDriver): true only for
// the exact value contract.UnpublishRevokesAccessTrue. Any other value is
// not a declaration, and the error says what was found and what was
// expected; no annotation is no declaration and no error.
func Declared(d *storagev1.CSIDriver) (bool, error) {
	if d == nil {
		return false, nil
	}
	v, ok := d.Annotations[contract.UnpublishRevokesAccessAnnotation]
	switch {
	case !ok:
		return false, nil
	case v == contract.UnpublishRevokesAccessTrue:
		return true, nil
	}
	return false, fmt.Errorf("CSIDriver %s has annotation %s=%q, expected %q: not taken as a declaration that its unpublish revokes access; its attachments are not fenced by detach",
		d.Name, contract.UnpublishRevokesAccessAnnotation, v, contract.UnpublishRevokesAccessTrue)
}

// EventReasonBadDeclaration is the reason of the Warning Event on a
// CSIDriver whose declaration has a value other than "true".
const EventReasonBadDeclaration = "InvalidFenceDeclaration"

// Reader reads one driver's declaration live. It is safe for concurrent
// use: reads at the same time share one GET (pkg/liveread), each begun
// after its callers asked.
type Reader struct {
	client   storagev1client.CSIDriversGetter
	driver   string
	recorder record.EventRecorder

	reads liveread.Group[*storagev1.CSIDriver]
	mu    sync.Mutex
	// said is the last notice logged, so that each is said once per
	// change, not at every read.
	said string
}

// NewReader returns a Reader of driver's CSIDriver through client (nil:
// the sidecar may not read CSIDrivers, and nothing is ever declared).
// recorder (nil: none) gets a Warning Event on a CSIDriver whose
// annotation has a value other than "true".
func NewReader(client storagev1client.CSIDriversGetter, driver string, recorder record.EventRecorder) *Reader {
	return &Reader{client: client, driver: driver, recorder: recorder}
}

// Mode returns the driver's mode now: FenceField when it advertises
// UNPUBLISH_FENCE (canFence), without a read; else RevokingUnpublish when
// its CSIDriver, read live, carries the declaration; else None. A read
// that fails for a reason that may pass (the apiserver unreachable, a
// timeout) is an error: the caller sends nothing and retries. A CSIDriver
// that does not exist or may not be read (Forbidden), and an annotation
// with another value, are no declaration, said once in the log (and in an
// Event on the CSIDriver for a bad value).
func (r *Reader) Mode(ctx context.Context, canFence bool) (Mode, error) {
	if canFence {
		return FenceField, nil
	}
	if r == nil || r.client == nil {
		return None, nil
	}
	d, err := r.reads.Do(ctx, r.driver, func(ctx context.Context) (*storagev1.CSIDriver, error) {
		return r.client.CSIDrivers().Get(ctx, r.driver, metav1.GetOptions{})
	})
	switch {
	case apierrors.IsNotFound(err):
		r.say(ctx, nil, "", nil)
		return None, nil
	case apierrors.IsForbidden(err):
		r.say(ctx, nil, "the sidecar may not read CSIDrivers: its attachments are not fenced by detach", err)
		return None, nil
	case err != nil:
		return None, fmt.Errorf("reading CSIDriver %s for its declaration %s: %w", r.driver, contract.UnpublishRevokesAccessAnnotation, err)
	}
	declared, bad := Declared(d)
	if bad != nil {
		r.say(ctx, d, bad.Error(), nil)
		return None, nil
	}
	r.say(ctx, nil, "", nil)
	return Of(false, declared), nil
}

// Cached is Mode on d, the driver's CSIDriver from a cache (nil: none),
// for the steps that may read a cache (see the package's comment). It says
// a bad value as Mode does, once per change.
func (r *Reader) Cached(ctx context.Context, d *storagev1.CSIDriver, canFence bool) Mode {
	if !canFence {
		if _, bad := Declared(d); bad != nil {
			r.say(ctx, d, bad.Error(), nil)
		} else {
			r.say(ctx, nil, "", nil)
		}
	}
	return OfDriver(d, canFence)
}

// OfDriver is the mode of a driver that advertises UNPUBLISH_FENCE or not
// (canFence) and whose CSIDriver is d (nil: none), a bad declaration taken
// as none; it says nothing. For a step that may read a cache.
func OfDriver(d *storagev1.CSIDriver, canFence bool) Mode {
	declared, bad := Declared(d)
	return Of(canFence, declared && bad == nil)
}

// say logs notice (and records it on d, when given) if it differs from the
// last one said; "" only forgets the last one.
func (r *Reader) say(ctx context.Context, d *storagev1.CSIDriver, notice string, err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	news := notice != r.said
	r.said = notice
	r.mu.Unlock()
	if !news || notice == "" {
		return
	}
	logger := klog.FromContext(ctx)
	if err != nil {
		logger.Error(err, "Cannot read the driver's declaration that its unpublish revokes access", "driver", r.driver, "annotation", contract.UnpublishRevokesAccessAnnotation, "why", notice)
		return
	}
	logger.Info("Warning: ignoring the driver's declaration that its unpublish revokes access", "driver", r.driver, "annotation", contract.UnpublishRevokesAccessAnnotation, "why", notice)
	if d != nil && r.recorder != nil {
		r.recorder.Event(d, v1.EventTypeWarning, EventReasonBadDeclaration, notice)
	}
}
