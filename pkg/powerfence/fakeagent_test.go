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
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeAgent is a fence agent written by the test: a shell script that keeps
// what it was given (stdin, arguments, environment) per call and answers
// each action by a plan: the n-th call of an action exits with the n-th code
// of its plan (the last code repeats). A code of -1 means hang (sleep) until
// killed, leaving a grandchild that holds the output pipe, as fence_ipmilan's
// ipmitool would. The call counter is renamed into place: a run killed at a
// deadline (the confirm timeout) must leave the old count or the new one,
// never a truncated file that reads as no call at all.
type fakeAgent struct {
	t    *testing.T
	dir  string
	path string
}

// newFakeAgent writes the agent as <dir>/fence_fake. extra is shell run
// before the answer (with $action and $n set), e.g. to print something.
func newFakeAgent(t *testing.T, plans map[Action][]int, extra string) *fakeAgent {
	t.Helper()
	dir := t.TempDir()
	for action, codes := range plans {
		var lines []string
		for _, c := range codes {
			lines = append(lines, strconv.Itoa(c))
		}
		if err := os.WriteFile(filepath.Join(dir, "plan."+string(action)), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
dir=%q
input=$(cat)
action=$(printf '%%s\n' "$input" | sed -n 's/^action=//p' | tail -n 1)
n=$(( $(cat "$dir/n.$action" 2>/dev/null || echo 0) + 1 ))
echo $n > "$dir/n.$action.$$" && mv "$dir/n.$action.$$" "$dir/n.$action"
printf '%%s\n' "$input" > "$dir/stdin.$action.$n"
printf '%%s\n' "$#" "$@" > "$dir/args.$action.$n"
env > "$dir/env.$action.$n"
%s
code=$(sed -n "${n}p" "$dir/plan.$action" 2>/dev/null)
[ -n "$code" ] || code=$(tail -n 1 "$dir/plan.$action" 2>/dev/null)
[ -n "$code" ] || code=1
if [ "$code" = -1 ]; then
	sh -c 'echo $$ > "$1"; exec sleep 30' grandchild "$dir/grandchild.pid" &
	sleep 30
fi
echo "fake: $action call $n exits $code"
exit $code
`, dir, extra)
	path := filepath.Join(dir, "fence_fake")
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return &fakeAgent{t: t, dir: dir, path: path}
}

// calls is how many times action ran.
func (f *fakeAgent) calls(action Action) int {
	b, err := os.ReadFile(filepath.Join(f.dir, "n."+string(action)))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// read returns what the n-th call of action was given (kind: stdin, args, env).
func (f *fakeAgent) read(kind string, action Action, n int) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("%s.%s.%d", kind, action, n)))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}
