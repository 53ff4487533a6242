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

package manifestcheck

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// NodeAgentService is the Service of the node agents' HTTP endpoints
// (deploy/kubernetes/sidecar/node-agent-service.yaml).
const NodeAgentService = "csi-fence-node-agent"

// noAttachDrivers returns the CSIDrivers in objs that say attachRequired:
// false: Kubernetes makes no VolumeAttachment for their volumes, so no
// attacher ever sees a detach to fence.
func noAttachDrivers(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() != "CSIDriver" {
			continue
		}
		if v, found, _ := unstructured.NestedBool(o.Object, "spec", "attachRequired"); found && !v {
			out = append(out, o.GetName())
		}
	}
	return out
}

func noAttachMessage(drivers []string) string {
	return fmt.Sprintf("CSIDriver %s says attachRequired: false: this driver has no attachments to fence (Kubernetes creates no VolumeAttachment for its volumes, so no attacher, csi-fence-attacher included, is ever asked to detach one). "+
		"Fix: leave csi-fence-attacher out of this driver's install; its nodes can still be fenced for the failover by a node-level backend (power, machine, or the driver's own fence on the out-of-service taint: docs/drivers.md)",
		strings.Join(drivers, ", "))
}

// hostFile is where a file a container sees lies on the host, when it is
// under a hostPath volume's mount ("" otherwise).
func hostFile(w Workload, c corev1.Container, file string) string {
	m, ok := mountFor(c, file)
	if !ok {
		return ""
	}
	for _, v := range w.Spec.Volumes {
		if v.Name == m.Name && v.HostPath != nil {
			rel := strings.TrimPrefix(strings.TrimPrefix(file, strings.TrimSuffix(m.MountPath, "/")), "/")
			return path.Join(v.HostPath.Path, m.SubPath, rel)
		}
	}
	return ""
}

// sharedOnHost returns another workload's container that sees the host
// file through a hostPath volume: a driver whose socket a node agent in a
// pod of its own reaches through the host (csi-driver-host-path: the
// driver's StatefulSet and an agent DaemonSet share its plugin directory).
func sharedOnHost(ws []Workload, file string) bool {
	for _, w := range ws {
		for _, c := range w.Spec.Containers {
			if imageName(c.Image) == FenceImage {
				continue
			}
			for _, m := range c.VolumeMounts {
				for _, v := range w.Spec.Volumes {
					if v.Name != m.Name || v.HostPath == nil {
						continue
					}
					dir := path.Join(v.HostPath.Path, m.SubPath)
					if strings.HasPrefix(file, dir+"/") || file == dir {
						return true
					}
				}
			}
		}
	}
	return false
}

// checkNodeAgentService checks that the node agents' Service is in the
// namespace of the pods it must select: a Service selects pods of its own
// namespace only.
func checkNodeAgentService(objs []*unstructured.Unstructured, sidecars []Sidecar, defaultNamespace string) []string {
	var svcNS []string
	for _, o := range objs {
		if o.GetKind() == "Service" && strings.Contains(o.GetName(), NodeAgentService) {
			ns := o.GetNamespace()
			if ns == "" {
				ns = defaultNamespace
			}
			svcNS = append(svcNS, ns)
		}
	}
	if len(svcNS) == 0 {
		return nil
	}
	var errs []string
	for _, s := range sidecars {
		if !s.Node {
			continue
		}
		ns := s.Workload.Namespace
		if ns == "" {
			ns = defaultNamespace
		}
		if !slices.Contains(svcNS, ns) {
			errs = append(errs, fmt.Sprintf("%s: the Service %s is in namespace %s, not in %s with node agent %q: it selects no node agent, and a pod force-deleted while its node was away cannot learn why. "+
				"Fix: kustomize, namespace: %s in the ConfigMap csi-fence-driver; Helm, driver.namespace=%s",
				s.Workload, NodeAgentService, strings.Join(svcNS, ", "), ns, s.Container.Name, ns, ns))
		}
	}
	return errs
}

// listenPorts are the ports a container listens on: its declared ports
// and, for the HTTP flags the CSI sidecars share, the port they name.
func listenPorts(c corev1.Container) []int32 {
	var out []int32
	for _, p := range c.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			out = append(out, p.ContainerPort)
		}
	}
	for _, flag := range []string{"http-endpoint", "metrics-address"} {
		v, ok := argValue(c.Args, flag)
		if !ok {
			continue
		}
		if _, port, err := net.SplitHostPort(expand(v, c)); err == nil {
			if n, err := strconv.ParseInt(port, 10, 32); err == nil {
				out = append(out, int32(n))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkHostPorts finds a csi-fence-attacher listening on a port another
// container of a host-network pod listens on: on the host network every
// container port is a port of the node, and DaemonSets run on every node.
func checkHostPorts(ws []Workload) []string {
	type user struct {
		w     Workload
		c     string
		fence bool
	}
	byPort := map[int32][]user{}
	for _, w := range ws {
		if !w.Spec.HostNetwork {
			continue
		}
		for _, c := range w.Spec.Containers {
			for _, p := range listenPorts(c) {
				byPort[p] = append(byPort[p], user{w, c.Name, imageName(c.Image) == FenceImage})
			}
		}
	}
	var ports []int32
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	var errs []string
	for _, p := range ports {
		us := byPort[p]
		if len(us) < 2 {
			continue
		}
		for i, u := range us {
			if !u.fence {
				continue
			}
			for j, o := range us {
				// Two replicas of one Deployment never share a node's port
				// by design; two containers of a DaemonSet, or of two
				// host-network workloads that may land on one node, do.
				if i == j || (o.w.String() == u.w.String() && o.c == u.c) {
					continue
				}
				errs = append(errs, fmt.Sprintf("%s: csi-fence-attacher %q listens on port %d, as container %q of %s does, both on the host network: one of them cannot start. "+
					"Fix: give csi-fence-attacher another port (its --http-endpoint and its containerPort; the node agent's default is 9811)",
					u.w, u.c, p, o.c, o.w))
				break
			}
		}
	}
	return errs
}

// windowsNotes says which DaemonSets run on Windows nodes: the node agent
// has no Windows build, so volumes fenced on a Windows node are not cleaned
// by it when the node returns.
func windowsNotes(ws []Workload) []string {
	var out []string
	for _, w := range ws {
		if w.Kind != "DaemonSet" || w.Spec.NodeSelector[corev1.LabelOSStable] != "windows" {
			continue
		}
		out = append(out, fmt.Sprintf("%s runs on Windows nodes, where csi-fence-attacher has no node agent (no Windows build): a Windows node whose volumes were fenced stays quarantined when it returns, as nothing cleans it. "+
			"Keep the workloads that need the failover on Linux nodes (nothing to add to this DaemonSet)", w))
	}
	return out
}
