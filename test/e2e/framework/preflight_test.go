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
	"strings"
	"testing"
)

// TestDecideFenceAgents: the fence agents are installed only by the
// project's script and only where it can (root or passwordless sudo, with
// apt-get); elsewhere the error names what to run, and nothing present
// means nothing to do.
func TestDecideFenceAgents(t *testing.T) {
	for _, tc := range []struct {
		name        string
		check       string // the script's --check output
		install     bool
		errContains []string
	}{
		{name: "all present", check: "missing: \ninstall: root\n"},
		{name: "all present, cannot install: nothing to install", check: "missing: \ninstall: no: not root and no passwordless sudo\n"},
		{name: "missing, root with apt-get", check: "missing: ipmi_sim\ninstall: root\n", install: true},
		{name: "missing, passwordless sudo", check: "missing: fence_ipmilan ipmitool ipmi_sim\ninstall: sudo\n", install: true},
		{name: "missing, not root", check: "missing: fence_ipmilan ipmi_sim\ninstall: no: not root and no passwordless sudo\n",
			errContains: []string{"missing: fence_ipmilan, ipmi_sim", "not root and no passwordless sudo", "run `sudo ", FenceAgentsScript + "`"}},
		{name: "missing, no apt-get", check: "missing: ipmitool\ninstall: no: apt-get not found\n",
			errContains: []string{"missing: ipmitool", "apt-get not found", "install them by hand", "fence-agents, ipmitool, openipmi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFenceAgentsCheck(tc.check)
			if err != nil {
				t.Fatal(err)
			}
			install, err := decideFenceAgents(c)
			if install != tc.install {
				t.Errorf("install = %v, want %v", install, tc.install)
			}
			if len(tc.errContains) == 0 {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one naming %q", tc.errContains)
			}
			for _, want := range tc.errContains {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestParseFenceAgentsCheckRefusesOtherOutput(t *testing.T) {
	for _, out := range []string{"", "missing: ipmi_sim\n", "install: root\n", "missing: \ninstall: \n"} {
		if _, err := parseFenceAgentsCheck(out); err == nil {
			t.Errorf("%q: parsed, want an error", out)
		}
	}
}

// TestCheckFenceAgentsRunsTheScript runs the real script's --check on this
// machine, with a PATH that has none of the programs (and no apt-get): it
// must name all three and say why it cannot install them, and install
// nothing.
func TestCheckFenceAgentsRunsTheScript(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"bash", "env", "id", "dirname"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
		if err := os.Symlink(p, bin+"/"+tool); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	c, err := CheckFenceAgents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// /usr/sbin and /sbin are searched too (a non-root PATH lacks them):
	// fence_ipmilan may be found there on a machine that has it.
	for _, tool := range []string{"ipmitool", "ipmi_sim"} {
		if !strings.Contains(" "+strings.Join(c.Missing, " ")+" ", " "+tool+" ") {
			t.Errorf("missing = %q, want %s in it", c.Missing, tool)
		}
	}
	if c.Installer != "" || !strings.Contains(c.CannotInstall, "apt-get") {
		t.Errorf("installer %q, cannot install %q: want no installer, apt-get not found", c.Installer, c.CannotInstall)
	}
	if _, err := decideFenceAgents(c); err == nil {
		t.Error("decideFenceAgents: no error without an installer")
	}
}
