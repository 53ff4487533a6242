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

package fenceview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/machinefence"
	"github.com/csi-fence/fence-attacher/pkg/powerfence"
	"github.com/csi-fence/fence-attacher/pkg/protection"
)

// registrationTTL is how long after its last renewal a driver's
// registration counts (pkg/failover's registrationTTL). explain compares
// the renewal with its own clock: a skew between this machine and the
// sidecar's shifts the answer near the edge, never the failover itself.
const registrationTTL = 5 * time.Minute

// Target is what `kubectl fence explain` explains: a pod, a workload (its
// pods, by its selector), a namespace, or the whole cluster (Kind "").
type Target struct {
	// Kind is pod, statefulset, deployment, replicaset, daemonset, job,
	// namespace, or "" for every pod of the cluster.
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

func (t Target) String() string {
	switch t.Kind {
	case "":
		return "the cluster"
	case "namespace":
		return "namespace/" + t.Name
	}
	return t.Kind + "/" + t.Name + " in namespace " + t.Namespace
}

var kinds = map[string]string{
	"po": "pod", "pod": "pod", "pods": "pod",
	"sts": "statefulset", "statefulset": "statefulset", "statefulsets": "statefulset",
	"deploy": "deployment", "deployment": "deployment", "deployments": "deployment",
	"rs": "replicaset", "replicaset": "replicaset", "replicasets": "replicaset",
	"ds": "daemonset", "daemonset": "daemonset", "daemonsets": "daemonset",
	"job": "job", "jobs": "job",
	"ns": "namespace", "namespace": "namespace", "namespaces": "namespace",
}

// ParseTarget reads explain's argument, kubectl's KIND/NAME (pod/db-0,
// sts/db, ns/prod); none is namespace (the namespace of the context or
// -n), or the cluster with allNamespaces.
func ParseTarget(args []string, namespace string, allNamespaces bool) (Target, error) {
	switch {
	case len(args) == 0 && allNamespaces:
		return Target{}, nil
	case len(args) == 0:
		return Target{Kind: "namespace", Name: namespace}, nil
	case len(args) > 1:
		return Target{}, fmt.Errorf("explain: want at most one KIND/NAME, got %q", args)
	case allNamespaces:
		return Target{}, fmt.Errorf("explain: --all-namespaces takes no KIND/NAME")
	}
	k, name, ok := strings.Cut(args[0], "/")
	kind, known := kinds[strings.ToLower(k)]
	if !ok || name == "" || !known {
		return Target{}, fmt.Errorf("explain: %q is not KIND/NAME (pod, statefulset, deployment, replicaset, daemonset, job or namespace)", args[0])
	}
	if kind == "namespace" {
		return Target{Kind: kind, Name: name}, nil
	}
	return Target{Kind: kind, Namespace: namespace, Name: name}, nil
}

// ExplainOptions set what explain cannot read from the cluster.
type ExplainOptions struct {
	// StormGuardNamespace is the sidecars' --storm-guard-namespace, where
	// the drivers register.
	StormGuardNamespace string
	// NodeMonitorGracePeriod is kube-controller-manager's (0: its
	// default, protection.DefaultNodeMonitorGracePeriod).
	NodeMonitorGracePeriod time.Duration
	// Now is the time registrations are judged at (zero: time.Now()).
	Now time.Time
}

// Explanation is explain's answer.
type Explanation struct {
	Target string `json:"target"`
	// Config is the failover's configuration as the owner of node-level
	// fencing registered it.
	Config ExplainConfig `json:"config"`
	Pods   []PodAnswer   `json:"pods"`
	// Protected and Unprotected count the pods; ByReason the unprotected
	// ones by reason.
	Protected   int            `json:"protected"`
	Unprotected int            `json:"unprotected"`
	ByReason    map[string]int `json:"byReason,omitempty"`
}

// ExplainConfig is the configuration explain answered with.
type ExplainConfig struct {
	// Driver is the registration read (the owner's of node-level fencing,
	// else the first one), empty when none is.
	Driver               string   `json:"driver,omitempty"`
	Drivers              []string `json:"drivers,omitempty"`
	NonGracefulFailover  bool     `json:"nonGracefulFailover"`
	FencingBackends      []string `json:"fencingBackends,omitempty"`
	FailoverOptIn        bool     `json:"failoverOptIn"`
	StormGuardPaused     string   `json:"stormGuardPaused,omitempty"`
	NodeMonitorGraceSecs float64  `json:"nodeMonitorGracePeriodSeconds"`
}

// PodAnswer is one pod's answer.
type PodAnswer struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	protection.Answer
}

// explainer holds what explain read, and answers protection's questions
// from it.
type explainer struct {
	kube     kubernetes.Interface
	ctx      context.Context
	now      time.Time
	pvcs     map[string]*corev1.PersistentVolumeClaim
	pvs      map[string]*corev1.PersistentVolume
	drivers  map[string]*storagev1.CSIDriver
	regs     map[string]protection.Registration
	own      protection.Registration
	vas      map[string][]*storagev1.VolumeAttachment
	configs  []fencingv1alpha1.FenceAgentConfig
	nsLabels map[string]map[string]string
	nodePods map[string][]*corev1.Pod
	backends []string
	// configured: nodeBackend's answers, by node and backend.
	configured map[string]bool
	readError  error
}

// Explain answers, for each pod of target, whether it would fail over if
// its node died now (protection.Assess, the failover's own decision), on
// what it reads: the pods, nodes, claims, volumes, CSIDrivers,
// VolumeAttachments, FenceAgentConfigs, the drivers' registrations and the
// storm guard's Lease. It only reads.
func Explain(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, target Target, opts ExplainOptions) (*Explanation, error) {
	e := &explainer{kube: kube, ctx: ctx, now: opts.Now, pvcs: map[string]*corev1.PersistentVolumeClaim{}, pvs: map[string]*corev1.PersistentVolume{},
		drivers: map[string]*storagev1.CSIDriver{}, regs: map[string]protection.Registration{}, vas: map[string][]*storagev1.VolumeAttachment{},
		nsLabels: map[string]map[string]string{}, nodePods: map[string][]*corev1.Pod{}, configured: map[string]bool{}}
	if e.now.IsZero() {
		e.now = time.Now()
	}
	pods, err := e.targetPods(target)
	if err != nil {
		return nil, err
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	nodeByName := map[string]*corev1.Node{}
	for i := range nodes.Items {
		nodeByName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	if err := e.readCluster(dyn); err != nil {
		return nil, err
	}
	cl, cfg, err := e.cluster(opts, len(nodes.Items))
	if err != nil {
		return nil, err
	}
	x := &Explanation{Target: target.String(), Config: cfg, Pods: []PodAnswer{}, ByReason: map[string]int{}}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		a := protection.Assess(p, nodeByName[p.Spec.NodeName], cl)
		if e.readError != nil {
			return nil, e.readError
		}
		x.Pods = append(x.Pods, PodAnswer{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Answer: a})
		switch {
		case a.Protected:
			x.Protected++
		case a.Reason.Counted():
			x.Unprotected++
			x.ByReason[string(a.Reason)]++
		}
	}
	sort.Slice(x.Pods, func(i, j int) bool {
		if x.Pods[i].Namespace != x.Pods[j].Namespace {
			return x.Pods[i].Namespace < x.Pods[j].Namespace
		}
		return x.Pods[i].Name < x.Pods[j].Name
	})
	return x, nil
}

// targetPods lists the pods of target.
func (e *explainer) targetPods(t Target) ([]*corev1.Pod, error) {
	pods := e.kube.CoreV1().Pods(t.Namespace)
	var selector *metav1.LabelSelector
	switch t.Kind {
	case "pod":
		p, err := pods.Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []*corev1.Pod{p}, nil
	case "", "namespace":
		list, err := e.kube.CoreV1().Pods(t.Name).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		return ptrs(list.Items), nil
	case "statefulset":
		o, err := e.kube.AppsV1().StatefulSets(t.Namespace).Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		selector = o.Spec.Selector
	case "deployment":
		o, err := e.kube.AppsV1().Deployments(t.Namespace).Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		selector = o.Spec.Selector
	case "replicaset":
		o, err := e.kube.AppsV1().ReplicaSets(t.Namespace).Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		selector = o.Spec.Selector
	case "daemonset":
		o, err := e.kube.AppsV1().DaemonSets(t.Namespace).Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		selector = o.Spec.Selector
	case "job":
		o, err := e.kube.BatchV1().Jobs(t.Namespace).Get(e.ctx, t.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		selector = o.Spec.Selector
	default:
		return nil, fmt.Errorf("explain: unknown kind %q", t.Kind)
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", t.Kind, t.Name, err)
	}
	list, err := pods.List(e.ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", t.Kind, t.Name, err)
	}
	return ptrs(list.Items), nil
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// readCluster reads what every pod's answer may need.
func (e *explainer) readCluster(dyn dynamic.Interface) error {
	pvs, err := e.kube.CoreV1().PersistentVolumes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	for i := range pvs.Items {
		e.pvs[pvs.Items[i].Name] = &pvs.Items[i]
	}
	drivers, err := e.kube.StorageV1().CSIDrivers().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing CSIDrivers: %w", err)
	}
	for i := range drivers.Items {
		e.drivers[drivers.Items[i].Name] = &drivers.Items[i]
	}
	vas, err := e.kube.StorageV1().VolumeAttachments().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing VolumeAttachments: %w", err)
	}
	for i := range vas.Items {
		va := &vas.Items[i]
		e.vas[va.Spec.NodeName] = append(e.vas[va.Spec.NodeName], va)
	}
	if dyn != nil {
		configs, err := fencingv1alpha1.ListFenceAgentConfigs(e.ctx, dyn)
		switch {
		case apierrors.IsNotFound(err):
			// No FenceAgentConfig CRD: no power backend.
		case err != nil:
			return fmt.Errorf("listing FenceAgentConfigs: %w", err)
		default:
			e.configs = configs.Items
		}
	}
	return nil
}

// cluster is protection's view of what was read, and the configuration
// said.
func (e *explainer) cluster(opts ExplainOptions, nodes int) (protection.Cluster, ExplainConfig, error) {
	ns := opts.StormGuardNamespace
	leases := e.kube.CoordinationV1().Leases(ns)
	regs, err := leases.List(e.ctx, metav1.ListOptions{LabelSelector: protection.RegistrationLabel})
	if err != nil {
		return protection.Cluster{}, ExplainConfig{}, fmt.Errorf("listing the drivers' registrations in %s: %w", ns, err)
	}
	var owner string
	if l, err := leases.Get(e.ctx, contract.NodeFencingLeaseName, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
		owner = *l.Spec.HolderIdentity
	}
	cfg := ExplainConfig{NodeMonitorGraceSecs: opts.NodeMonitorGracePeriod.Seconds()}
	if cfg.NodeMonitorGraceSecs == 0 {
		cfg.NodeMonitorGraceSecs = protection.DefaultNodeMonitorGracePeriod.Seconds()
	}
	var all []protection.Registration
	for i := range regs.Items {
		if r, ok := protection.ParseRegistration(&regs.Items[i]); ok {
			e.regs[r.Driver] = r
			all = append(all, r)
			cfg.Drivers = append(cfg.Drivers, r.Driver)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Driver < all[j].Driver })
	sort.Strings(cfg.Drivers)
	for _, r := range all {
		if owner != "" && r.Identity == owner {
			e.own = r
		}
	}
	if e.own.Driver == "" && len(all) > 0 {
		e.own = all[0]
	}
	e.backends = e.own.Backends
	if len(e.backends) == 0 {
		e.backends = []string{fencingv1alpha1.BackendStorage}
	}
	cfg.Driver, cfg.NonGracefulFailover, cfg.FencingBackends, cfg.FailoverOptIn = e.own.Driver, e.own.Gate || !e.own.Configured, e.backends, e.own.OptIn
	cl := protection.Cluster{
		Facts: protection.Facts{
			PV:                   e.pv,
			Driver:               e.driver,
			StorageFences:        e.storageFences,
			FencesOnOutOfService: e.fencesOnOutOfService,
			NamespaceLabels:      e.namespaceLabels,
			OptIn:                e.own.OptIn,
		},
		Registered:             len(all) > 0,
		Gate:                   cfg.NonGracefulFailover,
		Backends:               e.backends,
		NodeBackend:            e.nodeBackend,
		Nodes:                  nodes,
		NodeMonitorGracePeriod: opts.NodeMonitorGracePeriod,
		FenceTime:              e.fenceTime,
	}
	// The storm guard's limits are the strictest of every driver's.
	for _, r := range all {
		cl.MaxNodes, cl.MaxPercent = strictest(cl.MaxNodes, r.MaxNodes), strictest(cl.MaxPercent, r.MaxPercent)
	}
	guard, err := leases.Get(e.ctx, contract.StormGuardLeaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return cl, cfg, fmt.Errorf("reading the storm guard's Lease: %w", err)
	default:
		cl.Paused = guard.Annotations[PausedAnnotation]
		if s := guard.Annotations[stormGuardNodesAnnotation]; s != "" {
			cl.Admitted = strings.Split(s, ",")
		}
	}
	cfg.StormGuardPaused = cl.Paused
	return cl, cfg, nil
}

func strictest(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

func (e *explainer) fail(err error) {
	if e.readError == nil {
		e.readError = err
	}
}

func (e *explainer) pv(namespace, claim string) (*corev1.PersistentVolume, error) {
	key := namespace + "/" + claim
	pvc, ok := e.pvcs[key]
	if !ok {
		var err error
		pvc, err = e.kube.CoreV1().PersistentVolumeClaims(namespace).Get(e.ctx, claim, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.fail(err)
		}
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", key, err)
		}
		e.pvcs[key] = pvc
	}
	if pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("claim %s %w", key, protection.ErrUnbound)
	}
	pv, ok := e.pvs[pvc.Spec.VolumeName]
	if !ok {
		return nil, fmt.Errorf("volume %s: not found", pvc.Spec.VolumeName)
	}
	return pv, nil
}

func (e *explainer) driver(name string) (*storagev1.CSIDriver, error) {
	if d, ok := e.drivers[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("CSIDriver %s not found", name)
}

// storageFences is the failover's storageFences on a registration: the
// storage backend is on, and the driver registered that it can fence and
// renewed it within registrationTTL.
func (e *explainer) storageFences(driver string) bool {
	r, ok := e.regs[driver]
	return e.enabled(fencingv1alpha1.BackendStorage) && ok && r.CanFence && e.now.Sub(r.RenewTime) < registrationTTL
}

func (e *explainer) fencesOnOutOfService(driver string) bool {
	d, ok := e.drivers[driver]
	return e.enabled(fencingv1alpha1.BackendOutOfService) && ok && d.Annotations[contract.FencesOnOutOfServiceAnnotation] == "true"
}

func (e *explainer) enabled(backend string) bool {
	for _, b := range e.backends {
		if b == backend {
			return true
		}
	}
	return false
}

func (e *explainer) namespaceLabels(name string) map[string]string {
	if l, ok := e.nsLabels[name]; ok {
		return l
	}
	ns, err := e.kube.CoreV1().Namespaces().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			e.fail(err)
		}
		return nil
	}
	e.nsLabels[name] = ns.Labels
	return ns.Labels
}

// nodeBackend is the failover's configured(node) of each node-level
// backend.
func (e *explainer) nodeBackend(node *corev1.Node, backend string) bool {
	key := node.Name + "/" + backend
	if ok, known := e.configured[key]; known {
		return ok
	}
	e.configured[key] = e.nodeBackendConfigured(node, backend)
	return e.configured[key]
}

func (e *explainer) nodeBackendConfigured(node *corev1.Node, backend string) bool {
	if !e.enabled(backend) {
		return false
	}
	switch backend {
	case fencingv1alpha1.BackendPower:
		_, err := powerfence.ConfigFor(e.configs, node.Name)
		return err == nil
	case fencingv1alpha1.BackendMachine:
		_, _, ok := machinefence.MachineOf(node)
		return ok
	case fencingv1alpha1.BackendOutOfService:
		vas := e.vas[node.Name]
		attached := map[string]bool{}
		for _, va := range vas {
			if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
				attached[*pv] = true
			}
		}
		driverOf := func(pv string) string {
			if p, ok := e.pvs[pv]; ok && p.Spec.CSI != nil {
				return p.Spec.CSI.Driver
			}
			return ""
		}
		unattached := protection.UnattachedStorage(e.podsOn(node.Name), e.pv, func(pv string) bool { return attached[pv] })
		return protection.OutOfServiceFences(vas, driverOf, e.fencesOnOutOfService, e.storageFences, unattached)
	}
	return false
}

func (e *explainer) podsOn(node string) []*corev1.Pod {
	if pods, ok := e.nodePods[node]; ok {
		return pods
	}
	list, err := e.kube.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		e.fail(err)
		return nil
	}
	e.nodePods[node] = ptrs(list.Items)
	return e.nodePods[node]
}

// fenceTime is how long a backend's fence is expected to take, at most.
func (e *explainer) fenceTime(node *corev1.Node, backend string) protection.Term {
	t := protection.Term{Name: "fence (" + backend + ")"}
	switch backend {
	case fencingv1alpha1.BackendStorage:
		if e.own.Timeout > 0 {
			t.Seconds, t.Known = e.own.Timeout.Seconds(), true
		}
		t.Source = "one ControllerUnpublishVolume per volume, bounded by the sidecar's --timeout"
	case fencingv1alpha1.BackendPower:
		cfg, err := powerfence.ConfigFor(e.configs, node.Name)
		if err != nil {
			break
		}
		call, confirm := powerfence.DefaultCallTimeout, powerfence.DefaultConfirmTimeout
		if to := cfg.Spec.Timeouts; to != nil {
			if to.CallTimeoutSeconds > 0 {
				call = time.Duration(to.CallTimeoutSeconds) * time.Second
			}
			if to.ConfirmTimeoutSeconds > 0 {
				confirm = time.Duration(to.ConfirmTimeoutSeconds) * time.Second
			}
		}
		t.Seconds, t.Known = (call + confirm).Seconds(), true
		t.Source = "FenceAgentConfig " + cfg.Name + ": the agent's call timeout and the confirmation timeout, at most"
	case fencingv1alpha1.BackendMachine:
		t.Source = "until the infrastructure provider reports the Machine's instance gone"
	case fencingv1alpha1.BackendOutOfService:
		t.Known = true
		t.Source = "the attach/detach controller detaches at once on the out-of-service taint"
	}
	return t
}

// Write writes the explanation as format asks: table, json or yaml.
func (x *Explanation) Write(w io.Writer, format string) error {
	var b []byte
	var err error
	switch format {
	case "", "table":
		_, err = io.WriteString(w, x.Table())
		return err
	case "json":
		b, err = json.MarshalIndent(x, "", "  ")
		b = append(b, '\n')
	case "yaml":
		b, err = yaml.Marshal(x)
	default:
		err = fmt.Errorf("unknown output format %q (table, json or yaml)", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Table is the explanation as kubectl-style columns, then why each pod
// that is not protected is not, and the fix.
func (x *Explanation) Table() string {
	var b strings.Builder
	if len(x.Pods) == 0 {
		fmt.Fprintf(&b, "No running pod in %s.\n", x.Target)
	} else {
		rows := [][]string{{"NAMESPACE", "POD", "NODE", "PROTECTED", "BACKEND", "AFTER", "REASON"}}
		for _, p := range x.Pods {
			after := "-"
			if p.Protected {
				after = "~" + shortDuration(time.Duration(p.AfterSeconds)*time.Second)
				for _, t := range p.After {
					if !t.Known {
						after += "+"
					}
				}
			}
			rows = append(rows, []string{p.Namespace, p.Name, dash(p.Node), yesNo(p.Protected, "yes", "no"), dash(p.Backend), after, dash(string(p.Reason))})
		}
		writeColumns(&b, rows)
	}
	c := x.Config
	fmt.Fprintf(&b, "\n%d protected, %d not protected (%s).", x.Protected, x.Unprotected, x.Target)
	if c.Driver != "" {
		fmt.Fprintf(&b, " Configuration of driver %s: NonGracefulFailover=%v, --fencing-backends=%s, --failover-opt-in=%v, node-monitor-grace-period %s.",
			c.Driver, c.NonGracefulFailover, strings.Join(c.FencingBackends, ","), c.FailoverOptIn, shortDuration(time.Duration(c.NodeMonitorGraceSecs)*time.Second))
	}
	b.WriteString("\n")
	said := map[string]bool{}
	for _, p := range x.Pods {
		if p.Protected && !said["after"] {
			said["after"] = true
			b.WriteString("\nAFTER is the sum of:")
			for _, t := range p.After {
				v := shortDuration(time.Duration(t.Seconds) * time.Second)
				if !t.Known {
					v = "unknown"
				}
				fmt.Fprintf(&b, "\n  %s: %s (%s)", t.Name, v, t.Source)
			}
			b.WriteString("\n  (of pod " + p.Namespace + "/" + p.Name + "; -o yaml gives each pod's)\n")
		}
	}
	for _, p := range x.Pods {
		if p.Protected || !p.Reason.Counted() {
			continue
		}
		fmt.Fprintf(&b, "\npod %s/%s is not protected (%s): %s\n  fix: %s\n", p.Namespace, p.Name, p.Reason, p.Why, p.Fix)
	}
	return b.String()
}
