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

package bmcsim

import (
	"strings"
	"testing"
	"time"
)

func TestLanConf(t *testing.T) {
	good := Config{User: "admin", Password: "pw", Machine: []string{"/tmp/go build/bmcsim.test", MachineFlag, "it's/hb"}}
	for _, tc := range []struct {
		name    string
		cfg     func(Config) Config
		want    []string
		wantErr string
	}{
		{
			name: "the machine is startcmd, quoted for sh, started now, killable",
			cfg:  func(c Config) Config { return c },
			want: []string{
				"addr 127.0.0.1 6230\n",
				// Without the system interface, power off is refused.
				"serial 15 127.0.0.1 6231 codec VM\n",
				`startcmd "'/tmp/go build/bmcsim.test' '-bmcsim.machine' 'it'\''s/hb'"` + "\n",
				"startnow true\n",
				// 0 would disable the kills.
				"poweroff_wait 1\n",
				"kill_wait 2\n",
				`user 2 true "admin" "pw" admin 10 md5` + "\n",
			},
		},
		{
			name: "powered off, slow kill",
			cfg: func(c Config) Config {
				c.PoweredOff, c.KillWait = true, 5*time.Second
				return c
			},
			want: []string{"startnow false\n", "kill_wait 5\n"},
		},
		{
			name: "on a bridge's address: the LAN there, the system interface on loopback",
			cfg:  func(c Config) Config { c.Host = "10.213.0.1"; return c },
			want: []string{"addr 10.213.0.1 6230\n", "serial 15 127.0.0.1 6231 codec VM\n"},
		},
		{name: "a host name is not an address", cfg: func(c Config) Config { c.Host = "bmc.local"; return c }, wantErr: "want an IPv4 address"},
		{name: "no password", cfg: func(c Config) Config { c.Password = ""; return c }, wantErr: "a user and a password"},
		{name: "password too long for IPMI", cfg: func(c Config) Config { c.Password = strings.Repeat("x", 17); return c }, wantErr: "at most 16"},
		{name: "no machine", cfg: func(c Config) Config { c.Machine = nil; return c }, wantErr: "no machine"},
		{name: "a double quote ends the config string", cfg: func(c Config) Config { c.Machine = []string{`/bin/echo "x"`}; return c }, wantErr: "double quote"},
		{name: "a line too long for ipmi_sim", cfg: func(c Config) Config { c.Machine = []string{strings.Repeat("x", 1000)}; return c }, wantErr: "at most 1023"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LanConf(tc.cfg(good), 6230, 6231)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Whole lines: a commented-out line must not count.
			lines := map[string]bool{}
			for _, l := range strings.Split(got, "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			for _, w := range tc.want {
				if !lines[strings.TrimSpace(w)] {
					t.Errorf("lan.conf lacks the line %q:\n%s", w, got)
				}
			}
		})
	}
}
