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

package v1alpha1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

// FenceAgentConfigResource is the GroupVersionResource of FenceAgentConfigs.
var FenceAgentConfigResource = SchemeGroupVersion.WithResource(contract.FenceAgentConfigResource)

// FenceAgentConfig says how to power-fence a set of nodes through one
// ClusterLabs fence agent (fence_ipmilan, fence_redfish, fence_aws, ...): which
// agent, the parameters all its nodes share, each node's own parameters (BMC
// address, port, plug) and the Secret holding the credentials. It is
// cluster-scoped, like the nodes it describes; a cluster with several kinds of
// hardware has one per kind. A node must appear in at most one of them: two
// descriptions of one node's power switch cannot both be right, and powering
// off the wrong machine is the worst thing a fence can do.
//
// The spec holds no secret: credentials are read from the Secret at the moment
// of the fence and handed to the agent on its standard input only (S7), and
// only from a Secret labelled csi-fence.io/fence-agent-credentials: "true".
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fac
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agent`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FenceAgentConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FenceAgentConfigSpec `json:"spec"`
}

// FenceAgentConfigSpec is the agent and its parameters.
type FenceAgentConfigSpec struct {
	// Agent is the fence agent's executable name, fence_<something>. Only an
	// executable of that name in the sidecar's agent directories is run (and,
	// if the sidecar was given an allow-list, only one on it). The apiserver
	// is the first gate on which program the sidecar may run.
	// +kubebuilder:validation:Pattern=`^fence_[a-z0-9_]+$`
	// +kubebuilder:validation:MaxLength=63
	Agent string `json:"agent"`
	// SharedParameters are agent options given for every node, such as
	// lanplus: "1" or cipher: "3" for fence_ipmilan. Names are the agent's
	// stdin option names (see `fence_<agent> -o metadata`). A name that looks
	// like a credential (password, secret, token) is refused: those belong
	// in the Secret.
	SharedParameters map[string]string `json:"sharedParameters,omitempty"`
	// Credentials name the Secret whose keys become agent options (such as
	// username and password) for every node without credentials of its own.
	Credentials *FenceAgentCredentials `json:"credentials,omitempty"`
	// Nodes are the nodes this agent can fence, each with its own options.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	Nodes []FenceAgentNode `json:"nodes"`
	// Timeouts bound every agent call and the whole fence.
	Timeouts *FenceAgentTimeouts `json:"timeouts,omitempty"`
}

// FenceAgentNode is one node's own agent options.
type FenceAgentNode struct {
	// Name is the Node's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Parameters are this node's agent options (ip, ipport, plug, ...); they
	// override shared parameters of the same name.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Credentials, when set, replace the shared credentials for this node
	// (BMCs with a password each).
	Credentials *FenceAgentCredentials `json:"credentials,omitempty"`
}

// FenceAgentCredentials maps keys of a Secret to agent options.
type FenceAgentCredentials struct {
	// SecretName and SecretNamespace name the Secret. It is used only if it
	// carries the label csi-fence.io/fence-agent-credentials: "true" (its
	// owner's consent): the sidecar may read every Secret, and the agent
	// sends the values to the address this config names. Otherwise the
	// fence is not attempted and the error names the Secret and the label.
	// +kubebuilder:validation:MinLength=1
	SecretName string `json:"secretName"`
	// SecretNamespace is the Secret's namespace.
	// +kubebuilder:validation:MinLength=1
	SecretNamespace string `json:"secretNamespace"`
	// Parameters maps an agent option to the Secret key holding its value,
	// e.g. {username: bmc-user, password: bmc-password}. Every value read this
	// way is treated as secret: redacted from the agent's output and never
	// logged.
	Parameters map[string]string `json:"parameters"`
}

// FenceAgentTimeouts bound a fence. Zero (or unset) means the default.
type FenceAgentTimeouts struct {
	// CallTimeoutSeconds bounds one run of the agent (default 60). It must
	// exceed the agent's own waits (fence_ipmilan's power_timeout is 20 s).
	// +kubebuilder:validation:Minimum=0
	CallTimeoutSeconds int32 `json:"callTimeoutSeconds,omitempty"`
	// Retries is how many more times a failed call is tried (default 3).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	Retries *int32 `json:"retries,omitempty"`
	// RetryIntervalSeconds is the first pause between tries (default 5),
	// doubled after each try.
	// +kubebuilder:validation:Minimum=0
	RetryIntervalSeconds int32 `json:"retryIntervalSeconds,omitempty"`
	// ConfirmTimeoutSeconds bounds how long, after "off" succeeded, the
	// agent's "status" is polled until it reports the node off (default 60).
	// +kubebuilder:validation:Minimum=0
	ConfirmTimeoutSeconds int32 `json:"confirmTimeoutSeconds,omitempty"`
	// StatusIntervalSeconds is the pause between two status polls (default 2).
	// +kubebuilder:validation:Minimum=0
	StatusIntervalSeconds int32 `json:"statusIntervalSeconds,omitempty"`
}

// FenceAgentConfigList is a list of FenceAgentConfigs.
//
// +kubebuilder:object:root=true
type FenceAgentConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FenceAgentConfig `json:"items"`
}

// ListFenceAgentConfigs reads every FenceAgentConfig through the dynamic
// client. The project's CRDs have no generated clientset; a fence reads its
// configuration live, once, so it needs no informer either.
func ListFenceAgentConfigs(ctx context.Context, dyn dynamic.Interface) (*FenceAgentConfigList, error) {
	ul, err := dyn.Resource(FenceAgentConfigResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	list := &FenceAgentConfigList{ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion()}}
	for i := range ul.Items {
		c, err := FenceAgentConfigFromUnstructured(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *c)
	}
	return list, nil
}

// FenceAgentConfigFromUnstructured converts an object of the dynamic client.
func FenceAgentConfigFromUnstructured(obj interface{}) (*FenceAgentConfig, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("expected *unstructured.Unstructured, got %T", obj)
	}
	c := &FenceAgentConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), c); err != nil {
		return nil, fmt.Errorf("malformed FenceAgentConfig %q: %w", u.GetName(), err)
	}
	return c, nil
}

// FenceAgentConfigToUnstructured converts c for the dynamic client, filling in
// its kind.
func FenceAgentConfigToUnstructured(c *FenceAgentConfig) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(SchemeGroupVersion.String())
	u.SetKind(contract.FenceAgentConfigKind)
	return u, nil
}
