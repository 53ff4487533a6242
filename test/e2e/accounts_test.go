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
