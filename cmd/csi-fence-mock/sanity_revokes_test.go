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
	"os"
	"strings"
	"testing"

	"github.com/csi-fence/fence-attacher/mock-driver/fusefs"
	"github.com/csi-fence/fence-attacher/pkg/fencesanity"
)

// revokesFocus runs only csi-fence-sanity's check of the declaration.
const revokesFocus = "--ginkgo.focus=Unpublish revokes access"

// needFUSE skips a test whose mock serves its volumes with FUSE where FUSE
// cannot be mounted: the check writes through a real data path.
func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: the FUSE data path needs root (CAP_SYS_ADMIN)")
	}
	if err := fusefs.Usable(); err != nil {
		t.Skipf("skipped: %v", err)
	}
}

// TestSanityChecksUnpublishRevokesAccess: csi-fence-sanity
// --fence.check-unpublish-revokes-access passes against the mock whose
// detach revokes (--detach=revokes, FUSE data path: writes and reads
// through the old path fail, the data is there once published again) and
// fails against the one whose detach lies (--detach=lies: the node keeps
// writing), saying what it saw. Not asked, the check is skipped, saying
// how to ask for it.
func TestSanityChecksUnpublishRevokesAccess(t *testing.T) {
	needFUSE(t)
	revokes := newEnv(t, "--refuse-unsafe", "--detach=revokes", "--data-path=fuse")
	out, err := revokes.sanity(revokesFocus, "--fence.check-unpublish-revokes-access", "--csi.testvolumesize=1048576", "--ginkgo.v")
	if err != nil || !strings.Contains(out, "SUCCESS!") || !strings.Contains(out, "Ran 1 of") {
		t.Fatalf("csi-fence-sanity --fence.check-unpublish-revokes-access against --detach=revokes: %v\n%s", err, out)
	}
	for _, want := range []string{"the write failed, as it must", "the read failed, as it must"} {
		if !strings.Contains(out, want) {
			t.Errorf("the run does not say %q:\n%s", want, out)
		}
	}
	if code, out := revokes.cli("status", "--state-dir="+revokes.state, "--fail-on-violation"); code != 0 {
		t.Fatalf("violations or leftovers after the check: %s", out)
	}

	lies := newEnv(t, "--refuse-unsafe", "--detach=lies", "--data-path=fuse")
	out, err = lies.sanity(revokesFocus, "--fence.check-unpublish-revokes-access", "--csi.testvolumesize=1048576")
	if err == nil {
		t.Fatalf("csi-fence-sanity --fence.check-unpublish-revokes-access passed against --detach=lies:\n%s", out)
	}
	for _, want := range []string{
		"[FAIL] Unpublish revokes access [Controller Server] [It] a plain ControllerUnpublishVolume cuts writes and reads through the published path, and keeps the data",
		"after ControllerUnpublishVolume succeeded: the node still has access to volume",
		"write through ", "read through ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the failing run does not say %q:\n%s", want, out)
		}
	}

	out, err = revokes.sanity(revokesFocus, "--ginkgo.v")
	if err != nil || !strings.Contains(out, fencesanity.NoRevokeCheckMessage) {
		t.Fatalf("csi-fence-sanity without --fence.check-unpublish-revokes-access: %v\n%s", err, out)
	}
}
