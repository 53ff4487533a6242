// Pins the real Kubernetes control-plane binaries the e2e tests and the demo
// run against. k8s.io/kubernetes points its staging modules at ./staging, so
// every one of them is replaced here by its published version.
module github.com/csi-fence/fence-attacher/test/e2e/tools/k8s

go 1.26.0

godebug default=go1.26

require k8s.io/kubernetes v1.36.4

replace (
	k8s.io/api => k8s.io/api v0.36.4
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.36.4
	k8s.io/apimachinery => k8s.io/apimachinery v0.36.4
	k8s.io/apiserver => k8s.io/apiserver v0.36.4
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.36.4
	k8s.io/client-go => k8s.io/client-go v0.36.4
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.36.4
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.36.4
	k8s.io/code-generator => k8s.io/code-generator v0.36.4
	k8s.io/component-base => k8s.io/component-base v0.36.4
	k8s.io/component-helpers => k8s.io/component-helpers v0.36.4
	k8s.io/controller-manager => k8s.io/controller-manager v0.36.4
	k8s.io/cri-api => k8s.io/cri-api v0.36.4
	k8s.io/cri-client => k8s.io/cri-client v0.36.4
	k8s.io/cri-streaming => k8s.io/cri-streaming v0.36.4
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.36.4
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.36.4
	k8s.io/endpointslice => k8s.io/endpointslice v0.36.4
	k8s.io/externaljwt => k8s.io/externaljwt v0.36.4
	k8s.io/kms => k8s.io/kms v0.36.4
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.36.4
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.36.4
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.36.4
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.36.4
	k8s.io/kubectl => k8s.io/kubectl v0.36.4
	k8s.io/kubelet => k8s.io/kubelet v0.36.4
	k8s.io/metrics => k8s.io/metrics v0.36.4
	k8s.io/mount-utils => k8s.io/mount-utils v0.36.4
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.36.4
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.36.4
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.36.4
	k8s.io/sample-controller => k8s.io/sample-controller v0.36.4
	k8s.io/streaming => k8s.io/streaming v0.36.4
)
