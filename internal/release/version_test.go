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

package release

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"v0.1.0", true},
		{"v1.22.333", true},
		{"v0.2.0-rc.1", true},
		{"", false},
		{"0.1.0", false},
		{"v0.1", false},
		{"v1", false},
		{"v01.0.0", false},
		{"v0.1.0+build.5", false},
		{"v0.1.0 ", false},
		{"V0.1.0", false},
		{"canary", false},
	} {
		err := CheckVersion(tc.version)
		if (err == nil) != tc.ok {
			t.Errorf("CheckVersion(%q) = %v, want ok %v", tc.version, err, tc.ok)
		}
	}
}

// TestCheckTree runs CheckTree on a git repository of its own in each
// state a release must refuse, and those it accepts.
func TestCheckTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		wantErr string
	}{
		{name: "clean"},
		{name: "tag on HEAD", prepare: func(t *testing.T, dir string) { run(t, dir, "git", "tag", "-a", "v0.1.0", "-m", "v0.1.0") }},
		{name: "modified", prepare: func(t *testing.T, dir string) { write(t, dir, "a.go", "package a // changed\n") }, wantErr: "changes"},
		{name: "untracked", prepare: func(t *testing.T, dir string) { write(t, dir, "b.go", "package a\n") }, wantErr: "changes"},
		{name: "staged", prepare: func(t *testing.T, dir string) {
			write(t, dir, "c.go", "package a\n")
			run(t, dir, "git", "add", "c.go")
		}, wantErr: "changes"},
		{name: "tag on another commit", prepare: func(t *testing.T, dir string) {
			run(t, dir, "git", "tag", "-a", "v0.1.0", "-m", "v0.1.0")
			write(t, dir, "a.go", "package a // next\n")
			run(t, dir, "git", "commit", "-qam", "next")
		}, wantErr: "tag v0.1.0 is on commit"},
		{name: "ignored files", prepare: func(t *testing.T, dir string) { write(t, dir, "dist/x", "x") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "a.go", "package a\n")
			write(t, dir, ".gitignore", "/dist/\n")
			run(t, dir, "git", "init", "-q")
			run(t, dir, "git", "add", ".")
			run(t, dir, "git", "commit", "-qm", "first")
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			head := strings.TrimSpace(run(t, dir, "git", "rev-parse", "HEAD"))
			commit, err := CheckTree(context.Background(), dir, "v0.1.0")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckTree: %v", err)
			case tc.wantErr == "" && commit != head:
				t.Errorf("CheckTree = %s, want HEAD %s", commit, head)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("CheckTree = %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
