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
	"sync"
)

// releaseOnTerm wires csi-lib-utils' leader election with release on exit
// (RunWithLeaderElection with releaseOnExit: the Lease is released when the
// election's context ends) to a termination signal, in the order that keeps
// one leader at a time:
//
//   - a leader's workers stop when term ends, and only once run has
//     returned (its workers with it) does the election's context end, so
//     the Lease is released after the last worker, never beside one;
//   - a replica that does not lead ends the election's context at once: it
//     holds nothing, and waiting for the Lease would keep it from exiting.
//
// It returns the context to run the election in and the function to lead
// with; release ends the election's context (for the caller's defer).
func releaseOnTerm(ctx, term context.Context, run func(context.Context)) (electionCtx context.Context, lead func(context.Context), release context.CancelFunc) {
	electionCtx, release = context.WithCancel(ctx)
	var mu sync.Mutex
	leading := false
	context.AfterFunc(term, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			release()
		}
	})
	lead = func(leaderCtx context.Context) {
		defer release()
		mu.Lock()
		leading = true
		mu.Unlock()
		if term.Err() != nil {
			return // terminated while it was taking the Lease: start nothing
		}
		// The workers stop when the Lease is lost (leaderCtx) or on term.
		workCtx, stop := context.WithCancel(leaderCtx)
		defer stop()
		unlink := context.AfterFunc(term, stop)
		defer unlink()
		run(workCtx)
	}
	return electionCtx, lead, release
}
