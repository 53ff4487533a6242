//go:build e2e

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

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The preStop webhook's ServiceAccount may update its own
// MutatingWebhookConfiguration, to keep the caBundle; deploy/'s admission
// policy refuses any other change it makes: a webhook that could widen its
// own rules or selectors could mutate every pod of the cluster (issue 38
// item 9). The caBundle alone still goes through.
func TestTerminationReasonWebhookChangesOnlyItsCA(t *testing.T) {
	termSetup(t)
	ctx := context.Background()
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, "default", "csi-fence-prestop-webhook")
	if err != nil {
		t.Fatal(err)
	}
	client := clientOf(t, kubeconfig)
	cfgs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	update := func(change func(*admissionregistrationv1.MutatingWebhook)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c, err := cfgs.Get(ctx, framework.PreStopWebhookConfig, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i := range c.Webhooks {
				change(&c.Webhooks[i])
			}
			_, err = cfgs.Update(ctx, c, metav1.UpdateOptions{})
			return err
		})
	}
	const refusal = "may change only the caBundle"
	refused := []struct {
		name   string
		change func(*admissionregistrationv1.MutatingWebhook)
	}{
		{"its failure policy", func(w *admissionregistrationv1.MutatingWebhook) {
			w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		}},
		{"its rules", func(w *admissionregistrationv1.MutatingWebhook) {
			w.Rules = append(w.Rules, admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}}})
		}},
		{"its match conditions (every pod, opted in or not)", func(w *admissionregistrationv1.MutatingWebhook) {
			w.MatchConditions = nil
		}},
	}
	// A policy just created takes a moment to be enforced.
	if err := framework.WaitFor(ctx, 30*time.Second, "the policy enforced", func(ctx context.Context) (bool, error) {
		err := update(refused[0].change)
		return err != nil, nil
	}); err != nil {
		t.Fatalf("%v: the webhook's user could change its failure policy", err)
	}
	for _, tc := range refused {
		err := update(tc.change)
		if err == nil || !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) || !strings.Contains(err.Error(), refusal) {
			t.Errorf("changing %s: %v, want a denial saying %q", tc.name, err, refusal)
		}
	}
	// What the webhook does at each start: a new caBundle (here the same
	// certificates with a line more, then as they were).
	var before []byte
	if err := update(func(w *admissionregistrationv1.MutatingWebhook) {
		before = w.ClientConfig.CABundle
		w.ClientConfig.CABundle = append(append([]byte{}, before...), '\n')
	}); err != nil {
		t.Errorf("the webhook's user could not write its caBundle: %v", err)
	}
	if err := update(func(w *admissionregistrationv1.MutatingWebhook) { w.ClientConfig.CABundle = before }); err != nil {
		t.Errorf("the webhook's user could not write its caBundle back: %v", err)
	}
}
