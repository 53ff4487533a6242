//go:build e2e

package e2e

import (
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
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

// clientOf is a clientset acting as the user of kubeconfig (configOf).
func clientOf(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(configOf(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dynamicOf is a dynamic client acting as the user of kubeconfig (configOf).
func dynamicOf(t *testing.T, kubeconfig string) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(configOf(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
