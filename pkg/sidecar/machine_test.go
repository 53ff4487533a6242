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

package sidecar

import (
	"flag"
	"strings"
	"testing"
)

// TestFailoverFlags checks the failover flags' validation (the machine
// backend's and the client rate limits).
func TestFailoverFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--fencing-backends=storage,machine"}},
		{args: []string{"--fencing-backends=machine,storage", "--machine-remediation=mhc"}},
		{args: []string{"--fencing-backends=machine", "--machine-remediation=reboot"}, wantErr: "--machine-remediation"},
		{args: []string{"--fencing-backends=storage,machines"}, wantErr: "unknown backend"},
		{args: []string{"--failover-kube-api-qps=100", "--failover-kube-api-burst=200"}},
		{args: []string{"--failover-kube-api-qps=0"}, wantErr: "--failover-kube-api-qps"},
		{args: []string{"--failover-kube-api-burst=0"}, wantErr: "--failover-kube-api-burst"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var o FailoverOptions
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: got %v, want an error saying %q", tc.args, err, tc.wantErr)
		}
	}
}
