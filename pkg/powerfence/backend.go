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

package powerfence

import (
	"context"
	"time"
)

// Backend power-fences nodes. It is what the failover controller's
// node-fencing state machine calls when it escalates beyond storage fencing
// (or when a node's drivers cannot fence storage at all):
//
//   - Fence powers the node off and returns nil only once the node's fence
//     agent reported it off (Result.Confirmed): a node confirmed off may have
//     its volumes moved (S1) and counts as wholly fenced (S9). The caller
//     records its intent before calling (S8) and keeps the Result (no secret
//     in it, S7).
//   - errors.Is(err, ErrNodeNotConfigured) says no FenceAgentConfig lists the
//     node: there is no power fence for it, and trying again will not help
//     until an admin adds one.
//   - PowerOn powers a fenced node back on, for a caller that returns nodes
//     to service itself; Status reads the power state.
//
// Every call resolves the node's configuration and credentials afresh.
type Backend interface {
	Fence(ctx context.Context, node string) (Result, error)
	PowerOn(ctx context.Context, node string) (Result, error)
	Status(ctx context.Context, node string) (Result, error)
}

// NewBackend returns the Backend that runs fence agents in this process as
// configured by FenceAgentConfigs, resolved by r.
func NewBackend(r *Resolver) Backend {
	return &agentBackend{resolver: r}
}

type agentBackend struct {
	resolver *Resolver
}

func (b *agentBackend) Fence(ctx context.Context, node string) (Result, error) {
	return b.do(ctx, node, ActionOff, (*Target).Fence)
}

func (b *agentBackend) PowerOn(ctx context.Context, node string) (Result, error) {
	return b.do(ctx, node, ActionOn, (*Target).PowerOn)
}

func (b *agentBackend) Status(ctx context.Context, node string) (Result, error) {
	return b.do(ctx, node, ActionStatus, (*Target).Status)
}

func (b *agentBackend) do(ctx context.Context, node string, action Action, f func(*Target, context.Context) (Result, error)) (Result, error) {
	t, err := b.resolver.Resolve(ctx, node)
	if err != nil {
		now := time.Now()
		return Result{Node: node, Action: action, State: PowerUnknown, StartTime: now, EndTime: now}, err
	}
	return f(t, ctx)
}
