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

package framework

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunTagFindsOrphans: a process the run started and one that process
// left behind (orphaned, reparented away from this process) are both the
// run's; a process started without the tag is not; once they are killed,
// WaitNoProcesses is satisfied, and while one runs it names it.
func TestRunTagFindsOrphans(t *testing.T) {
	tag, err := TagRun()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Unsetenv(string(tag)) })

	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// sh starts a sleep in the background and exits: the sleep is orphaned.
	out, err := exec.Command("sh", "-c", "sleep 61 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })
	untagged := exec.Command("sleep", "62")
	untagged.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, string(tag)+"=") })
	if err := untagged.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = untagged.Process.Kill(); _ = untagged.Wait() })

	procs, err := tag.Processes()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.PID)
	}
	slices.Sort(pids)
	want := []int{child.Process.Pid, orphan}
	slices.Sort(want)
	if !slices.Equal(pids, want) {
		t.Fatalf("the run's processes: %v, want the child and the orphan %v (not the untagged %d)", procs, want, untagged.Process.Pid)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	err = tag.WaitNoProcesses(context.Background(), 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(orphan)+" sleep 61") {
		t.Fatalf("WaitNoProcesses with the orphan running: %v, want an error naming it", err)
	}
	if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := tag.WaitNoProcesses(context.Background(), 10*time.Second); err != nil {
		t.Fatalf("after the kill: %v", err)
	}
}

func TestLiveStat(t *testing.T) {
	for stat, want := range map[string]bool{
		"123 (sleep) S 1 123 123 0":        true,
		"123 (a) b (c) R 1 2 3":            true,
		"123 (csi-fence-mock) Z 1 123 123": false,
		"123 (x) X 1":                      false,
		"garbage":                          false,
	} {
		if got := liveStat(stat); got != want {
			t.Errorf("liveStat(%q) = %v, want %v", stat, got, want)
		}
	}
}
