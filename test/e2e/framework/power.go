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
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// ConfigurePowerSwitches gives the cluster what an admin gives it for the
// BMCs of driver d's plugins on nodes (SetPowerSwitch): a Secret named name
// in kube-system with the credentials, labelled as fence agent credentials
// (a Secret without the label is refused), and a FenceAgentConfig named name
// that lists the nodes for fence_ipmilan. It returns a func deleting both.
func (p *Product) ConfigurePowerSwitches(ctx context.Context, name string, d *Driver, nodes []string, user, password string) (func(), error) {
	c := p.c
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system",
		Labels: map[string]string{contract.FenceAgentCredentialsLabel: contract.FenceAgentCredentialsTrue}},
		Data: map[string][]byte{"username": []byte(user), "password": []byte(password)}}
	if _, err := c.Client.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	cfg := &fencingv1alpha1.FenceAgentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fencingv1alpha1.FenceAgentConfigSpec{
			Agent: "fence_ipmilan",
			// ipmi_sim does not answer "Get Channel Cipher Suites": name one,
			// or every ipmitool call waits 10-14 s for that to time out.
			SharedParameters: map[string]string{"lanplus": "1", "cipher": "3"},
			Credentials: &fencingv1alpha1.FenceAgentCredentials{SecretName: secret.Name, SecretNamespace: secret.Namespace,
				Parameters: map[string]string{"username": "username", "password": "password"}},
			Timeouts: &fencingv1alpha1.FenceAgentTimeouts{CallTimeoutSeconds: 40, Retries: ptr.To[int32](1),
				RetryIntervalSeconds: 1, ConfirmTimeoutSeconds: 30, StatusIntervalSeconds: 1},
		},
	}
	for _, node := range nodes {
		n := p.Nodes[node]
		if n == nil {
			return nil, fmt.Errorf("node %s was not started", node)
		}
		i := slices.IndexFunc(n.Plugins, func(pl *NodePlugin) bool { return pl.Driver == d })
		if i < 0 || n.Plugins[i].BMC == nil {
			return nil, fmt.Errorf("the plugin of %s on %s has no power switch (SetPowerSwitch before StartNode)", d.Name, node)
		}
		bmc := n.Plugins[i].BMC
		cfg.Spec.Nodes = append(cfg.Spec.Nodes, fencingv1alpha1.FenceAgentNode{Name: node,
			Parameters: map[string]string{"ip": bmc.Host, "ipport": strconv.Itoa(bmc.Port)}})
	}
	u, err := fencingv1alpha1.FenceAgentConfigToUnstructured(cfg)
	if err != nil {
		return nil, err
	}
	res := c.Dynamic.Resource(fencingv1alpha1.FenceAgentConfigResource)
	if _, err := res.Create(ctx, u, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		return nil, err
	}
	return func() {
		_ = res.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
		_ = c.Client.CoreV1().Secrets(secret.Namespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	}, nil
}
