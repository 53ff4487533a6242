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

package main

import (
	"context"
	"testing"
	"time"
)

// waitDone fails the test unless ctx ends within a generous deadline.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the election's context did not end", what)
	}
}

// The order that keeps one leader at a time: on termination a leader's
// workers stop first, the Lease is released (the election's context ends)
// only once they have returned; a replica that does not lead lets go at
// once.
func TestReleaseOnTerm(t *testing.T) {
	tests := []struct {
		name string
		// termBeforeLead: terminated once the Lease was taken, before
		// the leader's function ran.
		termBeforeLead bool
		// loseLease ends the leader's context instead of terminating.
		loseLease bool
		// failsToStart: run returns at once, as runController's does when
		// the controller cannot be built; the Lease must be released all
		// the same, for a standby to take over at once.
		failsToStart bool
		wantRun      bool
	}{
		{name: "leader terminated", wantRun: true},
		{name: "leader loses the Lease", loseLease: true, wantRun: true},
		{name: "leader fails to start", failsToStart: true, wantRun: true},
		{name: "terminated while taking the Lease", termBeforeLead: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			term, terminate := context.WithCancel(context.Background())
			defer terminate()
			leaderCtx, lose := context.WithCancel(context.Background())
			defer lose()
			running := make(chan struct{})
			ran := false
			var electionCtx context.Context
			run := func(ctx context.Context) {
				ran = true
				close(running)
				if tc.failsToStart {
					return
				}
				<-ctx.Done()
				// The workers still run: the Lease must still be held.
				if electionCtx.Err() != nil {
					t.Error("the Lease was released while the workers still ran")
				}
			}
			var lead func(context.Context)
			var release context.CancelFunc
			electionCtx, lead, release = releaseOnTerm(context.Background(), term, run)
			defer release()
			if tc.termBeforeLead {
				terminate()
			}
			led := make(chan struct{})
			go func() {
				defer close(led)
				lead(leaderCtx)
			}()
			if tc.wantRun {
				<-running
				switch {
				case tc.failsToStart:
				case electionCtx.Err() != nil:
					t.Fatal("the election ended while leading")
				case tc.loseLease:
					lose()
				default:
					terminate()
				}
			}
			<-led
			if ran != tc.wantRun {
				t.Errorf("run called: %v, want %v", ran, tc.wantRun)
			}
			waitDone(t, electionCtx, tc.name)
		})
	}
}

// A replica that never leads exits on termination: its election ends
// without waiting for the Lease.
func TestReleaseOnTermStandby(t *testing.T) {
	term, terminate := context.WithCancel(context.Background())
	electionCtx, _, release := releaseOnTerm(context.Background(), term, func(context.Context) {
		t.Error("run called without the Lease")
	})
	defer release()
	if electionCtx.Err() != nil {
		t.Fatal("the election ended before termination")
	}
	terminate()
	waitDone(t, electionCtx, "standby")
}
