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
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies in into out.
func (in *FencingRequest) DeepCopyInto(out *FencingRequest) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = in.Spec
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy.
func (in *FencingRequest) DeepCopy() *FencingRequest {
	if in == nil {
		return nil
	}
	out := new(FencingRequest)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *FencingRequest) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies in into out.
func (in *FencingRequestStatus) DeepCopyInto(out *FencingRequestStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	out.StartTime = in.StartTime.DeepCopy()
	out.CompletionTime = in.CompletionTime.DeepCopy()
	if in.Volumes != nil {
		out.Volumes = make([]FencedVolume, len(in.Volumes))
		for i := range in.Volumes {
			in.Volumes[i].DeepCopyInto(&out.Volumes[i])
		}
	}
	if in.NodeFence != nil {
		out.NodeFence = new(NodeFence)
		in.NodeFence.DeepCopyInto(out.NodeFence)
	}
	if in.ForceDeletedPods != nil {
		out.ForceDeletedPods = make([]ForceDeletedPod, len(in.ForceDeletedPods))
		for i := range in.ForceDeletedPods {
			out.ForceDeletedPods[i] = in.ForceDeletedPods[i]
			out.ForceDeletedPods[i].DeletedTime = in.ForceDeletedPods[i].DeletedTime.DeepCopy()
		}
	}
}

// DeepCopyInto copies in into out.
func (in *NodeFence) DeepCopyInto(out *NodeFence) {
	*out = *in
	out.StartedTime = in.StartedTime.DeepCopy()
	out.ConfirmedTime = in.ConfirmedTime.DeepCopy()
	out.NotReadySince = in.NotReadySince.DeepCopy()
	out.OutOfServiceTaintAdded = in.OutOfServiceTaintAdded.DeepCopy()
	if in.Machine != nil {
		m := *in.Machine
		m.Infrastructure.DeletionSeenTime = in.Machine.Infrastructure.DeletionSeenTime.DeepCopy()
		out.Machine = &m
	}
}

// DeepCopyInto copies in into out.
func (in *FencedVolume) DeepCopyInto(out *FencedVolume) {
	*out = *in
	out.StartedTime = in.StartedTime.DeepCopy()
	out.FencedTime = in.FencedTime.DeepCopy()
	out.CleanedTime = in.CleanedTime.DeepCopy()
	out.FencesInFlight = slices.Clone(in.FencesInFlight)
}

// DeepCopyInto copies in into out.
func (in *FencingRequestList) DeepCopyInto(out *FencingRequestList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]FencingRequest, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a deep copy.
func (in *FencingRequestList) DeepCopy() *FencingRequestList {
	if in == nil {
		return nil
	}
	out := new(FencingRequestList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *FencingRequestList) DeepCopyObject() runtime.Object { return in.DeepCopy() }
