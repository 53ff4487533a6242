//go:build tools

// Package tools records the Kubernetes commands built for the e2e tests: the
// control plane (hack/e2e-binaries.sh) and the real nodes' kubelet
// (hack/node-binaries.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
