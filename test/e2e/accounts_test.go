//go:build e2e

package e2e

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// configOf returns the REST config of a kubeconfig the cluster issued for a
// user (Cluster.ServiceAccountKubeconfig, Cluster.NodeBoundKubeconfig), or
// fails the test.
func configOf(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
