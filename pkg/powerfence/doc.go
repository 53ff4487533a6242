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

// Package powerfence fences a node by powering it off through a ClusterLabs
// fence agent (fence_ipmilan, fence_redfish, fence_aws, fence_kubevirt, ...:
// the agents Pacemaker and medik8s' fence-agents-remediation run), and
// confirms that it is off before it says so (DESIGN.md section 5, "Beyond the
// CSI extension"; invariants S1 and S9: a node confirmed powered off may have
// its volumes moved).
//
// It speaks the fence agent API (ClusterLabs fence-agents doc/FenceAgentAPI.md):
// the agent is executed with no arguments and reads its options as name=value
// lines on standard input; the action is one more option (off, on, reboot,
// status, monitor); the exit code is the answer (0 success, 1 failure; for
// status 0 on, 2 off, 1 unreachable). Options never go on the command line or
// into the environment, where ps and /proc would show a password; every value
// read from a Secret is redacted from whatever the agent prints before that
// text is logged, returned or kept in a record (S7).
//
// A fence is "off" (retried with exponential backoff, each call bounded by a
// timeout), then "status" polled until the agent reports the node off, within
// a bound: a timeout is a failure, never a success. The Result keeps every
// agent call with its exit code, timing and (redacted) output, for the record.
//
// Which agent and options fence a node comes from the cluster-scoped
// FenceAgentConfig resource (pkg/apis/fencing/v1alpha1) and the Secret it
// names, both read live at the moment of the fence: see Resolver and
// NewBackend. The Secret is used only if it opted in, by the label
// csi-fence.io/fence-agent-credentials: "true" (contract), since the config
// may name any Secret and the agent connects where the config says. Backend is the seam for the failover controller, which will
// escalate from storage fencing to power fencing; this package knows nothing
// of it.
package powerfence
