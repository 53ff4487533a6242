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

package array

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// step is one operation of a scenario on the array, and its expected outcome.
type step struct {
	op        string // see run
	vol, node string
	want      Code // 0: success
}

func ok(op, vol, node string) step            { return step{op: op, vol: vol, node: node} }
func fails(op, vol, node string, c Code) step { return step{op: op, vol: vol, node: node, want: c} }

// clock is a manual clock; "advance" steps move it.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestArray(t *testing.T) (*Array, *clock) {
	t.Helper()
	a, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	return a.WithClock(c.now).WithoutSync(), c
}

func (tc *scenario) run(t *testing.T, a *Array, c *clock, st step) error {
	t.Helper()
	switch st.op {
	case "add": // single-node volume with a fixed ID
		return a.AddVolume(st.vol, 1<<20)
	case "publish":
		return a.Publish(st.vol, st.node, true, false, tc.opts)
	case "publish-ro":
		return a.Publish(st.vol, st.node, true, true, tc.opts)
	case "publish-rwx":
		return a.Publish(st.vol, st.node, false, false, tc.opts)
	case "publish-known":
		return a.PublishVolume(PublishArgs{Volume: st.vol, Node: st.node, SingleNode: true, KnownNode: true}, tc.opts)
	case "publish-bynode": // the node plugin grants itself access
		return a.PublishVolume(PublishArgs{Volume: st.vol, Node: st.node, SingleNode: true, ByNode: true}, tc.opts)
	case "register":
		return a.RegisterNode(st.node, 1)
	case "fence":
		return a.Unpublish(st.vol, st.node, true, tc.opts)
	case "unpublish":
		return a.Unpublish(st.vol, st.node, false, tc.opts)
	case "stage":
		return a.NodeStage(st.vol, st.node, "/staging/"+st.vol)
	case "stage-other":
		return a.NodeStage(st.vol, st.node, "/elsewhere/"+st.vol)
	case "nodepublish":
		return a.NodePublish(st.vol, st.node, "/target/"+st.vol, "/staging/"+st.vol)
	case "nodepublish-unstaged":
		return a.NodePublish(st.vol, st.node, "/target/"+st.vol, "")
	case "nodeunpublish":
		return a.NodeUnpublish(st.vol, st.node, "/target/"+st.vol, false)
	case "force-nodeunpublish":
		return a.NodeUnpublish(st.vol, st.node, "/target/"+st.vol, true)
	case "unstage":
		return a.NodeUnstage(st.vol, st.node, false)
	case "force-unstage":
		return a.NodeUnstage(st.vol, st.node, true)
	case "write":
		return a.Write(st.vol, st.node)
	case "read":
		_, err := a.Read(st.vol, st.node)
		return err
	case "change": // a file system's change other than a write of data
		return a.Change(st.vol, st.node, "mkdir")
	case "delete":
		return a.DeleteVolume(st.vol)
	case "advance": // vol holds a duration
		d, err := time.ParseDuration(st.vol)
		if err != nil {
			t.Fatal(err)
		}
		c.t = c.t.Add(d)
		return nil
	case "break-fence": // run-time override
		b := true
		return a.SetOverrides(Overrides{BrokenFence: &b})
	case "refuse-unsafe": // run-time override
		b := true
		return a.SetOverrides(Overrides{RefuseUnsafe: &b})
	}
	t.Fatalf("unknown op %q", st.op)
	return nil
}

type scenario struct {
	name  string
	opts  Options
	steps []step
	// Expected at the end.
	violations map[string]int   // S1, S2 counts (missing: 0)
	refused    map[string]int64 // refusal counts (only the listed kinds are checked)
	access     map[string]string
}

func TestScenarios(t *testing.T) {
	strict := Options{RefuseUnsafe: true}
	window := Options{RecentIO: 2 * time.Second}
	refuse := Options{RecentIO: 2 * time.Second, FencePolicy: FenceRefuse}
	unknown := Options{RecentIO: 2 * time.Second, FencePolicy: FenceUnknown}
	revoke := Options{RecentIO: 2 * time.Second, PlainUnpublish: PlainUnpublishRevoke}
	detach := Options{RecentIO: 2 * time.Second, PlainUnpublish: PlainUnpublishDetach}
	strictDetach := Options{RecentIO: 2 * time.Second, PlainUnpublish: PlainUnpublishDetach, RefuseUnsafe: true}
	cases := []scenario{
		{
			name: "graceful detach and attach elsewhere",
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("write", "v", "a"),
				ok("nodeunpublish", "v", "a"), ok("unstage", "v", "a"), ok("unpublish", "v", "a"),
				ok("publish", "v", "b"), ok("write", "v", "b"), fails("write", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"write-unpublished": 1},
			access:  map[string]string{"a": "", "b": AccessGranted},
		},
		{
			name:    "strict: a single-node volume is not published to a second node",
			opts:    strict,
			steps:   []step{ok("add", "v", ""), ok("publish", "v", "a"), fails("publish", "v", "b", CodeFailedPrecondition), fails("publish-ro", "v", "b", CodeFailedPrecondition)},
			refused: map[string]int64{"publish-elsewhere": 2},
			access:  map[string]string{"a": AccessGranted, "b": ""},
		},
		{
			name: "witness: a single-node volume published to more nodes, and every write then, is S1",
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("publish", "v", "b"), ok("publish-ro", "v", "c"),
				ok("write", "v", "b"), ok("write", "v", "a")},
			violations: map[string]int{S1: 4},
			refused:    map[string]int64{"publish-elsewhere": 0},
			access:     map[string]string{"a": AccessGranted, "b": AccessGranted, "c": AccessGranted},
		},
		{
			name: "fence cuts the node off and lets the volume move",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("write", "v", "a"), ok("fence", "v", "a"),
				fails("write", "v", "a", CodePermissionDenied), fails("read", "v", "a", CodePermissionDenied),
				ok("publish", "v", "b"), ok("write", "v", "b"), fails("write", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"write-fenced": 2, "read-fenced": 1},
			access:  map[string]string{"a": AccessFenced, "b": AccessGranted},
		},
		{
			name: "quarantine holds until forced unstage",
			opts: strict,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("fence", "v", "a"),
				fails("publish", "v", "a", CodeFailedPrecondition), fails("stage", "v", "a", CodeFailedPrecondition),
				fails("nodeunpublish", "v", "a", CodeFailedPrecondition), fails("unstage", "v", "a", CodeFailedPrecondition),
				ok("force-nodeunpublish", "v", "a"), fails("publish", "v", "a", CodeFailedPrecondition),
				ok("force-unstage", "v", "a"), ok("force-unstage", "v", "a"), ok("publish", "v", "a"), ok("write", "v", "a")},
			refused: map[string]int64{"publish-quarantined": 2},
			access:  map[string]string{"a": AccessGranted},
		},
		{
			name:       "witness: a publish to a quarantined node goes through and is S2",
			steps:      []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("fence", "v", "a"), ok("publish", "v", "a"), ok("write", "v", "a")},
			violations: map[string]int{S2: 1},
			refused:    map[string]int64{"publish-quarantined": 0},
			access:     map[string]string{"a": AccessGranted},
		},
		{
			name:   "forced unstage alone cleans a staged and published fenced volume",
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("fence", "v", "a"), ok("force-unstage", "v", "a"), ok("publish", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name: "a quarantine with nothing on the node is lifted by any node cleanup",
			opts: strict,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("fence", "v", "a"), fails("publish", "v", "a", CodeFailedPrecondition),
				ok("nodeunpublish", "v", "a"), ok("publish", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name: "an unforced cleanup of what is not there succeeds and keeps the quarantine",
			opts: strict,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("fence", "v", "a"),
				ok("nodeunpublish", "v", "a"), fails("unstage", "v", "a", CodeFailedPrecondition), fails("publish", "v", "a", CodeFailedPrecondition)},
			access: map[string]string{"a": AccessFenced},
		},
		{
			name:   "fence is idempotent",
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("fence", "v", "a"), ok("fence", "v", "a"), ok("fence", "v", "a")},
			access: map[string]string{"a": AccessFenced},
		},
		{
			name:   "fence of a node without publication quarantines nothing",
			steps:  []step{ok("add", "v", ""), ok("fence", "v", "a"), ok("publish", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name: "a fence retried after cleanup does not quarantine again",
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("fence", "v", "a"), ok("force-unstage", "v", "a"),
				ok("fence", "v", "a"), ok("publish", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name:  "unknown volumes and nodes unpublish fine",
			steps: []step{ok("fence", "nope", "a"), ok("unpublish", "nope", "a"), ok("add", "v", ""), ok("unpublish", "v", "a"), ok("force-unstage", "nope", "a"), ok("nodeunpublish", "nope", "a")},
		},
		{
			name: "refuse policy: no fence while the node shows recent I/O",
			opts: refuse,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("advance", "1s", ""),
				fails("fence", "v", "a", CodeFailedPrecondition), ok("advance", "1500ms", ""), ok("fence", "v", "a")},
			refused: map[string]int64{"fence-refused-recent-io": 1},
			access:  map[string]string{"a": AccessFenced},
		},
		{
			name:    "unknown policy: cannot tell while the node shows recent I/O",
			opts:    unknown,
			steps:   []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("read", "v", "a"), fails("fence", "v", "a", CodeUnavailable), ok("advance", "3s", ""), ok("fence", "v", "a")},
			refused: map[string]int64{"fence-unknown-recent-io": 1},
			access:  map[string]string{"a": AccessFenced},
		},
		{
			name:   "revoke policy fences despite recent I/O",
			opts:   window,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("fence", "v", "a"), fails("write", "v", "a", CodePermissionDenied)},
			access: map[string]string{"a": AccessFenced},
		},
		{
			name: "broken fence: the node keeps writing, and S1 is caught once the volume moves",
			opts: Options{BrokenFence: true},
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("fence", "v", "a"), ok("write", "v", "a"),
				ok("publish", "v", "b"), ok("write", "v", "a"), ok("write", "v", "b")},
			violations: map[string]int{S1: 3},
			access:     map[string]string{"a": AccessFenced, "b": AccessGranted},
		},
		{
			name: "broken fence switched on at run time",
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("break-fence", "", ""), ok("fence", "v", "a"), ok("publish", "v", "b"),
				ok("write", "v", "a")},
			violations: map[string]int{S1: 2},
		},
		{
			name: "plain unpublish of a node still holding the volume lingers: S1 when the volume moves",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unpublish", "v", "a"), ok("advance", "1h", ""),
				ok("write", "v", "a"), ok("publish", "v", "b"), ok("write", "v", "a")},
			violations: map[string]int{S1: 2},
			access:     map[string]string{"a": AccessUnpublished, "b": AccessGranted},
		},
		{
			name: "plain unpublish of a node still writing lingers while it writes",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("unpublish", "v", "a"),
				ok("advance", "1500ms", ""), ok("write", "v", "a"), ok("advance", "1500ms", ""), ok("write", "v", "a"), ok("publish", "v", "b")},
			violations: map[string]int{S1: 1},
		},
		{
			name: "a lingering session ends when the node goes quiet",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("unpublish", "v", "a"), ok("advance", "3s", ""),
				fails("write", "v", "a", CodePermissionDenied), ok("publish", "v", "b")},
			access: map[string]string{"a": "", "b": AccessGranted},
		},
		{
			name:   "plain unpublish of a quiet node without node state is a clean detach",
			opts:   window,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("advance", "3s", ""), ok("unpublish", "v", "a"), ok("publish", "v", "b")},
			access: map[string]string{"a": "", "b": AccessGranted},
		},
		{
			name:   "node cleanup ends a lingering session",
			opts:   window,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unpublish", "v", "a"), ok("unstage", "v", "a"), ok("publish", "v", "b")},
			access: map[string]string{"a": "", "b": AccessGranted},
		},
		{
			name: "a node that cleaned up through its plugin is done, recent I/O or not",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("write", "v", "a"),
				ok("nodeunpublish", "v", "a"), ok("unstage", "v", "a"), ok("unpublish", "v", "a"), ok("delete", "v", "")},
		},
		{
			name:   "revoke mode: plain unpublish cuts the node off",
			opts:   revoke,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("write", "v", "a"), ok("unpublish", "v", "a"), fails("write", "v", "a", CodePermissionDenied), ok("publish", "v", "b")},
			access: map[string]string{"a": "", "b": AccessGranted},
		},
		{
			name: "detach mode: a plain unpublish closes the data path of a node still holding the volume, reads too, and the volume moves",
			opts: detach,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("write", "v", "a"),
				ok("unpublish", "v", "a"), fails("write", "v", "a", CodePermissionDenied), fails("read", "v", "a", CodePermissionDenied),
				fails("change", "v", "a", CodePermissionDenied), ok("unpublish", "v", "a"), ok("publish", "v", "b"), ok("write", "v", "b"),
				fails("write", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"write-detached": 2, "read-detached": 1, "change-detached": 1},
			access:  map[string]string{"a": AccessDetached, "b": AccessGranted},
		},
		{
			name: "detach mode: the stale node cleans up with plain calls, which lift the quarantine",
			opts: strictDetach,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("unpublish", "v", "a"),
				fails("publish", "v", "a", CodeFailedPrecondition), fails("stage", "v", "a", CodeFailedPrecondition),
				ok("nodeunpublish", "v", "a"), fails("publish", "v", "a", CodeFailedPrecondition), ok("unstage", "v", "a"), ok("unstage", "v", "a"),
				ok("publish", "v", "a"), ok("write", "v", "a")},
			refused: map[string]int64{"publish-quarantined": 2},
			access:  map[string]string{"a": AccessGranted},
		},
		{
			name: "detach mode: an unstage alone cleans a detached volume still published on the node",
			opts: strictDetach,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("unpublish", "v", "a"),
				ok("unstage", "v", "a"), ok("publish", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name:       "detach mode, witness: a publish to the node before its cleanup is S2",
			opts:       detach,
			steps:      []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unpublish", "v", "a"), ok("publish", "v", "a")},
			violations: map[string]int{S2: 1},
			access:     map[string]string{"a": AccessGranted},
		},
		{
			name: "detach mode: a node holding nothing just loses the publication, recent I/O or not",
			opts: strictDetach,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("write", "v", "a"), ok("unpublish", "v", "a"), fails("write", "v", "a", CodePermissionDenied),
				ok("publish", "v", "a")},
			refused: map[string]int64{"write-unpublished": 1, "publish-quarantined": 0},
			access:  map[string]string{"a": AccessGranted},
		},
		{
			name:   "detach mode: a detached volume can be deleted",
			opts:   detach,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unpublish", "v", "a"), ok("delete", "v", "")},
			access: map[string]string{"a": ""},
		},
		{
			name:   "a fence ends a lingering session",
			opts:   window,
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unpublish", "v", "a"), ok("advance", "3s", ""), ok("fence", "v", "a"), fails("write", "v", "a", CodePermissionDenied), ok("publish", "v", "b")},
			access: map[string]string{"a": AccessFenced, "b": AccessGranted},
		},
		{
			name:       "broken quarantine: the publish goes through and S2 is recorded",
			opts:       Options{RefuseUnsafe: true, BrokenQuarantine: true},
			steps:      []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("fence", "v", "a"), ok("publish", "v", "a")},
			violations: map[string]int{S2: 1},
			access:     map[string]string{"a": AccessGranted},
		},
		{
			name:    "broken quarantine: a publish refused for another reason is no S2",
			opts:    Options{RefuseUnsafe: true, BrokenQuarantine: true},
			steps:   []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("fence", "v", "a"), ok("publish", "v", "b"), fails("publish", "v", "a", CodeFailedPrecondition)},
			refused: map[string]int64{"publish-elsewhere": 1},
			access:  map[string]string{"a": AccessFenced, "b": AccessGranted},
		},
		{
			name: "multi-node volume: a fence touches one node only",
			steps: []step{ok("add", "v", ""), ok("publish-rwx", "v", "a"), ok("publish-rwx", "v", "b"), ok("write", "v", "a"), ok("write", "v", "b"),
				ok("fence", "v", "a"), fails("write", "v", "a", CodePermissionDenied), ok("write", "v", "b"), ok("publish-rwx", "v", "c")},
			access: map[string]string{"a": AccessFenced, "b": AccessGranted, "c": AccessGranted},
		},
		{
			name: "a data path's changes are decided as writes: refused once fenced",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("change", "v", "a"), ok("fence", "v", "a"),
				fails("change", "v", "a", CodePermissionDenied), ok("publish", "v", "b"), ok("change", "v", "b"), fails("change", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"change-fenced": 2, "write-fenced": 0},
			access:  map[string]string{"a": AccessFenced, "b": AccessGranted},
		},
		{
			name: "broken fence: a change from the old node after the move is S1",
			opts: Options{BrokenFence: true},
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("fence", "v", "a"), ok("change", "v", "a"),
				ok("publish", "v", "b"), ok("change", "v", "a")},
			violations: map[string]int{S1: 2},
		},
		{
			name:    "a change on a read-only publication is refused",
			steps:   []step{ok("add", "v", ""), ok("publish-ro", "v", "a"), fails("change", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"change-readonly": 1},
		},
		{
			name:    "read-only publication",
			steps:   []step{ok("add", "v", ""), ok("publish-ro", "v", "a"), ok("publish-ro", "v", "a"), fails("publish", "v", "a", CodeAlreadyExists), ok("read", "v", "a"), fails("write", "v", "a", CodePermissionDenied)},
			refused: map[string]int64{"write-readonly": 1},
		},
		{
			name:  "known nodes and their volume limit",
			steps: []step{ok("add", "v", ""), ok("add", "w", ""), fails("publish-known", "v", "a", CodeNotFound), ok("register", "", "a"), ok("publish-known", "v", "a"), fails("publish-known", "w", "a", CodeResourceExhausted)},
		},
		{
			name: "delete: not while a node can reach the volume; a quarantine does not hold it",
			opts: window,
			steps: []step{ok("add", "v", ""), ok("publish", "v", "a"), fails("delete", "v", "", CodeFailedPrecondition), ok("stage", "v", "a"), ok("unpublish", "v", "a"),
				fails("delete", "v", "", CodeFailedPrecondition), ok("advance", "3s", ""), ok("fence", "v", "a"), ok("delete", "v", ""), ok("force-unstage", "v", "a"), ok("delete", "v", "")},
		},
		{
			name: "a publication the node granted itself ends with its cleanup",
			steps: []step{ok("add", "v", ""), ok("publish-bynode", "v", "a"), ok("stage", "v", "a"), ok("nodepublish", "v", "a"), ok("nodeunpublish", "v", "a"),
				fails("delete", "v", "", CodeFailedPrecondition), ok("unstage", "v", "a"), ok("delete", "v", "")},
		},
		{
			name:   "a publication granted by the controller outlives the node's cleanup",
			steps:  []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("unstage", "v", "a")},
			access: map[string]string{"a": AccessGranted},
		},
		{
			name: "node-side order",
			steps: []step{ok("add", "v", ""), fails("stage", "v", "a", CodeFailedPrecondition), fails("stage", "nope", "a", CodeNotFound), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("stage", "v", "a"),
				fails("stage-other", "v", "a", CodeFailedPrecondition), ok("nodepublish", "v", "a"), ok("nodepublish", "v", "a"), fails("unstage", "v", "a", CodeFailedPrecondition),
				ok("nodeunpublish", "v", "a"), ok("unstage", "v", "a"), fails("nodepublish", "v", "a", CodeFailedPrecondition), ok("nodepublish-unstaged", "v", "a")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, tc.check)
	}
}

// check runs the scenario on a new array and checks its outcome.
func (tc *scenario) check(t *testing.T) {
	a, c := newTestArray(t)
	for i, st := range tc.steps {
		err := tc.run(t, a, c, st)
		var ae *Error
		switch {
		case st.want == 0 && err != nil:
			t.Fatalf("step %d %s(%s, %s): %v", i, st.op, st.vol, st.node, err)
		case st.want != 0 && !errors.As(err, &ae):
			t.Fatalf("step %d %s(%s, %s): got %v, want array error code %d", i, st.op, st.vol, st.node, err, st.want)
		case st.want != 0 && ae.Code != st.want:
			t.Fatalf("step %d %s(%s, %s): got code %d (%v), want %d", i, st.op, st.vol, st.node, ae.Code, err, st.want)
		}
	}
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := s.CountViolations()
	for _, inv := range []string{S1, S2} {
		if got[inv] != tc.violations[inv] {
			t.Errorf("%s violations: got %d, want %d: %+v", inv, got[inv], tc.violations[inv], s.Violations)
		}
	}
	for kind, n := range tc.refused {
		if s.Refused[kind] != n {
			t.Errorf("refused %s: got %d, want %d (all: %v)", kind, s.Refused[kind], n, s.Refused)
		}
	}
	for node, want := range tc.access {
		var gotAccess string
		if v := s.Volumes["v"]; v != nil && v.Publications[node] != nil {
			gotAccess = v.Publications[node].Access
		}
		if gotAccess != want {
			t.Errorf("access of node %s: got %q, want %q", node, gotAccess, want)
		}
	}
}

// TestUnsafePublish: a publish S1 or S2 forbids is carried out and counted
// as a violation by a witness array (the default), and refused and counted
// as refused by a strict one (RefuseUnsafe, by option or run-time override).
func TestUnsafePublish(t *testing.T) {
	unsafe := []struct {
		name     string
		setup    []step
		publish  step
		inv      string
		kind     string
		unsafeOn string // node whose access the strict array keeps as it was
		before   string // that access
	}{
		{name: "S1: a single-node volume still published to another node", setup: []step{ok("add", "v", ""), ok("publish", "v", "a")},
			publish: step{op: "publish", vol: "v", node: "b"}, inv: S1, kind: RefusedPublishElsewhere, unsafeOn: "b"},
		{name: "S1: read-only, to another node", setup: []step{ok("add", "v", ""), ok("publish", "v", "a")},
			publish: step{op: "publish-ro", vol: "v", node: "b"}, inv: S1, kind: RefusedPublishElsewhere, unsafeOn: "b"},
		{name: "S1: a multi-node publish of a volume granted to one node", setup: []step{ok("add", "v", ""), ok("publish", "v", "a")},
			publish: step{op: "publish-rwx", vol: "v", node: "b"}, inv: S1, kind: RefusedPublishElsewhere, unsafeOn: "b"},
		{name: "S2: to a node where the volume is quarantined", setup: []step{ok("add", "v", ""), ok("publish", "v", "a"), ok("stage", "v", "a"), ok("fence", "v", "a")},
			publish: step{op: "publish", vol: "v", node: "a"}, inv: S2, kind: RefusedPublishQuarantined, unsafeOn: "a", before: AccessFenced},
	}
	modes := []struct {
		name     string
		opts     Options
		override bool
		strict   bool
	}{
		{name: "witness"},
		{name: "strict", opts: Options{RefuseUnsafe: true}, strict: true},
		{name: "strict by run-time override", override: true, strict: true},
	}
	for _, u := range unsafe {
		for _, m := range modes {
			tc := scenario{name: u.name, opts: m.opts, steps: append([]step(nil), u.setup...)}
			if m.override {
				tc.steps = append([]step{ok("refuse-unsafe", "", "")}, tc.steps...)
			}
			publish := u.publish
			if m.strict {
				publish.want = CodeFailedPrecondition
				tc.refused = map[string]int64{u.kind: 1}
				tc.access = map[string]string{u.unsafeOn: u.before}
			} else {
				tc.violations = map[string]int{u.inv: 1}
				tc.refused = map[string]int64{u.kind: 0}
				tc.access = map[string]string{u.unsafeOn: AccessGranted}
			}
			tc.steps = append(tc.steps, publish)
			t.Run(m.name+"/"+u.name, tc.check)
		}
	}
}

func TestCreateVolume(t *testing.T) {
	a, _ := newTestArray(t)
	v1, err := a.CreateVolume(CreateArgs{Name: "n", RequiredBytes: 10, SingleNode: true})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   CreateArgs
		wantID string
		want   Code
	}{
		{"same name, same size: the same volume", CreateArgs{Name: "n", RequiredBytes: 10}, v1.ID, 0},
		{"same name, smaller request: the same volume", CreateArgs{Name: "n", RequiredBytes: 5}, v1.ID, 0},
		{"same name, bigger request", CreateArgs{Name: "n", RequiredBytes: 20}, "", CodeAlreadyExists},
		{"same name, limit below its size", CreateArgs{Name: "n", RequiredBytes: 1, LimitBytes: 5}, "", CodeAlreadyExists},
		{"another name: a new volume", CreateArgs{Name: "m", RequiredBytes: 10}, "vol-0002", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := a.CreateVolume(tc.args)
			var ae *Error
			if tc.want != 0 {
				if !errors.As(err, &ae) || ae.Code != tc.want {
					t.Fatalf("got %v, want code %d", err, tc.want)
				}
				return
			}
			if err != nil || v.ID != tc.wantID {
				t.Fatalf("got %+v, %v; want ID %s", v, err, tc.wantID)
			}
		})
	}
	if c, err := a.ExpandVolume(v1.ID, 100); err != nil || c != 100 {
		t.Fatalf("ExpandVolume: %d, %v", c, err)
	}
	if c, err := a.ExpandVolume(v1.ID, 50); err != nil || c != 100 {
		t.Fatalf("ExpandVolume never shrinks: %d, %v", c, err)
	}
}

// The detailed list is bounded; the counts are complete.
func TestViolationRecordsBounded(t *testing.T) {
	a, _ := newTestArray(t)
	o := Options{BrokenQuarantine: true}
	if err := a.AddVolume("v", 1); err != nil {
		t.Fatal(err)
	}
	const n = MaxViolationRecords + 50
	for i := 0; i < n; i++ {
		if err := a.Publish("v", "a", true, false, o); err != nil {
			t.Fatal(err)
		}
		if err := a.Unpublish("v", "a", true, o); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := a.Snapshot()
	if s.CountViolations()[S2] != n-1 || len(s.Violations) != MaxViolationRecords {
		t.Fatalf("got %d S2 and %d records, want %d and %d", s.CountViolations()[S2], len(s.Violations), n-1, MaxViolationRecords)
	}
}

// The state survives a new handle (a restarted instance), and a corrupt
// state file is an error for every operation and is left as it was.
func TestDurability(t *testing.T) {
	dir := t.TempDir()
	a1, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func(*Array) error{
		func(a *Array) error { return a.AddVolume("v", 1) },
		func(a *Array) error { return a.RegisterNode("a", 0) },
		func(a *Array) error { return a.Publish("v", "a", true, false, Options{}) },
		func(a *Array) error { return a.NodeStage("v", "a", "/s") },
		func(a *Array) error { return a.Write("v", "a") },
		func(a *Array) error { return a.Unpublish("v", "a", true, Options{}) },
	}
	for _, s := range steps {
		if err := s(a1); err != nil {
			t.Fatal(err)
		}
	}
	a2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a2.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := s.Volumes["v"].Publications["a"]
	if p == nil || p.Access != AccessFenced || p.Staged != "/s" || s.Volumes["v"].Writes["a"] != 1 || s.Nodes["a"] == nil {
		t.Fatalf("state after reopening: %+v", s.Volumes["v"])
	}
	if err := a2.Publish("v", "a", true, false, Options{RefuseUnsafe: true}); err == nil {
		t.Fatal("the quarantine did not survive reopening")
	}

	corrupt := []byte(`{"volumes": {`)
	if err := os.WriteFile(a2.StateFile(), corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { return a2.Write("v", "a") },
		func() error { _, err := a2.Snapshot(); return err },
		func() error { return a2.AddVolume("w", 1) },
	} {
		if err := op(); err == nil || !strings.Contains(err.Error(), "corrupt array state") {
			t.Fatalf("got %v, want a corrupt state error", err)
		}
	}
	if b, _ := os.ReadFile(a2.StateFile()); string(b) != string(corrupt) {
		t.Fatalf("the corrupt state was overwritten: %q", b)
	}
}

func TestOverridesValidate(t *testing.T) {
	bad := []Overrides{{FencePolicy: "maybe"}, {PlainUnpublish: "sometimes"}}
	for _, o := range bad {
		if err := (&Array{}).SetOverrides(o); err == nil {
			t.Errorf("SetOverrides(%+v) accepted", o)
		}
	}
	d := time.Second
	b := true
	got := Overrides{FencePolicy: FenceRefuse, RecentIO: &d, BrokenFence: &b, RefuseUnsafe: &b}.Apply(Options{FencePolicy: FenceRevoke, RecentIO: time.Hour, BrokenQuarantine: true})
	want := Options{FencePolicy: FenceRefuse, RecentIO: time.Second, BrokenFence: true, BrokenQuarantine: true, RefuseUnsafe: true}
	if got != want {
		t.Fatalf("Apply: got %+v, want %+v", got, want)
	}
}

func ExampleState_CountViolations() {
	s := &State{ViolationCounts: map[string]int64{S1: 2}}
	fmt.Println(s.CountViolations())
	// Output: map[S1:2 S2:0]
}

// A node that loses its power holds nothing any more: a volume plainly
// unpublished from it while it was still mounted there is no longer open to
// it, while one it was granted stays granted.
func TestPowerLoss(t *testing.T) {
	a, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		if err := a.RegisterNode(n, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"v1", "v2"} {
		if err := a.AddVolume(id, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := a.Publish(id, "n1", true, false, Options{}); err != nil {
			t.Fatal(err)
		}
		if err := a.NodeStage(id, "n1", "/staging/"+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unpublish("v1", "n1", false, Options{PlainUnpublish: PlainUnpublishLinger, RecentIO: time.Minute}); err != nil {
		t.Fatal(err)
	}
	open := func(id string) bool {
		s, err := a.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		p := s.Volumes[id].Publications["n1"]
		return p != nil && p.Open(time.Now())
	}
	if !open("v1") {
		t.Fatal("a staged volume plainly unpublished must linger before the power loss")
	}
	if err := a.PowerLoss("n1"); err != nil {
		t.Fatal(err)
	}
	if open("v1") {
		t.Error("v1 still open to n1 after its power loss")
	}
	if !open("v2") {
		t.Error("v2 is granted to n1: the power loss does not revoke the array's grant")
	}
}

// TestChangesCountedApart: Change counts in Changes and leaves Writes and
// the data counter to writes of data, so that a file system's writes can be
// compared with what its workload wrote.
func TestChangesCountedApart(t *testing.T) {
	a, _ := newTestArray(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.AddVolume("v", 1<<20))
	must(a.Publish("v", "a", true, false, Options{}))
	must(a.Change("v", "a", "create"))
	must(a.Write("v", "a"))
	must(a.Change("v", "a", "fsync"))
	must(a.Write("v", "a"))
	s, err := a.Snapshot()
	must(err)
	v := s.Volumes["v"]
	if v.Writes["a"] != 2 || v.Changes["a"] != 2 || v.Data != 2 || v.LastIO["a"].IsZero() {
		t.Errorf("writes %v, changes %v, data %d, last I/O %v; want 2, 2, 2 and a time", v.Writes, v.Changes, v.Data, v.LastIO)
	}
}

// The bulk operations register every node and add every volume in one
// update, idempotently, and register none when one node ID is empty.
func TestBulkRegistration(t *testing.T) {
	for _, tc := range []struct {
		name      string
		nodes     []string
		wantNodes int
		wantErr   Code
	}{
		{name: "three nodes", nodes: []string{"n1", "n2", "n3"}, wantNodes: 3},
		{name: "a node twice", nodes: []string{"n1", "n1"}, wantNodes: 1},
		{name: "an empty ID registers none", nodes: []string{"n1", ""}, wantErr: CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			err = a.RegisterNodes(4, tc.nodes...)
			var ae *Error
			if tc.wantErr != 0 {
				if !errors.As(err, &ae) || ae.Code != tc.wantErr {
					t.Fatalf("error %v, want code %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if err := a.AddVolumes(1<<20, "v1", "v2", "v1"); err != nil {
				t.Fatal(err)
			}
			s, err := a.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Nodes) != tc.wantNodes {
				t.Errorf("%d nodes registered, want %d", len(s.Nodes), tc.wantNodes)
			}
			for _, n := range s.Nodes {
				if n.MaxVolumes != 4 {
					t.Errorf("node %s: max volumes %d, want 4", n.ID, n.MaxVolumes)
				}
			}
			if len(s.Volumes) != 2 || s.Volumes["v2"] == nil || !s.Volumes["v2"].SingleNode {
				t.Errorf("volumes %v, want v1 and v2, single-node", s.Volumes)
			}
		})
	}
}

// TestCheckRead: CheckRead decides a read as Read does, open or not, and
// why not, without counting the read or its refusal.
func TestCheckRead(t *testing.T) {
	a, _ := newTestArray(t)
	opts := Options{PlainUnpublish: PlainUnpublishDetach}
	if err := a.AddVolume("v", 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckRead("nope", "a"); !isCode(err, CodeNotFound) {
		t.Fatalf("CheckRead of an unknown volume: %v, want NotFound", err)
	}
	if err := a.CheckRead("v", "a"); !isCode(err, CodePermissionDenied) || !strings.Contains(err.Error(), "not published") {
		t.Fatalf("CheckRead before the publish: %v, want PermissionDenied (not published)", err)
	}
	if err := a.Publish("v", "a", true, false, opts); err != nil {
		t.Fatal(err)
	}
	if err := a.NodeStage("v", "a", "/staging/v"); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckRead("v", "a"); err != nil {
		t.Fatalf("CheckRead while published: %v", err)
	}
	if err := a.Unpublish("v", "a", false, opts); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckRead("v", "a"); !isCode(err, CodePermissionDenied) || !strings.Contains(err.Error(), "detached") {
		t.Fatalf("CheckRead after the detach: %v, want PermissionDenied (detached)", err)
	}
	s, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Volumes["v"].Reads["a"]; n != 0 || len(s.Refused) != 0 {
		t.Errorf("CheckRead counted: reads %d, refused %v", n, s.Refused)
	}
}

func isCode(err error, c Code) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Code == c
}
