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
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/csi-fence/fence-attacher/pkg/version"
)

// runMainEnv makes the test binary run main() instead of the tests, so that
// the tests below exercise the real flag wiring of the built program.
const runMainEnv = "CSI_FENCE_ATTACHER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		// Drop the test binary's own arguments: everything after "--".
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"csi-fence-attacher"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run runs main() in a child process with args and returns its combined
// output and exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("running main: %v", err)
		return "", -1
	}
}

var flagLine = regexp.MustCompile(`^  -([a-zA-Z0-9.-]+)`)
var defaultValue = regexp.MustCompile(`\(default (.*)\)$`)

// helpFlags parses the output of --help into flag name -> default ("" when
// the help shows none).
func helpFlags(help string) map[string]string {
	flags := map[string]string{}
	name := ""
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = ""
			continue
		}
		if m := defaultValue.FindStringSubmatch(strings.TrimSpace(line)); m != nil && name != "" {
			flags[name] = m[1]
		}
	}
	return flags
}

// Every flag of external-attacher v4.13, with its default as its -h shows
// it (shared/research/external-attacher-and-csi.md section 1.3), must be
// accepted with the same default, so that a Deployment can swap the image.
func TestHelpListsEveryExternalAttacherFlag(t *testing.T) {
	out, code := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d:\n%s", code, out)
	}
	got := helpFlags(out)
	want := map[string]string{
		// external-attacher's own flags.
		"timeout":              "15s",
		"retry-interval-start": "1s",
		"retry-interval-max":   "5m0s",
		"worker-threads":       "10",
		"max-entries":          "",
		"reconcile-sync":       "1m0s",
		"resync":               "10m0s",
		"default-fstype":       "",
		"max-grpc-log-length":  "-1",
		"feature-gates":        "",
		// csi-lib-utils standardflags.
		"csi-address":                    `"/run/csi/socket"`,
		"kubeconfig":                     "",
		"leader-election":                "",
		"leader-election-namespace":      "",
		"leader-election-lease-duration": "15s",
		"leader-election-renew-deadline": "10s",
		"leader-election-retry-period":   "5s",
		"leader-election-labels":         "",
		"kube-api-qps":                   "5",
		"kube-api-burst":                 "10",
		"http-endpoint":                  "",
		"metrics-address":                "",
		"metrics-path":                   `"/metrics"`,
		"automaxprocs":                   "",
		"version":                        "",
		// component-base logging.
		"v":                         "",
		"vmodule":                   "",
		"logging-format":            `"text"`,
		"log-flush-frequency":       "5s",
		"log-json-split-stream":     "",
		"log-json-info-buffer-size": "",
		"log-text-split-stream":     "",
		"log-text-info-buffer-size": "",
		// Ours.
		"role":                    `"controller"`,
		"max-fenced-nodes":        "",
		"max-fenced-node-percent": "50",
		"storm-guard-namespace":   `"kube-system"`,
		"fencing-taints":          "",
		"fencing-required-after":  "",
		"failover-opt-in":         "",
		"fencing-backends":        "",
		"fence-agents":            "",
		"kubelet-dir":             `"/var/lib/kubelet"`,
		"node-name":               "",
		"disable-fencing":         "",
		"machine-remediation":     `"delete"`,
		"failover-kube-api-qps":   "20",
		"failover-kube-api-burst": "30",
		// The registrar role's, named as node-driver-registrar's.
		"kubelet-registration-path": "",
		"plugin-registration-path":  `"/registration"`,
	}
	for name, def := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("--help does not list --%s", name)
		case g != def:
			t.Errorf("--%s: default %q, want %q", name, g, def)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok && !strings.HasPrefix(name, "test.") {
			t.Errorf("--help lists --%s, which is neither external-attacher's nor documented here", name)
		}
	}
	for _, gate := range []string{"ReleaseLeaderElectionOnExit=true|false (ALPHA - default=true)", "NonGracefulFailover=true|false (ALPHA - default=false)"} {
		if !strings.Contains(out, gate) {
			t.Errorf("--help does not list the feature gate %q", gate)
		}
	}
}

func TestCommandLineErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"version", []string{"--version"}, 0, "csi-fence-attacher " + version.Dev + " (commit "},
		{"node role needs its node", []string{"--role=node", "--node-name="}, 1, "--role=node needs --node-name"},
		{"storm guard out of range", []string{"--max-fenced-node-percent=101"}, 1, "--max-fenced-node-percent between 0 and 100"},
		{"unknown role", []string{"--role=both"}, 1, "--role must be"},
		{"registrar role needs the kubelet's path", []string{"--role=registrar"}, 1, "--role=registrar needs --kubelet-registration-path"},
		{"no workers", []string{"--worker-threads=0"}, 1, "--worker-threads must be greater than zero"},
		{"both HTTP flags", []string{"--http-endpoint=:8080", "--metrics-address=:8081"}, 1, "only one of --metrics-address and --http-endpoint can be set"},
		{"unknown feature gate", []string{"--feature-gates=NoSuchGate=true"}, 2, "unrecognized feature gate"},
		{"known feature gate accepted", []string{"--feature-gates=ReleaseLeaderElectionOnExit=true,NonGracefulFailover=true", "--version"}, 0, "csi-fence-attacher"},
		{"unknown flag", []string{"--no-such-flag"}, 2, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(t, tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) {
				t.Errorf("exit %d, want %d; output:\n%s\nwant it to contain %q", code, tc.wantCode, out, tc.wantOut)
			}
		})
	}
}

// externalAttacherGates is every gate external-attacher v4.13.0's binary
// accepts (its own, the apiserver's and component-base metrics'; read from
// its process-wide gate), with its default and whether it is locked to it.
var externalAttacherGates = []struct {
	name   string
	def    bool
	locked bool
}{
	{"APIResponseCompression", true, false},
	{"APIServerIdentity", true, false},
	{"APIServerWebhookAuthenticationToken", false, false},
	{"APIServingWithRoutine", false, false},
	{"AggregatedDiscoveryRemoveBetaType", true, true},
	{"AllAlpha", false, false},
	{"AllBeta", false, false},
	{"AllowParsingUserUIDFromCertAuth", true, false},
	{"AllowUnsafeMalformedObjectDeletion", true, false},
	{"CBORServingAndStorage", false, false},
	{"ComponentFlagz", true, false},
	{"ComponentStatusz", true, false},
	{"ConcurrentWatchObjectDecode", true, false},
	{"ConsistentListFromCacheSkipTimeoutFallback", false, false},
	{"ConstrainedImpersonation", true, false},
	{"CoordinatedLeaderElection", false, false},
	{"DeclarativeValidation", true, true},
	{"DeclarativeValidationBeta", true, false},
	{"DeclarativeValidationTakeover", false, true},
	{"DetectCacheInconsistency", true, false},
	{"EtcdRangeStream", true, false},
	{"ExcludeAdmissionWebhookVirtualResources", true, false},
	{"KMSv1", false, false},
	{"ListFromCacheSnapshot", true, false},
	{"ManifestBasedAdmissionControlConfig", true, false},
	{"MutableCSINodeAllocatableCount", true, false},
	{"MutatingAdmissionPolicy", true, false},
	{"NativeHistograms", true, false},
	{"OpenAPIEnums", true, false},
	{"ReleaseLeaderElectionOnExit", false, false},
	{"RemoteRequestHeaderUID", true, false},
	{"SeparateCacheWatchRPC", false, true},
	{"ShardedListAndWatch", false, false},
	{"SizeBasedListCostEstimate", true, false},
	{"StorageVersionAPI", false, false},
	{"StorageVersionHash", true, false},
	{"StructuredAuthenticationConfigurationEgressSelector", true, false},
	{"StructuredAuthenticationConfigurationJWKSMetrics", true, false},
	{"TokenRequestServiceAccountUIDValidation", true, false},
	{"UnauthenticatedHTTP2DOSMitigation", true, false},
	{"UnknownVersionInteroperabilityProxy", true, false},
	{"WatchCacheInitializationPostStartHook", true, true},
	{"WatchList", true, false},
	{"WatchListCompression", true, false},
	{"WebhookRoundTripLoadBalancing", true, false},
}

// Every feature gate external-attacher accepts is accepted, at its default
// and (unless locked) at the other value, beside ours: a Deployment's
// --feature-gates keeps working when the image is swapped.
func TestExternalAttacherFeatureGatesAccepted(t *testing.T) {
	ours := []string{"NonGracefulFailover", "ContextualLogging", "LoggingAlphaOptions", "LoggingBetaOptions"}
	for _, flip := range []bool{false, true} {
		var kv []string
		for _, g := range externalAttacherGates {
			v := g.def
			if flip && !g.locked {
				v = !v
			}
			kv = append(kv, fmt.Sprintf("%s=%v", g.name, v))
		}
		for _, g := range ours {
			kv = append(kv, g+"=true")
		}
		out, code := run(t, "--feature-gates="+strings.Join(kv, ","), "--version")
		if code != 0 {
			t.Errorf("flipped=%v: exit %d:\n%s", flip, code, out)
		}
	}
}

// Every value external-attacher accepts for its own flags is accepted: the
// run gets past validation to building the API client (which fails here on
// purpose, on a kubeconfig that does not exist).
func TestExternalAttacherFlagValuesAccepted(t *testing.T) {
	const pastValidation = "building the Kubernetes client config"
	tests := [][]string{
		{"--timeout=0"},
		{"--timeout=-1s"},
		{"--reconcile-sync=0"},
		{"--retry-interval-start=0"},
		{"--retry-interval-max=0"},
		{"--max-entries=-1"},
		{"--max-entries=4294967296"},
		{"--resync=0"},
		{"--resync=-1s"},
		{"--worker-threads=1"},
		{"--default-fstype=xfs"},
		{"--max-grpc-log-length=0"},
		{"--kube-api-qps=0", "--kube-api-burst=0"},
	}
	for _, args := range tests {
		out, code := run(t, append([]string{"--kubeconfig=" + t.TempDir() + "/none"}, args...)...)
		if code != 1 || !strings.Contains(out, pastValidation) {
			t.Errorf("%v: exit %d, want 1 after validation (%q); output:\n%s", args, code, pastValidation, out)
		}
	}
}
