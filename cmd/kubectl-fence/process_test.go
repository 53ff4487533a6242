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
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// asPluginEnv makes the test binary run main() instead of the tests, so
// that the tests can run it as kubectl would run the plugin: a process
// whose exit code, stdout and stderr are checked.
const asPluginEnv = "KUBECTL_FENCE_TEST_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPluginEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pluginDir holds kubectl-fence, a link to the test binary run as the
// plugin, for tests that run it by name (PATH).
func pluginDir(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "kubectl-fence")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runPlugin runs the plugin as a process with args; it returns its stdout,
// stderr and exit code.
func runPlugin(t *testing.T, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "kubectl-fence"), args...)
	cmd.Env = append(os.Environ(), asPluginEnv+"=1", "KUBECONFIG="+filepath.Join(dir, "no-kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running kubectl-fence %q: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// Help, of the plugin and of every verb, is asked for: it goes to stdout
// and the exit code is 0, as kubectl's (a script piping `kubectl fence
// VERB --help` into less or grep gets it). Errors go to stderr with a
// non-zero exit code, stdout empty.
func TestPluginProcessHelpAndErrors(t *testing.T) {
	dir := pluginDir(t)
	verbs := []string{"version", "terminate", "check-manifests", "status", "timeline", "fence", "release", "pause", "resume", "completion"}
	type want struct {
		code    int
		stdout  string // "" for empty
		stderr  string // "" for empty
		anyCode bool   // code != 0
	}
	tests := []struct {
		args []string
		want want
	}{
		{[]string{"--help"}, want{stdout: "kubectl fence"}},
		{[]string{"-h"}, want{stdout: "kubectl fence"}},
		{nil, want{stdout: "kubectl fence"}},
		{[]string{"help"}, want{stdout: "kubectl fence"}},
		{[]string{"frobnicate"}, want{anyCode: true, stderr: `unknown command "frobnicate"`}},
		{[]string{"fence"}, want{anyCode: true, stderr: "want exactly one NODE"}},
		{[]string{"status", "--no-such-flag"}, want{anyCode: true, stderr: "unknown flag: --no-such-flag"}},
	}
	for _, v := range verbs {
		tests = append(tests,
			struct {
				args []string
				want want
			}{[]string{v, "--help"}, want{stdout: "kubectl fence " + v}},
			struct {
				args []string
				want want
			}{[]string{"help", v}, want{stdout: "kubectl fence " + v}})
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runPlugin(t, dir, tc.args...)
			if tc.want.anyCode && code == 0 || !tc.want.anyCode && code != tc.want.code {
				t.Errorf("exit code %d, want %d (non-zero: %v)\nstderr: %s", code, tc.want.code, tc.want.anyCode, stderr)
			}
			if tc.want.stdout == "" && stdout != "" || !strings.Contains(stdout, tc.want.stdout) {
				t.Errorf("stdout %q, want it to have %q", stdout, tc.want.stdout)
			}
			if tc.want.stderr == "" && stderr != "" || !strings.Contains(stderr, tc.want.stderr) {
				t.Errorf("stderr %q, want it to have %q", stderr, tc.want.stderr)
			}
		})
	}
}

// kubectl (>= 1.26) completes `kubectl fence ARGS` by running
// kubectl_complete-fence ARGS from PATH: both the script shipped beside
// the plugin and the plugin linked under that name answer with the
// plugin's completions (cobra's __complete), the directive last.
func TestKubectlPluginCompletion(t *testing.T) {
	dir := pluginDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	linkDir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(linkDir, completionExecutable)); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(completionExecutable)
	if err != nil {
		t.Fatal(err)
	}
	for name, exe := range map[string]string{"script": script, "link": filepath.Join(linkDir, completionExecutable)} {
		t.Run(name, func(t *testing.T) {
			// As kubectl runs it: the words after `kubectl fence`, the one
			// being completed last.
			cmd := exec.Command(exe, "re")
			cmd.Env = append(os.Environ(), asPluginEnv+"=1", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			var verbs []string
			for _, l := range lines[:len(lines)-1] {
				verbs = append(verbs, strings.SplitN(l, "\t", 2)[0])
			}
			if strings.Join(verbs, " ") != "release resume" || !strings.HasPrefix(lines[len(lines)-1], ":") {
				t.Errorf("completions %q", lines)
			}
		})
	}
}
