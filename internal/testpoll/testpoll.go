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

// Package testpoll waits in tests for a condition to hold, with a deadline:
// the one way the unit tests of this repository wait, never by sleeping a
// fixed time.
package testpoll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits before it fails the test.
const Timeout = 10 * time.Second

// Until polls cond every few milliseconds until it holds, and fails the
// test (naming what it waited for) if it does not within Timeout.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
