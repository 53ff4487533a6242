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
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/leadership"
)

// Owner says whether this controller owns node-level fencing state now.
type Owner interface {
	IsOwner() bool
}

// errNotOwner stops a pass that lost the ownership of node-level state
// while it ran.
var errNotOwner = errors.New("this controller no longer owns node-level fencing state: the new owner goes on with the node")

// stillOwner returns errNotOwner once this controller no longer owns
// node-level state. A pass decides its part by the ownership at its start,
// and a power or machine fence may outlast that ownership: the node-level
// writes after such a step check it again.
func (c *Controller) stillOwner() error {
	if c.owner.IsOwner() {
		return nil
	}
	return errNotOwner
}

// AlwaysOwner is the owner of a controller that is alone by construction
// (unit tests, a single-driver setup without leader election).
type AlwaysOwner struct{}

func (AlwaysOwner) IsOwner() bool { return true }

// ElectionConfig is how the node-fencing Lease is held: external-attacher's
// --leader-election-* flags.
type ElectionConfig struct {
	// Client renews the Lease: a client of its own, never starved by the
	// workers' throttled requests.
	Client        kubernetes.Interface
	Namespace     string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// leaseOwner holds the node-fencing Lease through client-go's leader
// election. Losing it (a partition, a slow apiserver) only stops the
// node-level writes of this controller: the attacher and the driver's own
// fences go on under the driver's Lease, and it runs for the Lease again.
type leaseOwner struct {
	owner atomic.Bool
}

func (o *leaseOwner) IsOwner() bool { return o.owner.Load() }

// runElection runs for the node-fencing Lease until ctx is done, calling
// changed each time this controller becomes or stops being the owner. The
// Lease is released when ctx is done (client-go releases it before its Run
// returns), so that another controller, of this driver's next leader or of
// another driver, takes over at once on a rolling update; it returns after
// that.
func (o *leaseOwner) runElection(ctx context.Context, cfg ElectionConfig, changed func()) {
	logger := klog.FromContext(ctx)
	leadership.Register()
	leadership.Set(contract.NodeFencingLeaseName, false)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: contract.NodeFencingLeaseName, Namespace: cfg.Namespace},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   cfg.LeaseDuration,
			RenewDeadline:   cfg.RenewDeadline,
			RetryPeriod:     cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            contract.NodeFencingLeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					logger.Info("Owning node-level fencing state", "lease", contract.NodeFencingLeaseName, "identity", cfg.Identity)
					o.owner.Store(true)
					leadership.Set(contract.NodeFencingLeaseName, true)
					changed()
				},
				OnStoppedLeading: func() {
					logger.Info("No longer owning node-level fencing state", "lease", contract.NodeFencingLeaseName, "identity", cfg.Identity)
					o.owner.Store(false)
					leadership.Set(contract.NodeFencingLeaseName, false)
					changed()
				},
			},
		})
		if err != nil {
			logger.Error(err, "Cannot run for the node-fencing Lease")
			return
		}
		le.Run(ctx)
	}, cfg.RetryPeriod)
}
