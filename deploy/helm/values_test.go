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

package helm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/csi-fence/fence-attacher/pkg/manifestcheck"
	"github.com/csi-fence/fence-attacher/pkg/sidecar"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

// helm lint --strict passes with the defaults and with every feature on,
// and fails on values the schema (values.schema.json) refuses: a misspelt
// key, which Helm would otherwise ignore in silence (the feature stays
// off), a wrong type, an unknown backend. Lint mode makes the templates'
// fail calls harmless, so the values that cannot work together are
// TestChartValues' to check, on the render.
func TestChartLints(t *testing.T) {
	tests := []struct {
		name    string
		vals    map[string]any
		wantErr string
	}{
		{"defaults", nil, ""},
		{"every feature", values("features.failover", true, "features.powerFencing", true, "features.prestopWebhook", true), ""},
		{"a misspelt feature", values("features.failOver", true), "additional properties 'failOver' not allowed"},
		{"a misspelt section", values("nodeagent.httpPort", 9000), "additional properties 'nodeagent' not allowed"},
		{"a string for a boolean", values("features.failover", "yes"), "features/failover"},
		{"an unknown backend", values("controller.fencingBackends", []any{"storage", "ipmi"}), "fencingBackends/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := action.NewLint()
			l.Strict = true
			l.Namespace = "default"
			l.KubeVersion = kubeVersion
			res := l.Run([]string{chartDir}, tc.vals)
			var msgs []string
			for _, e := range res.Errors {
				msgs = append(msgs, e.Error())
			}
			got := strings.Join(msgs, "\n")
			if res.TotalChartsLinted != 1 {
				t.Fatalf("linted %d charts: %s", res.TotalChartsLinted, got)
			}
			switch {
			case tc.wantErr == "" && len(msgs) > 0:
				t.Errorf("lint: %s", got)
			case tc.wantErr != "" && !strings.Contains(got, tc.wantErr):
				t.Errorf("lint errors %q, want %q", got, tc.wantErr)
			}
		})
	}
}

// field reads a dotted path of an object; a number indexes a list.
func field(o *unstructured.Unstructured, path string) any {
	var cur any = o.Object
	for _, p := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

func find(objs []*unstructured.Unstructured, k string) *unstructured.Unstructured {
	for _, o := range objs {
		if key(o) == k {
			return o
		}
	}
	return nil
}

// Values other than the defaults reach every object they concern: a
// second driver's install (prefixed names), the driver's own
// ServiceAccounts in its namespace (none created, every binding names
// them), the admission policy matching that ServiceAccount exactly, the
// cluster-wide Leases' Role in the storm guard's namespace; and values that
// cannot work fail the render with a message that names them.
func TestChartValues(t *testing.T) {
	ch := loadChart(t, chartDir)
	type want struct{ key, path, value string }
	tests := []struct {
		name    string
		vals    map[string]any
		want    []want
		absent  []string // kinds, or keys, that must not be rendered
		wantErr string
	}{{
		name: "ceph-csi rbd, its own ServiceAccounts, a second driver",
		vals: values(
			"namePrefix", "rbd-",
			"driver.namespace", "ceph-csi-rbd",
			"controller.serviceAccount.create", false,
			"controller.serviceAccount.name", "rbd-csi-provisioner",
			"nodeAgent.serviceAccount.create", false,
			"nodeAgent.serviceAccount.name", "rbd-csi-nodeplugin",
			"controller.stormGuardNamespace", "csi-fence-system",
			"features.failover", true,
		),
		want: []want{
			{"ClusterRoleBinding /rbd-csi-fence-attacher-role", "subjects.0.name", "rbd-csi-provisioner"},
			{"ClusterRoleBinding /rbd-csi-fence-attacher-role", "subjects.0.namespace", "ceph-csi-rbd"},
			{"ClusterRoleBinding /rbd-csi-fence-attacher-role", "roleRef.name", "rbd-csi-fence-attacher-runner"},
			{"ClusterRoleBinding /rbd-csi-fence-attacher-failover-role", "subjects.0.name", "rbd-csi-provisioner"},
			{"RoleBinding ceph-csi-rbd/rbd-csi-fence-attacher-role-cfg", "subjects.0.name", "rbd-csi-provisioner"},
			{"RoleBinding csi-fence-system/rbd-csi-fence-attacher-cluster-leases", "subjects.0.namespace", "ceph-csi-rbd"},
			{"Role csi-fence-system/rbd-csi-fence-attacher-cluster-leases", "rules.0.resources.0", "leases"},
			{"ClusterRoleBinding /rbd-csi-fence-attacher-node", "subjects.0.name", "rbd-csi-nodeplugin"},
			{"ValidatingAdmissionPolicy /rbd-csi-fence-node-agent-own-record", "spec.matchConditions.0.expression",
				"request.userInfo.username == 'system:serviceaccount:' + 'ceph-csi-rbd' + ':' + 'rbd-csi-nodeplugin'"},
			{"ValidatingAdmissionPolicyBinding /rbd-csi-fence-node-agent-own-record", "spec.policyName", "rbd-csi-fence-node-agent-own-record"},
			{"Service ceph-csi-rbd/rbd-csi-fence-node-agent", "spec.selector.csi-fence\\.io/node-agent", ""},
			// Shared by every driver: never prefixed.
			{"CustomResourceDefinition /fencingrequests.fencing.csi-fence.io", "spec.group", "fencing.csi-fence.io"},
		},
		absent: []string{"ServiceAccount", "ClusterRole /rbd-csi-fence-attacher-power-runner", "Deployment"},
	}, {
		name: "the preStop webhook next to a driver in another namespace",
		vals: canary("features.prestopWebhook", true, "driver.namespace", "storage", "nodeAgent.httpPort", 9000, "image.pullPolicy", "IfNotPresent",
			"imagePullSecrets", []any{map[string]any{"name": "registry-creds"}}),
		want: []want{
			{"Deployment default/csi-fence-prestop-webhook", "spec.template.spec.containers.0.args.2", "--certificate-hosts=csi-fence-prestop-webhook.default.svc"},
			{"Deployment default/csi-fence-prestop-webhook", "spec.template.spec.containers.0.args.5", "--node-agent-url=http://csi-fence-node-agent.storage.svc:8081/termination-reason"},
			{"Deployment default/csi-fence-prestop-webhook", "spec.template.spec.imagePullSecrets.0.name", "registry-creds"},
			{"Deployment default/csi-fence-prestop-webhook", "spec.template.spec.containers.0.imagePullPolicy", "IfNotPresent"},
			// The Service's port is its own: the agents' port is a host port
			// on host-network node plugins, and may have to move.
			{"Service storage/csi-fence-node-agent", "spec.ports.0.port", "8081"},
			{"Service storage/csi-fence-node-agent", "spec.ports.0.targetPort", "fence-http"},
			{"MutatingWebhookConfiguration /csi-fence-prestop", "webhooks.0.clientConfig.service.namespace", "default"},
		},
	}, {
		name:    "power fencing without the failover",
		vals:    values("features.powerFencing", true),
		wantErr: "features.powerFencing needs features.failover",
	}, {
		name:    "machine fencing without the failover",
		vals:    values("features.machineFencing", true, "controller.fencingBackends", []any{"machine"}),
		wantErr: "features.machineFencing needs features.failover",
	}, {
		name:    "machine fencing without the backend named",
		vals:    values("features.failover", true, "features.machineFencing", true),
		wantErr: "features.machineFencing needs controller.fencingBackends to name machine",
	}, {
		name:    "the driver's ServiceAccount unnamed",
		vals:    values("controller.serviceAccount.create", false, "controller.serviceAccount.name", ""),
		wantErr: "controller.serviceAccount.name: the driver's controller ServiceAccount",
	}, {
		// helm install checks the schema too, as a dependency's.
		name:    "an unknown backend",
		vals:    values("controller.fencingBackends", []any{"storage", "ipmi"}),
		wantErr: "at '/controller/fencingBackends/1': value must be one of 'storage', 'power', 'out-of-service'",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _, err := render(ch, "default", tc.vals)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				path := strings.ReplaceAll(w.path, "\\.", "\x00")
				o := find(objs, w.key)
				if o == nil {
					t.Errorf("no %s rendered", w.key)
					continue
				}
				got := field(o, strings.ReplaceAll(path, "\x00", "."))
				if strings.Contains(path, "\x00") {
					// A key with dots: the label selector.
					got = o.Object
					for _, p := range strings.Split(path, ".") {
						got, _ = got.(map[string]any)[strings.ReplaceAll(p, "\x00", ".")]
					}
					if got != "true" {
						t.Errorf("%s: %s is %v, want \"true\"", w.key, w.path, got)
					}
					continue
				}
				if s := fmt.Sprint(got); s != w.value {
					t.Errorf("%s: %s is %q, want %q", w.key, w.path, s, w.value)
				}
			}
			for _, a := range tc.absent {
				for _, o := range objs {
					if o.GetKind() == a || key(o) == a {
						t.Errorf("%s rendered, want none", key(o))
					}
				}
			}
		})
	}
}

// A driver's chart that takes csi-fence as a dependency and includes its
// containers (testdata/example-driver, in the shape of ceph-csi's: the
// controller socket csi-provisioner.sock, the node socket in a hostPath
// volume of another name, the driver's own ServiceAccounts and attacher
// arguments) renders manifests that kubectl fence check-manifests accepts:
// a csi-fence-attacher controller and node agent, each on the driver's
// socket, with arguments csi-fence-attacher's own flag set parses. A value
// that breaks a container is caught by the same check.
func TestDriverChartIncludesTheContainers(t *testing.T) {
	tests := []struct {
		name    string
		vals    map[string]any
		wantErr string
	}{
		{"as the driver's chart sets it", nil, ""},
		{"every flag value", values("csi-fence.controller.maxFencedNodes", 2, "csi-fence.controller.maxFencedNodePercent", 30,
			"csi-fence.controller.fencingBackends", []any{"storage", "out-of-service"}, "csi-fence.controller.failoverOptIn", true,
			"csi-fence.controller.fencingTaints", true, "csi-fence.controller.fencingRequiredAfter", "30s",
			"csi-fence.controller.fenceAgents", []any{"fence_ipmilan", "fence_redfish"}, "csi-fence.controller.featureGates", map[string]any{"ReleaseLeaderElectionOnExit": false},
			"csi-fence.features.powerFencing", true, "csi-fence.nodeAgent.extraArgs", []any{"--timeout=30s"}), ""},
		{"the socket in a volume the driver does not share", values("csi-fence.controller.socketVolume", "other"),
			`mounts volume "other", which the pod does not have`},
		{"an argument csi-fence-attacher does not accept", values("csi-fence.controller.extraArgs", []any{"--worker-threads=10", "--no-such-flag"}),
			"does not accept its arguments: flag provided but not defined: -no-such-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			driverChart := loadChart(t, "testdata/example-driver")
			driverChart.SetDependencies(loadChart(t, chartDir))
			objs := mustRender(t, driverChart, "storage", tc.vals)
			r, err := manifestcheck.Check(objs, manifestcheck.Options{Flags: sidecar.NewFlagSet})
			if err != nil {
				t.Fatal(err)
			}
			err = r.Err()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check-manifests: %v", err)
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("check-manifests error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if len(r.Sidecars) != 2 {
				t.Fatalf("found %d csi-fence-attacher containers, want the controller and the node agent: %v", len(r.Sidecars), r.Notes)
			}
			for _, s := range r.Sidecars {
				want := "/csi/csi-provisioner.sock"
				if s.Node {
					want = "/csi/csi.sock"
				}
				if s.Socket != want {
					t.Errorf("%s: socket %s, want %s", s.Workload, s.Socket, want)
				}
				// The default tag is the release the chart is part of.
				if !strings.HasSuffix(s.Container.Image, ":"+version.Dev) && !strings.HasSuffix(s.Container.Image, ":"+version.Dev+"-power-fencing") {
					t.Errorf("%s: image %s, want the tag %s", s.Workload, s.Container.Image, version.Dev)
				}
			}
			// The driver's ServiceAccounts are the ones bound, none created
			// by csi-fence.
			for k, v := range map[string]string{
				"ClusterRoleBinding /csi-fence-attacher-role":          "example-csi-controller",
				"ClusterRoleBinding /csi-fence-attacher-failover-role": "example-csi-controller",
				"ClusterRoleBinding /csi-fence-attacher-node":          "example-csi-node",
			} {
				if o := find(objs, k); o == nil || field(o, "subjects.0.name") != v || field(o, "subjects.0.namespace") != "storage" {
					t.Errorf("%s does not bind storage/%s: %v", k, v, o)
				}
			}
		})
	}
}

// The chart is part of the release in pkg/version: before the release its
// version is Dev, once tagged the release itself (CONTRIBUTING.md), so that
// the images it defaults to are the binaries of the same commit.
func TestChartVersionIsTheRelease(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	release, _, _ := strings.Cut(version.Dev, "-")
	if meta.AppVersion != version.Dev && meta.AppVersion != release {
		t.Errorf("Chart.yaml appVersion %s, want pkg/version.Dev %s or its release %s", meta.AppVersion, version.Dev, release)
	}
	if meta.Version != strings.TrimPrefix(meta.AppVersion, "v") {
		t.Errorf("Chart.yaml version %s, want its appVersion %s without the v", meta.Version, meta.AppVersion)
	}
}

// The values driver charts offer for each sidecar reach the containers:
// the leader election's timings and namespace, securityContext and env;
// the node agent runs as root unless its securityContext says otherwise,
// and listens on a port the CSI sidecars do not use by default.
func TestSidecarValues(t *testing.T) {
	driverChart := loadChart(t, "testdata/example-driver")
	driverChart.SetDependencies(loadChart(t, chartDir))
	objs := mustRender(t, driverChart, "storage", values(
		"csi-fence.controller.leaderElectionTimings", map[string]any{"leaseDuration": "137s", "renewDeadline": "107s", "retryPeriod": "26s", "namespace": "storage"},
		"csi-fence.controller.securityContext", map[string]any{"readOnlyRootFilesystem": true},
		"csi-fence.controller.env", []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}},
		"csi-fence.nodeAgent.securityContext", map[string]any{"readOnlyRootFilesystem": true, "runAsUser": 1000},
		"csi-fence.nodeAgent.env", []any{map[string]any{"name": "GOMAXPROCS", "value": "1"}}))
	r, err := manifestcheck.Check(objs, manifestcheck.Options{Flags: sidecar.NewFlagSet})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("check-manifests: %v", err)
	}
	for _, s := range r.Sidecars {
		c := s.Container
		args := strings.Join(c.Args, " ")
		if s.Node {
			if c.SecurityContext == nil || c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != 1000 || c.SecurityContext.ReadOnlyRootFilesystem == nil {
				t.Errorf("node agent's securityContext %+v, want the values' runAsUser 1000 and readOnlyRootFilesystem", c.SecurityContext)
			}
			if len(c.Env) != 2 || c.Env[1].Name != "GOMAXPROCS" {
				t.Errorf("node agent's env %v, want NODE_NAME and GOMAXPROCS", c.Env)
			}
			if !strings.Contains(args, "--http-endpoint=:9811") {
				t.Errorf("node agent's args %s, want --http-endpoint=:9811", args)
			}
			continue
		}
		for _, want := range []string{"--leader-election-lease-duration=137s", "--leader-election-renew-deadline=107s", "--leader-election-retry-period=26s", "--leader-election-namespace=storage"} {
			if !strings.Contains(args, want) {
				t.Errorf("controller's args %s lack %s", args, want)
			}
		}
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("controller's securityContext %+v", c.SecurityContext)
		}
		if len(c.Env) != 1 || c.Env[0].Value != "http://proxy:3128" {
			t.Errorf("controller's env %v", c.Env)
		}
	}
}
