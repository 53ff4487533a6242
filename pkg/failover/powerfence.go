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
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
)

// PowerFencer is the power backend as the failover controller uses it.
type PowerFencer interface {
	// Config names the FenceAgentConfig listing the node and its agent,
	// from a cache (ok false: no config lists the node).
	Config(node string) (config, agent string, ok bool)
	// Fence powers the node off and confirms it (powerfence.Backend).
	Fence(ctx context.Context, node string) (powerfence.Result, error)
}

// powerConfigured reports whether the node can be power-fenced.
func (c *Controller) powerConfigured(node string) bool {
	if c.power == nil || !c.backendEnabled(fencingv1alpha1.BackendPower) {
		return false
	}
	_, _, ok := c.power.Config(node)
	return ok
}

// powerBackend powers the node off through its fence agent (powerFence).
type powerBackend struct{ c *Controller }

func (b powerBackend) configured(node *v1.Node) bool { return b.c.powerConfigured(node.Name) }

func (b powerBackend) fence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest, why string) (*fencingv1alpha1.FencingRequest, bool, error) {
	klog.FromContext(ctx).V(2).Info("Escalating to a power fence", "why", why)
	b.c.recorder.Eventf(node, v1.EventTypeWarning, "FenceEscalated", "Node %s: %s; powering it off", node.Name, why)
	fr, err := b.c.powerFence(ctx, node, fr)
	return fr, err == nil, err
}

// powerFence powers the node off through its fence agent, write-ahead: the
// intent is in the record before the agent runs (S8); a live read finds the
// node down just before (S4); the outcome, with the agent's redacted output
// (S7), after. It returns the record read back.
func (c *Controller) powerFence(ctx context.Context, node *v1.Node, fr *fencingv1alpha1.FencingRequest) (*fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx)
	const backend = fencingv1alpha1.BackendPower
	config, agent, _ := c.power.Config(node.Name)
	if err := fencerecord.RecordNodeFenceIntent(ctx, c.frClient, node.Name, "NodeUnreachable", backend, config, agent); err != nil {
		return fr, fmt.Errorf("recording the power fence intent: %w", err)
	}
	// The intent is recorded: from here on the node may be off. It is
	// powered off only if it is down by a live read now, not a cache.
	if err := c.down(ctx, node.Name); err != nil {
		_ = fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, node.Name, backend, false, "not sent: "+err.Error(), "", nil)
		return c.readRecord(ctx, node.Name, fr, fmt.Errorf("not powering off node %s: %w", node.Name, err))
	}
	// The not-Ready episode the power off ends: its confirmation holds
	// only while the node's Ready condition has not transitioned since.
	var notReadySince *metav1.Time
	if live, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		notReadySince = fencerecord.ReadyTransition(live)
	}
	backendAttempts.WithLabelValues(backend).Inc()
	start := time.Now()
	res, fenceErr := c.power.Fence(ctx, node.Name)
	backendDuration.WithLabelValues(backend).Observe(time.Since(start).Seconds())
	confirmed := fenceErr == nil && res.Confirmed
	msg := ""
	if !confirmed {
		backendFailures.WithLabelValues(backend).Inc()
		if fenceErr == nil {
			fenceErr = errors.New("the agent did not confirm the node off")
		}
		msg = fenceErr.Error()
	}
	if err := fencerecord.RecordNodeFenceOutcome(ctx, c.frClient, node.Name, backend, confirmed, msg, stepsOutput(res), notReadySince); err != nil {
		return fr, fmt.Errorf("recording the power fence outcome: %w", err)
	}
	if !confirmed {
		logger.Error(fenceErr, "Power fence failed", "config", config, "agent", agent)
		c.recorder.Eventf(node, v1.EventTypeWarning, "PowerFenceFailed", "Powering off node %s (FenceAgentConfig %s, %s) failed; nothing moves until a fence is confirmed: %v", node.Name, config, agent, fenceErr)
		return c.readRecord(ctx, node.Name, fr, fmt.Errorf("power fence of node %s: %w", node.Name, fenceErr))
	}
	logger.Info("Node powered off", "config", config, "agent", agent, "duration", time.Since(start))
	c.recorder.Eventf(node, v1.EventTypeWarning, "NodePoweredOff", "Node %s powered off by %s (FenceAgentConfig %s), confirmed by its status", node.Name, agent, config)
	fr, err := c.readRecord(ctx, node.Name, fr, nil)
	if err != nil {
		return fr, err
	}
	return fr, c.addOutOfServiceTaint(ctx, node)
}

// stepsOutput is what the record keeps of the agent's runs: one line per
// run, already redacted by powerfence, bounded.
func stepsOutput(res powerfence.Result) string {
	var b strings.Builder
	for _, s := range res.Steps {
		fmt.Fprintf(&b, "%s #%d exit %d", s.Action, s.Attempt, s.ExitCode)
		if s.Error != "" {
			fmt.Fprintf(&b, ": %s", s.Error)
		}
		if out := strings.TrimSpace(s.Output); out != "" {
			fmt.Fprintf(&b, ": %s", lastLine(out))
		}
		b.WriteByte('\n')
	}
	const max = 2048
	out := b.String()
	if len(out) > max {
		out = "..." + out[len(out)-max:]
	}
	return out
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
