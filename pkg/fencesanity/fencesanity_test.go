package fencesanity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCommandIOChecker(t *testing.T) {
	target := IOTarget{NodeID: "n1", VolumeID: "v1", TargetPath: "/t"}
	tests := []struct {
		cmd     string
		want    bool
		wantErr string
	}{
		{cmd: "echo accepted 17", want: true},
		{cmd: "echo refused: fenced", want: false},
		{cmd: "echo"}, // prints just the appended arguments: neither word
		{cmd: "echo maybe", wantErr: `printed "maybe n1 v1 /t"`},
		{cmd: "false", wantErr: "exit status 1"},
		{cmd: "/no/such/command", wantErr: "no such file"},
		{cmd: "  ", wantErr: "empty"},
		{cmd: "SLOW", wantErr: "signal: killed"},
	}
	slow := filepath.Join(t.TempDir(), "slow")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec sleep 5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.cmd, func(t *testing.T) {
			if tc.cmd == "echo" {
				tc.wantErr = `printed "n1 v1 /t"`
			}
			if tc.cmd == "SLOW" {
				tc.cmd = slow
			}
			got, err := CommandIOChecker(tc.cmd, 200*time.Millisecond).CanWrite(context.Background(), target)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestConfigureDefaults(t *testing.T) {
	defer Configure(Config{})
	Configure(Config{})
	if config.FenceTimeout != DefaultFenceTimeout {
		t.Fatalf("FenceTimeout %v", config.FenceTimeout)
	}
	Configure(Config{FenceTimeout: time.Second, OtherNodeAddress: "x"})
	if config.FenceTimeout != time.Second || config.OtherNodeAddress != "x" {
		t.Fatalf("config %+v", config)
	}
}
