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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"k8s.io/klog/v2"
)

// Defaults of a Target's confirmation.
const (
	DefaultConfirmTimeout = 60 * time.Second
	DefaultStatusInterval = 2 * time.Second
)

// PowerState is a node's power as its fence agent reports it.
type PowerState string

const (
	PowerOn      PowerState = "On"
	PowerOff     PowerState = "Off"
	PowerUnknown PowerState = "Unknown"
)

// Result is what one fence (or power on, or status read) did: the record a
// caller keeps. It holds no secret: every Step's output is redacted.
type Result struct {
	Node string `json:"node"`
	// Config is the FenceAgentConfig the node's options came from.
	Config string `json:"config,omitempty"`
	Agent  string `json:"agent"`
	// Action is what was asked: off (a fence), on, or status.
	Action Action `json:"action"`
	// State is the power state the agent last reported.
	State PowerState `json:"state"`
	// Confirmed is true when the agent's status reported the state the
	// action asked for: Off for a fence, On for a power on (a status read
	// asks for none; State is its answer). Only a confirmed fence lets
	// volumes move.
	Confirmed bool `json:"confirmed"`
	// ActionError is the redacted error of the off (or on) itself, kept when
	// status confirmed the state anyway (the agent gave up waiting, the
	// answer was lost).
	ActionError string `json:"actionError,omitempty"`
	// StartTime, ActionTime (the off or on succeeded), ConfirmedTime and
	// EndTime time the fence; zero when it did not happen.
	StartTime     time.Time `json:"startTime"`
	ActionTime    time.Time `json:"actionTime,omitempty"`
	ConfirmedTime time.Time `json:"confirmedTime,omitempty"`
	EndTime       time.Time `json:"endTime"`
	// Steps are every agent run, in order.
	Steps []Step `json:"steps"`
}

// Target is one node's power switch: its agent and the bounds of a fence.
type Target struct {
	Node   string
	Config string
	Agent  *Agent
	// ConfirmTimeout bounds how long status is polled for the state asked.
	ConfirmTimeout time.Duration
	// StatusInterval is the pause between two status polls.
	StatusInterval time.Duration
}

func (t *Target) result(action Action) Result {
	return Result{Node: t.Node, Config: t.Config, Agent: agentName(t.Agent.Path), Action: action,
		State: PowerUnknown, StartTime: time.Now()}
}

func (t *Target) logger(ctx context.Context) klog.Logger {
	return klog.FromContext(ctx).WithValues("node", t.Node, "agent", agentName(t.Agent.Path), "config", t.Config)
}

// Fence powers the node off and confirms it: "off" (retried), then "status"
// until the agent reports off, within ConfirmTimeout. Status is polled even
// when off failed (the agent gave up waiting while the machine was still
// going down, or its answer was lost): what counts is a BMC that says the
// power is off. Only then is the error nil and Result.Confirmed true; a
// timeout or an unreachable BMC is a failure, never a success.
func (t *Target) Fence(ctx context.Context) (Result, error) {
	logger := t.logger(ctx)
	ctx = klog.NewContext(ctx, logger)
	res := t.result(ActionOff)
	logger.Info("Power-fencing node")

	steps, offErr := t.Agent.Run(ctx, ActionOff)
	res.Steps = append(res.Steps, steps...)
	if offErr == nil {
		res.ActionTime = time.Now()
	} else {
		res.ActionError = offErr.Error()
		if permanent(offErr) || ctx.Err() != nil {
			res.EndTime = time.Now()
			logger.Info("Power fence failed", "err", offErr)
			return res, fmt.Errorf("power fence of node %s: %w", t.Node, offErr)
		}
		logger.Info("Power off failed; checking whether the node is off anyway", "err", offErr)
	}

	err := t.confirm(ctx, &res, PowerOff)
	res.EndTime = time.Now()
	if err != nil {
		if offErr != nil {
			err = fmt.Errorf("%w (power off: %v)", err, offErr)
		}
		logger.Info("Power fence not confirmed", "err", err, "duration", res.EndTime.Sub(res.StartTime))
		return res, fmt.Errorf("power fence of node %s: %w", t.Node, err)
	}
	logger.Info("Node powered off and confirmed", "duration", res.EndTime.Sub(res.StartTime),
		"confirmedAfter", res.ConfirmedTime.Sub(res.StartTime))
	return res, nil
}

// PowerOn powers the node on ("on", retried) and reads its status once
// (the API does not ask agents to verify "on"). Result.Confirmed says
// whether that status was On.
func (t *Target) PowerOn(ctx context.Context) (Result, error) {
	logger := t.logger(ctx)
	ctx = klog.NewContext(ctx, logger)
	res := t.result(ActionOn)
	logger.Info("Powering node on")
	steps, err := t.Agent.Run(ctx, ActionOn)
	res.Steps = append(res.Steps, steps...)
	if err != nil {
		res.EndTime = time.Now()
		res.ActionError = err.Error()
		return res, fmt.Errorf("power on of node %s: %w", t.Node, err)
	}
	res.ActionTime = time.Now()
	state, step, err := t.poll(ctx, 1)
	res.Steps = append(res.Steps, step)
	res.State = state
	res.EndTime = time.Now()
	if err == nil && state == PowerOn {
		res.Confirmed, res.ConfirmedTime = true, res.EndTime
	}
	logger.Info("Node powered on", "state", state)
	return res, nil
}

// Status reads the node's power state ("status", retried) into
// Result.State.
func (t *Target) Status(ctx context.Context) (Result, error) {
	res := t.result(ActionStatus)
	steps, err := t.Agent.Run(ctx, ActionStatus)
	res.Steps = steps
	res.EndTime = time.Now()
	if err != nil {
		return res, fmt.Errorf("power status of node %s: %w", t.Node, err)
	}
	res.State = stateOf(steps[len(steps)-1].ExitCode)
	return res, nil
}

// confirm polls status until it reports want, within ConfirmTimeout. Each
// poll is a single run: the poll loop is the retry.
func (t *Target) confirm(ctx context.Context, res *Result, want PowerState) error {
	timeout := t.ConfirmTimeout
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout
	}
	interval := t.StatusInterval
	if interval <= 0 {
		interval = DefaultStatusInterval
	}
	confirmCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for attempt := 1; ; attempt++ {
		state, step, err := t.poll(confirmCtx, attempt)
		res.Steps = append(res.Steps, step)
		switch {
		case err == nil:
			res.State, lastErr = state, nil
			if state == want {
				res.Confirmed, res.ConfirmedTime = true, time.Now()
				return nil
			}
		case permanent(err):
			return err
		case confirmCtx.Err() != nil && attempt > 1:
			// The deadline cut this poll short: the previous poll's
			// answer says more about the node than "killed".
		default:
			lastErr = err
		}
		timer := time.NewTimer(interval)
		select {
		case <-confirmCtx.Done():
			timer.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if lastErr != nil {
				return fmt.Errorf("not confirmed %s within %v: %w", want, timeout, lastErr)
			}
			return fmt.Errorf("not confirmed %s within %v: the agent reports %s", want, timeout, res.State)
		case <-timer.C:
		}
	}
}

// poll is one status run.
func (t *Target) poll(ctx context.Context, attempt int) (PowerState, Step, error) {
	step, err := t.Agent.runOnce(ctx, ActionStatus, attempt)
	if err != nil {
		return PowerUnknown, step, err
	}
	return stateOf(step.ExitCode), step, nil
}

func stateOf(exitCode int) PowerState {
	switch exitCode {
	case exitSuccess:
		return PowerOn
	case exitOff:
		return PowerOff
	}
	return PowerUnknown
}

// permanent errors are not helped by another try.
func permanent(err error) bool {
	return err != nil && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) ||
		errors.Is(err, os.ErrPermission) || errors.Is(err, errInvalidOption))
}
