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
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// installEnv makes this test binary act as the installer (the helper
// process pattern): it copies itself, as csi-fence-prestop install does.
const installEnv = "CSI_FENCE_PRESTOP_TEST_INSTALL"

func TestMain(m *testing.M) {
	if dest := os.Getenv(installEnv); dest != "" {
		// A restrictive umask, as a container runtime may set: the copy
		// must not depend on it.
		syscall.Umask(0o077)
		if err := install(dest); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The installer runs as its own non-root user (pkg/prestop's
// InstallUser), the app containers as whoever their pod says: the copy in
// the emptyDir (mode 0777, as the kubelet makes it) must be executable by
// every user, whatever the umask.
func TestInstallIsExecutableByEveryUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the installer and the copy as other users")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Traversable by the other users, as the kubelet's pod directories
	// are for the pod's containers.
	dir, err := os.MkdirTemp("", "prestop-install-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	emptyDir := filepath.Join(dir, "emptydir")
	if err := os.Mkdir(emptyDir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, emptyDir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// The image's binary, readable by every user as in the image (the
	// test binary's own directory is not).
	entrypoint := filepath.Join(dir, "entrypoint")
	if err := copyFile(self, entrypoint); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(emptyDir, "csi-fence-prestop")
	as := func(uid uint32, name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}
	inst := as(65532, entrypoint)
	inst.Env = append(os.Environ(), installEnv+"="+dest)
	if out, err := inst.CombinedOutput(); err != nil {
		t.Fatalf("install as user 65532: %v: %s", err, out)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy: %v", fi.Mode())
	// An app container's user: the copy runs (here: a test binary that
	// runs no test).
	if out, err := as(1000, dest, "-test.run=^$").CombinedOutput(); err != nil {
		t.Fatalf("the copy (mode %v) does not run as user 1000: %v: %s", fi.Mode(), err, out)
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return err
	}
	return os.Chmod(dst, 0o755)
}
