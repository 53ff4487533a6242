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
	"strings"
	"testing"

	"github.com/csi-fence/fence-attacher/pkg/fencesanity"
)

// TestSanitySaysNoFenceSpecRan: against a driver without UNPUBLISH_FENCE,
// csi-fence-sanity passes and says so in exactly one line, naming the
// capability, without listing the skipped specs; against a driver with it,
// no such line.
func TestSanitySaysNoFenceSpecRan(t *testing.T) {
	linesSaying := func(out, s string) []string {
		var found []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, s) {
				found = append(found, l)
			}
		}
		return found
	}
	without := newEnv(t, "--refuse-unsafe", "--disable-fence", "--disable-force")
	out, err := without.sanity("--ginkgo.focus=Fence")
	if err != nil || !strings.Contains(out, "SUCCESS!") {
		t.Fatalf("csi-fence-sanity against --disable-fence: %v\n%s", err, out)
	}
	lines := linesSaying(out, fencesanity.NoFenceSpecRan)
	if len(lines) != 1 {
		t.Fatalf("%d lines say %q, want one:\n%s", len(lines), fencesanity.NoFenceSpecRan, out)
	}
	if want := "csi-fence-sanity: " + fencesanity.NoFenceSpecRan + fencesanity.NoFenceMessage; lines[0] != want {
		t.Errorf("the line is %q, want %q", lines[0], want)
	}
	// Only that line gives the reason: the skipped specs are not listed.
	if n := len(linesSaying(out, "UNPUBLISH_FENCE")); n != 1 {
		t.Errorf("%d lines name UNPUBLISH_FENCE, want only the summary:\n%s", n, out)
	}

	with := newEnv(t, "--refuse-unsafe")
	out, err = with.sanity("--ginkgo.focus=Fence")
	if err != nil || !strings.Contains(out, "SUCCESS!") {
		t.Fatalf("csi-fence-sanity against the full mock: %v\n%s", err, out)
	}
	if lines := linesSaying(out, fencesanity.NoFenceSpecRan); len(lines) != 0 {
		t.Errorf("the fence specs ran, yet the output says %q", lines)
	}
}
