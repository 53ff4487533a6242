package sidecar

import (
	"flag"
	"strings"
	"testing"
)

func TestMachineFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--fencing-backends=storage,machine"}},
		{args: []string{"--fencing-backends=machine,storage", "--machine-remediation=mhc"}},
		{args: []string{"--fencing-backends=machine", "--machine-remediation=reboot"}, wantErr: "--machine-remediation"},
		{args: []string{"--fencing-backends=storage,machines"}, wantErr: "unknown backend"},
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
