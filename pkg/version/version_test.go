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

package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// A version without the linker's -X is Dev, which must be a semantic
// version pre-release (it sorts before the release it leads to).
func TestDefaults(t *testing.T) {
	if version != "" {
		t.Skip("built with -X version: the defaults are not in use")
	}
	if Version() != Dev {
		t.Errorf("Version() = %q, want %q", Version(), Dev)
	}
	if !regexp.MustCompile(`^v0\.\d+\.\d+-dev$`).MatchString(Dev) {
		t.Errorf("Dev = %q, want v0.MINOR.PATCH-dev", Dev)
	}
	if !strings.HasPrefix(String(), Dev+" (commit ") {
		t.Errorf("String() = %q", String())
	}
}

func TestCommitFrom(t *testing.T) {
	setting := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "unknown"},
		{"built outside a git checkout", setting("GOOS", "linux"), true, "unknown"},
		{"clean checkout", setting("vcs.revision", "0123abc", "vcs.modified", "false"), true, "0123abc"},
		{"modified checkout", setting("vcs.revision", "0123abc", "vcs.modified", "true"), true, "0123abc-dirty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := commitFrom(tc.info, tc.ok); got != tc.want {
				t.Errorf("commitFrom = %q, want %q", got, tc.want)
			}
		})
	}
}

// repoRoot is the module root, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// releasedCommands are the binaries `make build` ships (CMDS in the Makefile).
func releasedCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CMDS\s*=\s*(.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no CMDS = line in the Makefile")
	}
	return strings.Fields(string(m[1]))
}

// Every released binary links this package, so that --version reports the
// same release in each.
func TestEveryCommandLinksVersion(t *testing.T) {
	const pkg = "github.com/csi-fence/fence-attacher/pkg/version"
	for _, cmd := range releasedCommands(t) {
		t.Run(cmd, func(t *testing.T) {
			c := exec.Command("go", "list", "-deps", "./cmd/"+cmd)
			c.Dir = repoRoot(t)
			out, err := c.Output()
			if err != nil {
				t.Fatalf("go list -deps ./cmd/%s: %v", cmd, err)
			}
			if !strings.Contains("\n"+string(out), "\n"+pkg+"\n") {
				t.Errorf("./cmd/%s does not import %s: its --version cannot say the release", cmd, pkg)
			}
		})
	}
}

// `make build` stamps the release into the binary: the -X flags of
// release-tools/build.make name this package's variables (a misspelt -X is
// silently ignored by the linker), and the binary prints them.
func TestMakeBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary with make")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	// csi-fence-prestop: the smallest released binary; TestEveryCommandLinksVersion
	// covers the others.
	const cmd = "csi-fence-prestop"
	tests := []struct {
		name string
		vars []string
		want string
	}{
		{"release", []string{"VERSION=v0.1.0", "COMMIT=0123456789abcdef"}, cmd + " v0.1.0 (commit 0123456789abcdef, go"},
		{"before the first tag", []string{"VERSION=", "COMMIT=0123456789abcdef"}, cmd + " " + Dev + " (commit 0123456789abcdef, go"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			make := exec.Command("make", append([]string{"--no-print-directory", "build-" + cmd, "BIN_DIR=" + bin}, tc.vars...)...)
			make.Dir = repoRoot(t)
			if out, err := make.CombinedOutput(); err != nil {
				t.Fatalf("make build-%s: %v\n%s", cmd, err, out)
			}
			out, err := exec.Command(filepath.Join(bin, cmd), "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", cmd, err, out)
			}
			if !strings.HasPrefix(string(out), tc.want) {
				t.Errorf("%s --version printed %q, want it to start with %q", cmd, out, tc.want)
			}
		})
	}
}

// The README's compatibility table names the versions the tests pin: the
// Kubernetes control plane of the e2e suites, the client libraries, the CSI
// spec and the external-attacher the sidecar runs. A bump that forgets the
// table fails here.
func TestReadmeCompatibilityTable(t *testing.T) {
	root := repoRoot(t)
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	required := func(gomod, module string) string {
		m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindStringSubmatch(read(gomod))
		if m == nil {
			t.Fatalf("%s does not require %s", gomod, module)
		}
		return m[1]
	}
	readme := read("README.md")
	start := strings.Index(readme, "## Compatibility and releases")
	if start < 0 {
		t.Fatal("README has no Compatibility and releases section")
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	tests := []struct {
		what, gomod, module string
	}{
		{"Kubernetes control plane", "test/e2e/tools/k8s/go.mod", "k8s.io/kubernetes"},
		{"Kubernetes client libraries", "go.mod", "k8s.io/client-go"},
		{"CSI spec", "go.mod", "github.com/container-storage-interface/spec"},
		{"external-attacher it extends", "go.mod", "github.com/kubernetes-csi/external-attacher/v4"},
		{"etcd", "test/e2e/tools/etcd/go.mod", "go.etcd.io/etcd/server/v3"},
		{"KWOK", "test/e2e/tools/kwok/go.mod", "sigs.k8s.io/kwok"},
	}
	for _, tc := range tests {
		t.Run(tc.what, func(t *testing.T) {
			v := required(tc.gomod, tc.module)
			var row string
			for _, line := range strings.Split(section, "\n") {
				if strings.Contains(line, tc.what) {
					row = line
				}
			}
			if row == "" {
				t.Fatalf("the compatibility table has no row for %s", tc.what)
			}
			if !strings.Contains(row, v) {
				t.Errorf("the compatibility table's %s row does not say %s (%s in %s):\n%s", tc.what, v, tc.module, tc.gomod, row)
			}
		})
	}
}
