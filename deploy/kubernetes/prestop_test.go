package kubernetes

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// The webhook's manifests render, fail open, send exactly the opted-in pods
// (the key the code reads), and carry each certificate story.
func TestPreStopWebhookRenders(t *testing.T) {
	for _, tc := range []struct {
		dir        string
		want       map[string][]string // object -> strings its YAML must have
		wantAbsent []string
	}{
		{dir: "prestop", want: map[string][]string{
			"MutatingWebhookConfiguration/csi-fence-prestop":  {"failurePolicy: Ignore", "'" + termreason.OptInKey + "'", "== '" + termreason.OptInEnabled + "'", "operations:\n    - CREATE"},
			"Deployment/csi-fence-prestop-webhook":            {"--generate-certificate", "--webhook-configuration=csi-fence-prestop", "--helper-image=", "--node-agent-url=http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath},
			"ClusterRole/csi-fence-prestop-webhook":           {"mutatingwebhookconfigurations", "csi-fence-prestop"},
			"ClusterRole/csi-fence-termination-reason-reader": {"controllerrevisions"},
			"Service/csi-fence-prestop-webhook":               {"targetPort: https"},
		}},
		{dir: "prestop-cert-manager", want: map[string][]string{
			"MutatingWebhookConfiguration/csi-fence-prestop":  {"cert-manager.io/inject-ca-from: default/csi-fence-prestop-webhook", "failurePolicy: Ignore"},
			"Deployment/csi-fence-prestop-webhook":            {"--tls-cert-file=/tls/tls.crt", "secretName: csi-fence-prestop-webhook-tls", "--node-agent-url=http://csi-fence-node-agent.default.svc:8081" + termreason.ServedPath},
			"Certificate/csi-fence-prestop-webhook":           {"csi-fence-prestop-webhook.default.svc"},
			"ClusterRole/csi-fence-termination-reason-reader": {"pods"},
		}, wantAbsent: []string{"ClusterRole/csi-fence-prestop-webhook"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tc.dir)
			if err != nil {
				t.Fatalf("kustomize build deploy/kubernetes/%s: %v", tc.dir, err)
			}
			got := map[string]string{}
			for _, r := range res.Resources() {
				y, err := r.AsYAML()
				if err != nil {
					t.Fatal(err)
				}
				got[r.GetKind()+"/"+r.GetName()] = string(y)
			}
			for obj, wants := range tc.want {
				y, ok := got[obj]
				if !ok {
					t.Errorf("no %s", obj)
					continue
				}
				for _, w := range wants {
					if !strings.Contains(y, w) {
						t.Errorf("%s lacks %q:\n%s", obj, w, y)
					}
				}
			}
			for _, obj := range tc.wantAbsent {
				if _, ok := got[obj]; ok {
					t.Errorf("%s should not be there", obj)
				}
			}
			if strings.Contains(got["Deployment/csi-fence-prestop-webhook"], "--generate-certificate") && tc.dir != "prestop" {
				t.Errorf("the cert-manager variant still generates its certificate")
			}
		})
	}
}
