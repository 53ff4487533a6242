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
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// A fence is off, then status until off; only a status that says off
// confirms it, and a timeout is a failure.
func TestTargetFence(t *testing.T) {
	tests := []struct {
		name          string
		plans         map[Action][]int
		wantErr       string
		wantConfirmed bool
		wantState     PowerState
		wantOff       int
		wantStatus    int
		wantActionErr bool
	}{
		{
			name:          "off, then status says off",
			plans:         map[Action][]int{ActionOff: {0}, ActionStatus: {2}},
			wantConfirmed: true, wantState: PowerOff, wantOff: 1, wantStatus: 1,
		},
		{
			name:          "the machine takes a while to go down",
			plans:         map[Action][]int{ActionOff: {0}, ActionStatus: {0, 0, 2}},
			wantConfirmed: true, wantState: PowerOff, wantOff: 1, wantStatus: 3,
		},
		{
			name:          "the BMC is briefly unreachable while confirming",
			plans:         map[Action][]int{ActionOff: {0}, ActionStatus: {1, 2}},
			wantConfirmed: true, wantState: PowerOff, wantOff: 1, wantStatus: 2,
		},
		{
			name:          "off retried",
			plans:         map[Action][]int{ActionOff: {1, 0}, ActionStatus: {2}},
			wantConfirmed: true, wantState: PowerOff, wantOff: 2, wantStatus: 1,
		},
		{
			name:          "off failed (the agent gave up waiting) but the BMC says off",
			plans:         map[Action][]int{ActionOff: {1}, ActionStatus: {0, 2}},
			wantConfirmed: true, wantState: PowerOff, wantOff: 2, wantStatus: 2, wantActionErr: true,
		},
		{
			name:    "still on at the confirm timeout",
			plans:   map[Action][]int{ActionOff: {0}, ActionStatus: {0}},
			wantErr: "not confirmed Off within 2s: the agent reports On", wantState: PowerOn, wantOff: 1,
		},
		{
			name:    "BMC unreachable",
			plans:   map[Action][]int{ActionOff: {1}, ActionStatus: {1}},
			wantErr: "not confirmed Off within 2s: fence agent status exited with 1", wantState: PowerUnknown, wantOff: 2, wantActionErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFakeAgent(t, tc.plans, "")
			target := &Target{Node: "node-1", Config: "rack-1",
				Agent:          &Agent{Path: f.path, Retries: 1, RetryInterval: time.Millisecond},
				ConfirmTimeout: 10 * time.Second, StatusInterval: 5 * time.Millisecond}
			if tc.wantErr != "" {
				// Only the cases that end at the confirm timeout wait for it.
				// Long enough for a loaded machine to start the fake agent
				// several times (a shorter one flaked under load).
				target.ConfirmTimeout = 2 * time.Second
			}
			res, err := target.Fence(ctx)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if res.Confirmed != tc.wantConfirmed || res.State != tc.wantState {
				t.Errorf("confirmed %v state %s, want %v %s", res.Confirmed, res.State, tc.wantConfirmed, tc.wantState)
			}
			if res.Confirmed == res.ConfirmedTime.IsZero() {
				t.Errorf("confirmed %v at %v", res.Confirmed, res.ConfirmedTime)
			}
			if (res.ActionError != "") != tc.wantActionErr {
				t.Errorf("action error %q", res.ActionError)
			}
			if got := f.calls(ActionOff); got != tc.wantOff {
				t.Errorf("off ran %d times, want %d", got, tc.wantOff)
			}
			if got := f.calls(ActionStatus); tc.wantStatus > 0 && got != tc.wantStatus {
				t.Errorf("status ran %d times, want %d", got, tc.wantStatus)
			}
			// Every run is a step; the confirm deadline may kill the last
			// poll before the agent counted it.
			runs := f.calls(ActionOff) + f.calls(ActionStatus)
			if extra := len(res.Steps) - runs; extra != 0 && (extra != 1 || res.Steps[len(res.Steps)-1].ExitCode != -1) {
				t.Errorf("%d steps for %d runs: %+v", len(res.Steps), runs, res.Steps)
			}
			if res.Node != "node-1" || res.Config != "rack-1" || res.Agent != "fence_fake" || res.Action != ActionOff ||
				res.EndTime.Before(res.StartTime) {
				t.Errorf("result %+v", res)
			}
		})
	}
}

// A fence whose agent cannot run stops at once: no status to poll.
func TestTargetFenceMissingAgent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	target := &Target{Node: "node-1", Agent: &Agent{Path: filepath.Join(t.TempDir(), "fence_gone"), Retries: 3}, ConfirmTimeout: time.Hour}
	res, err := target.Fence(ctx)
	if !errors.Is(err, os.ErrNotExist) || res.Confirmed || len(res.Steps) != 1 {
		t.Fatalf("result %+v, error %v", res, err)
	}
}

func TestTargetPowerOnAndStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFakeAgent(t, map[Action][]int{ActionOn: {0}, ActionStatus: {2, 0}}, "")
	target := &Target{Node: "node-1", Agent: &Agent{Path: f.path, RetryInterval: time.Millisecond}}
	res, err := target.Status(ctx)
	if err != nil || res.State != PowerOff {
		t.Fatalf("status %+v, %v; want Off", res, err)
	}
	res, err = target.PowerOn(ctx)
	if err != nil || !res.Confirmed || res.State != PowerOn || len(res.Steps) != 2 {
		t.Fatalf("power on %+v, %v; want confirmed On after on and status", res, err)
	}
}
