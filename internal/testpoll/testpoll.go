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
