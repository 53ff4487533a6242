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

// Package fencesanity is a sanity suite for the CSI fence/force extension
// (DESIGN.md section 4, CSI spec PR #477) that any driver can run, built on
// csi-test's pkg/sanity: its specs are registered with sanity.DescribeSanity
// when this package is imported, and Test runs them together with csi-test's
// own suite.
//
// csi-test's "should return appropriate capabilities" specs fail on
// capability values they do not know, the extension's included; Test skips
// them (ReplacedSanitySpecs) and runs versions that accept the extension.
// Against a driver without the extension, the fence specs are skipped with a
// message saying so.
//
// Whether a fence really cuts a node off its volume cannot be seen through
// CSI: the caller provides an IOChecker that tries a write as a workload on
// that node would. Without one, the specs that need it are skipped.
package fencesanity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// IOTarget names a volume as a workload on a node sees it.
type IOTarget struct {
	NodeID   string
	VolumeID string
	// TargetPath is where NodePublishVolume published the volume on that
	// node ("" if the spec did not publish it on the node).
	TargetPath string
}

// IOChecker tells whether a workload on a node can write to a volume now.
type IOChecker interface {
	// CanWrite tries a write: true if the storage accepted it, false if it
	// refused it, an error if it could not tell.
	CanWrite(ctx context.Context, t IOTarget) (bool, error)
}

// IOCheckerFunc is a function IOChecker.
type IOCheckerFunc func(ctx context.Context, t IOTarget) (bool, error)

// CanWrite calls f.
func (f IOCheckerFunc) CanWrite(ctx context.Context, t IOTarget) (bool, error) { return f(ctx, t) }

// CommandIOChecker runs a command to check I/O: cmd, split on white space,
// with NODE-ID VOLUME-ID TARGET-PATH appended. Its standard output must
// begin with "accepted" or "refused" (its exit code is not looked at then);
// anything else, or no end within timeout, is an error.
func CommandIOChecker(cmd string, timeout time.Duration) IOChecker {
	return IOCheckerFunc(func(ctx context.Context, t IOTarget) (bool, error) {
		args := strings.Fields(cmd)
		if len(args) == 0 {
			return false, fmt.Errorf("empty I/O check command")
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c := exec.CommandContext(ctx, args[0], append(args[1:], t.NodeID, t.VolumeID, t.TargetPath)...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		// The command runs in a process group of its own, and the timeout
		// kills the whole group: killing only a shell wrapper would leave
		// its children running, holding the output pipes that Run waits
		// for. WaitDelay bounds that wait for a child that left the group.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = time.Second
		runErr := c.Run()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return false, fmt.Errorf("I/O check command %q (node %s, volume %s) timed out after %v", cmd, t.NodeID, t.VolumeID, timeout)
		}
		out := strings.TrimSpace(stdout.String())
		switch {
		case strings.HasPrefix(out, "accepted"):
			return true, nil
		case strings.HasPrefix(out, "refused"):
			return false, nil
		}
		return false, fmt.Errorf("I/O check command %q (node %s, volume %s) printed %q, want accepted or refused (exit: %v, stderr: %s)",
			cmd, t.NodeID, t.VolumeID, out, runErr, strings.TrimSpace(stderr.String()))
	})
}

// Config is what the fence specs need beyond sanity.TestConfig.
type Config struct {
	// IOChecker checks that a fence cuts a node's I/O; nil skips those specs.
	IOChecker IOChecker
	// OtherNodeAddress is the endpoint of the node plugin of a second node,
	// for the specs that move a volume between nodes or share it; empty skips
	// them. Its staging and target paths are made next to the sanity ones, on
	// this machine.
	OtherNodeAddress     string
	OtherNodeDialOptions []grpc.DialOption
	// FenceTimeout bounds the retries of a fence that the driver refuses for
	// now (FAILED_PRECONDITION or UNAVAILABLE, as an array does while the node
	// still shows I/O), and of the cleanup's DeleteVolume likewise. Default
	// 30s.
	FenceTimeout time.Duration
	// CheckUnpublishRevokesAccess runs the check of the declaration that a
	// plain ControllerUnpublishVolume revokes the node's access (the
	// CSIDriver annotation csi-fence.io/unpublish-revokes-access,
	// revokes.go): it writes and reads through the published path on this
	// host, so the node service must run here. Off, the check is skipped,
	// saying so.
	CheckUnpublishRevokesAccess bool
	// IOTimeout bounds each write or read of that check; one that does not
	// return in time fails it. Default 10s.
	IOTimeout time.Duration
}

// DefaultFenceTimeout is Config.FenceTimeout's default.
const DefaultFenceTimeout = 30 * time.Second

// DefaultIOTimeout is Config.IOTimeout's default.
const DefaultIOTimeout = 10 * time.Second

// config is the configuration of the run; the specs read it when they run.
var config = Config{FenceTimeout: DefaultFenceTimeout, IOTimeout: DefaultIOTimeout}

// ReplacedSanitySpecs are regular expressions of the csi-test specs that
// this package replaces: Test skips them. Callers that run the suite in
// their own way add them to Ginkgo's skip list.
var ReplacedSanitySpecs = []string{
	regexp.QuoteMeta("Controller Service [Controller Server] ControllerGetCapabilities should return appropriate capabilities"),
	regexp.QuoteMeta("Node Service NodeGetCapabilities should return appropriate capabilities"),
}

// Configure sets the fence configuration of specs registered through
// GinkgoTest or run by RunSpecs in another way.
func Configure(cfg Config) {
	if cfg.FenceTimeout <= 0 {
		cfg.FenceTimeout = DefaultFenceTimeout
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	config = cfg
}

// Test runs csi-test's sanity suite together with the fence specs, the
// replaced capability specs skipped. Like sanity.Test it can run once per
// process.
func Test(t ginkgo.GinkgoTestingT, sanityConfig sanity.TestConfig, cfg Config) {
	Configure(cfg)
	sc := sanity.GinkgoTest(&sanityConfig)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	suiteConfig.SkipStrings = append(suiteConfig.SkipStrings, ReplacedSanitySpecs...)
	ginkgo.RunSpecs(t, "CSI Driver Test Suite", suiteConfig, reporterConfig)
	sc.Finalize()
	closeOtherNode()
}

// DefaultConnectTimeout is CheckEndpoints' usual timeout.
const DefaultConnectTimeout = 10 * time.Second

// CheckEndpoints calls Probe on every endpoint of the run (node, controller,
// second node), giving each timeout to answer. csi-test waits up to a minute
// for its connection in every spec: against an endpoint that cannot be
// reached a run would take hours to fail. Any answer of the driver, an error
// included, shows it reachable.
func CheckEndpoints(ctx context.Context, sc sanity.TestConfig, cfg Config, timeout time.Duration) error {
	endpoints := []struct {
		name, addr string
		opts       []grpc.DialOption
	}{
		{"node", sc.Address, sc.DialOptions},
		{"controller", sc.ControllerAddress, sc.ControllerDialOptions},
		{"second node", cfg.OtherNodeAddress, cfg.OtherNodeDialOptions},
	}
	for _, ep := range endpoints {
		if ep.addr == "" {
			continue
		}
		if err := probe(ctx, ep.addr, ep.opts, timeout); err != nil {
			return fmt.Errorf("cannot reach the %s endpoint %s within %v: %w", ep.name, ep.addr, timeout, err)
		}
	}
	return nil
}

func probe(ctx context.Context, addr string, opts []grpc.DialOption, timeout time.Duration) error {
	conn, err := dial(addr, opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Wait for the connection (a driver may still be starting) up to the
	// timeout, not the first failed attempt.
	_, err = csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return err
	}
	return nil
}

// dial connects to a CSI endpoint in the address forms csi-test accepts.
func dial(addr string, opts []grpc.DialOption) (*grpc.ClientConn, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost")}
	}
	// The address forms csi-test's utils.Connect accepts: unix:///path,
	// /path, or a host:port.
	if u, err := url.Parse(addr); err == nil && (!u.IsAbs() || u.Scheme == "unix") {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}))
		if u.Scheme != "unix" {
			addr = "unix:" + addr
		}
	}
	return grpc.NewClient(addr, opts...)
}

// NoFenceSpecRan is the start of the one line csi-fence-sanity prints when
// the driver under test lacks the extension: no fence spec ran, and why.
const NoFenceSpecRan = "no fence spec ran: "

// FenceSpecsApply asks the driver's controller service (the node endpoint
// when the run has no controller endpoint) whether the fence specs can run
// against it: "" when they can, otherwise why not (NoPublishMessage or
// NoFenceMessage, what each skipped spec would say). Probe the endpoints
// first (CheckEndpoints): this call does not wait for a driver to start.
func FenceSpecsApply(ctx context.Context, sc sanity.TestConfig, timeout time.Duration) (string, error) {
	addr, opts := sc.ControllerAddress, sc.ControllerDialOptions
	if addr == "" {
		addr, opts = sc.Address, sc.DialOptions
	}
	conn, err := dial(addr, opts)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rsp, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return "", fmt.Errorf("ControllerGetCapabilities at %s: %w", addr, err)
	}
	caps := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range rsp.GetCapabilities() {
		caps[c.GetRpc().GetType()] = true
	}
	switch {
	case !caps[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME]:
		return NoPublishMessage, nil
	case !caps[fence.ControllerUnpublishFence]:
		return NoFenceMessage, nil
	}
	return "", nil
}
