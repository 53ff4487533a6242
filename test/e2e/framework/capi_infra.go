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

package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The tests' infrastructure provider: a Cluster API provider of the v1beta2
// contract whose instances are the framework's KWOK nodes. An InfraCluster
// (FenceTestCluster) is provisioned at once. An InfraMachine
// (FenceTestMachine, spec.nodeName naming its node) gets the provider's
// finalizer, registers its node under spec.providerID (the node's
// spec.providerID, as a cloud's kubelet registers it) and reports
// status.initialization.provisioned. Deleting it deletes the instance: after
// InfraOptions.ShutdownTime (a VM's shutdown, its workload still running
// meanwhile) the node is stopped as a whole (Product.StopInstance: its
// heartbeat, kubelets, node agents and plugins, the plugins losing their
// power), and only once nothing of it runs does the provider remove its
// finalizer, the contract's report that the instance is gone. An
// InfraMachine annotated RefuseDeletionAnnotation keeps its instance and its
// finalizer, and says why in its Ready condition, as a provider whose cloud
// refuses the deletion does. An InfraMachine that names no node (one a
// MachineSet cloned from a FenceTestMachineTemplate) is given one: the next
// free node of InfraOptions.Pool, else a new KWOK node the provider creates
// (InfraOptions.LaunchPrefix), as a cloud launches a VM for it.
const (
	InfraGroup        = "infrastructure.fence-e2e.csi-fence.io"
	InfraGroupVersion = InfraGroup + "/v1alpha1"
	InfraClusterKind  = "FenceTestCluster"
	InfraMachineKind  = "FenceTestMachine"
	// InfraMachineTemplateKind is what a MachineSet clones its
	// InfraMachines from.
	InfraMachineTemplateKind = "FenceTestMachineTemplate"
	// InfraFinalizer on an InfraMachine: its instance may still run.
	InfraFinalizer = InfraGroup + "/instance"
	// RefuseDeletionAnnotation on an InfraMachine makes the provider refuse
	// to delete its instance; the value is the reason it gives.
	RefuseDeletionAnnotation = InfraGroup + "/refuse-deletion"
	// ProviderIDPrefix + node name is the providerID of a node's instance.
	ProviderIDPrefix = "fence-e2e:///"
)

// The test provider's resources.
var (
	InfraClusterResource = schema.GroupVersionResource{Group: InfraGroup, Version: "v1alpha1", Resource: "fencetestclusters"}
	InfraMachineResource = schema.GroupVersionResource{Group: InfraGroup, Version: "v1alpha1", Resource: "fencetestmachines"}
	// InfraMachineTemplateResource holds FenceTestMachineTemplates.
	InfraMachineTemplateResource = schema.GroupVersionResource{Group: InfraGroup, Version: "v1alpha1", Resource: "fencetestmachinetemplates"}
	machineResource              = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	capiClusterResource          = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}
	machineSetResource           = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinesets"}
	machineHealthCheckResource   = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinehealthchecks"}
)

// infraCRDs are the test provider's CRDs, labelled with the Cluster API
// contract they implement (v1beta2), which is how Cluster API finds the
// version of a kind its references name by group only.
func infraCRDs() []*unstructured.Unstructured {
	crd := func(kind, plural string) *unstructured.Unstructured {
		open := map[string]interface{}{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]interface{}{"name": plural + "." + InfraGroup,
				"labels": map[string]interface{}{"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
			"spec": map[string]interface{}{
				"group": InfraGroup, "scope": "Namespaced",
				"names": map[string]interface{}{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
				"versions": []interface{}{map[string]interface{}{
					"name": "v1alpha1", "served": true, "storage": true,
					"subresources": map[string]interface{}{"status": map[string]interface{}{}},
					"schema": map[string]interface{}{"openAPIV3Schema": map[string]interface{}{
						"type": "object", "properties": map[string]interface{}{"spec": open, "status": open}}},
				}},
			},
		}}
	}
	return []*unstructured.Unstructured{crd(InfraClusterKind, InfraClusterResource.Resource), crd(InfraMachineKind, InfraMachineResource.Resource),
		crd(InfraMachineTemplateKind, InfraMachineTemplateResource.Resource)}
}

// InfraOptions tune the test provider.
type InfraOptions struct {
	// StopInstance stops the instance of a node and returns once nothing
	// of it runs any more (Product.StopInstance). Required.
	StopInstance func(ctx context.Context, node string) error
	// ShutdownTime is how long an instance takes to stop once its deletion
	// is asked (its workload runs meanwhile), as a VM's shutdown does.
	ShutdownTime time.Duration
	// BeforeRelease, when set, runs once the instance is stopped, right
	// before the provider removes the InfraMachine's finalizer: the last
	// moment before anything may take the instance for deleted.
	BeforeRelease func(ctx context.Context, node string)
	// Pool are the nodes, in order, given to the InfraMachines that name
	// none (a MachineSet's).
	Pool []string
	// LaunchPrefix: once the pool is used up, the next such InfraMachine
	// gets a new KWOK node named LaunchPrefix-<n>, created by the provider
	// (Launched lists them); with none, it waits for an instance.
	LaunchPrefix string
}

// InfraProvider is the test provider's controller, in the test process.
type InfraProvider struct {
	c        *Cluster
	opts     InfraOptions
	queue    workqueue.TypedRateLimitingInterface[string]
	cancel   context.CancelFunc
	done     chan struct{}
	logFile  *os.File
	stopOnce sync.Once

	mu       sync.Mutex
	deleting map[string]time.Time // InfraMachine key -> its deletion first seen
	released map[string]time.Time // node -> just before its finalizer went
	given    map[string]string    // InfraMachine ns/name -> the node given to it
	launched []string             // the nodes the provider created
}

// StartInfraProvider starts the test provider's controller (its CRDs are
// installed by StartClusterAPI). Stop it with Stop.
func (c *Cluster) StartInfraProvider(_ context.Context, opts InfraOptions) (*InfraProvider, error) {
	if opts.StopInstance == nil {
		return nil, fmt.Errorf("InfraOptions.StopInstance is required")
	}
	f, err := os.OpenFile(filepath.Join(c.WorkDir, "logs", "infra-provider.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &InfraProvider{c: c, opts: opts, logFile: f, done: make(chan struct{}),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second)),
		deleting: map[string]time.Time{}, released: map[string]time.Time{}, given: map[string]string{}}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 30*time.Second)
	for _, r := range []schema.GroupVersionResource{InfraClusterResource, InfraMachineResource} {
		add := func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if u, ok := o.(*unstructured.Unstructured); ok {
				p.queue.Add(r.Resource + "/" + u.GetNamespace() + "/" + u.GetName())
			}
		}
		if _, err := factory.ForResource(r).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: add, UpdateFunc: func(_, o interface{}) { add(o) }, DeleteFunc: add,
		}); err != nil {
			return nil, err
		}
	}
	// The provider lives until Stop, not as long as the caller's context.
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
		factory.Shutdown()
	}()
	for r, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			p.cancel()
			f.Close()
			return nil, fmt.Errorf("test provider: %s informer did not sync", r.Resource)
		}
	}
	go func() {
		defer close(p.done)
		for {
			key, quit := p.queue.Get()
			if quit {
				return
			}
			if err := p.sync(ctx, key); err != nil {
				p.logf("%s: %v (retried)", key, err)
				p.queue.AddRateLimited(key)
			} else {
				p.queue.Forget(key)
			}
			p.queue.Done(key)
		}
	}()
	return p, nil
}

// Stop stops the provider's controller: from then on nothing provisions or
// deletes instances. Stopping it again does nothing.
func (p *InfraProvider) Stop() {
	p.stopOnce.Do(func() {
		p.cancel()
		<-p.done
		p.logFile.Close()
	})
}

// Released returns when the provider reported node's instance deleted (just
// before it removed its InfraMachine's finalizer), if it did.
func (p *InfraProvider) Released(node string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.released[node]
	return t, ok
}

func (p *InfraProvider) logf(format string, args ...interface{}) {
	fmt.Fprintf(p.logFile, "%s %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

func (p *InfraProvider) sync(ctx context.Context, key string) error {
	parts := strings.SplitN(key, "/", 3)
	resource, ns, name := parts[0], parts[1], parts[2]
	if resource == InfraClusterResource.Resource {
		return p.syncCluster(ctx, ns, name)
	}
	res := p.c.Dynamic.Resource(InfraMachineResource).Namespace(ns)
	m, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	node, _, _ := unstructured.NestedString(m.Object, "spec", "nodeName")
	if node == "" && m.GetDeletionTimestamp() == nil {
		if !ownedByMachine(m) {
			// Its Machine's ownerReference, when the Machine controller
			// sets it, is an update that queues it again.
			return nil
		}
		if m, node, err = p.give(ctx, res, m); err != nil {
			return err
		}
	}
	if m.GetDeletionTimestamp() == nil {
		return p.provision(ctx, res, m, node)
	}
	if node == "" {
		// Deleted before it had an instance: nothing runs to stop.
		return p.release(ctx, res, m, key, "")
	}
	return p.deleteInstance(ctx, res, m, key, node)
}

// ownedByMachine reports whether a Machine owns m. Before it does, the
// provider gives m no instance, as Cluster API's contract asks of an
// infrastructure provider: a MachineSet creates the InfraMachine before its
// Machine and deletes it again when it cannot go on (an update of it that
// conflicts, say), and an instance given meanwhile would be deleted with
// it. Under load that took a pool node away before a test began (the
// MachineSet's update of a fresh InfraMachine conflicted with this
// provider's, and a launched node without the drivers replaced it).
func ownedByMachine(m *unstructured.Unstructured) bool {
	for _, ref := range m.GetOwnerReferences() {
		if ref.Kind == "Machine" && strings.HasPrefix(ref.APIVersion, "cluster.x-k8s.io/") {
			return true
		}
	}
	return false
}

// give gives an InfraMachine that names no node one: the next node of the
// pool no InfraMachine has had, else a new one (LaunchPrefix), and records
// it in spec.nodeName. A node is given once, even to an InfraMachine
// deleted since: a deleted instance is not handed out again.
func (p *InfraProvider) give(ctx context.Context, res dynamic.ResourceInterface, m *unstructured.Unstructured) (*unstructured.Unstructured, string, error) {
	key := m.GetNamespace() + "/" + m.GetName()
	p.mu.Lock()
	node, ok := p.given[key]
	if !ok {
		taken := map[string]bool{}
		for _, n := range p.given {
			taken[n] = true
		}
		for _, n := range p.opts.Pool {
			if !taken[n] {
				node = n
				break
			}
		}
		if node == "" && p.opts.LaunchPrefix != "" {
			node = fmt.Sprintf("%s-%d", p.opts.LaunchPrefix, len(p.launched))
			p.launched = append(p.launched, node)
		}
		if node != "" {
			p.given[key] = node
		}
	}
	launched := slices.Contains(p.launched, node)
	p.mu.Unlock()
	if node == "" {
		return m, "", fmt.Errorf("no instance for %s: the pool is used up", key)
	}
	if launched {
		// A new VM: a node that registers itself (KWOK's heartbeat).
		if err := p.c.CreateNode(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return m, "", fmt.Errorf("launching instance %s for %s: %w", node, key, err)
		}
	}
	_ = unstructured.SetNestedField(m.Object, node, "spec", "nodeName")
	m, err := res.Update(ctx, m, metav1.UpdateOptions{})
	if err != nil {
		return nil, "", err
	}
	p.logf("%s: instance %s given (launched: %v)", key, node, launched)
	return m, node, nil
}

// Launched returns the nodes the provider created for InfraMachines.
func (p *InfraProvider) Launched() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.launched)
}

// syncCluster reports an InfraCluster provisioned: the control plane is
// there already.
func (p *InfraProvider) syncCluster(ctx context.Context, ns, name string) error {
	res := p.c.Dynamic.Resource(InfraClusterResource).Namespace(ns)
	ic, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && ic.GetDeletionTimestamp() != nil) {
		return nil
	}
	if err != nil {
		return err
	}
	if done, _, _ := unstructured.NestedBool(ic.Object, "status", "initialization", "provisioned"); done {
		return nil
	}
	_ = unstructured.SetNestedField(ic.Object, true, "status", "initialization", "provisioned")
	_, err = res.UpdateStatus(ctx, ic, metav1.UpdateOptions{})
	return err
}

// provision registers the InfraMachine's node as its instance.
func (p *InfraProvider) provision(ctx context.Context, res dynamic.ResourceInterface, m *unstructured.Unstructured, node string) error {
	var err error
	if !slices.Contains(m.GetFinalizers(), InfraFinalizer) {
		m.SetFinalizers(append(m.GetFinalizers(), InfraFinalizer))
		if m, err = res.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	providerID := ProviderIDPrefix + node
	n, err := p.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the instance's node: %w", err)
	}
	switch n.Spec.ProviderID {
	case providerID:
	case "":
		patch := []byte(fmt.Sprintf(`{"spec":{"providerID":%q}}`, providerID))
		if _, err := p.c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("registering node %s as instance %s: %w", node, providerID, err)
		}
	default:
		return fmt.Errorf("node %s is instance %s, not %s", node, n.Spec.ProviderID, providerID)
	}
	if got, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); got != providerID {
		_ = unstructured.SetNestedField(m.Object, providerID, "spec", "providerID")
		if m, err = res.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if done, _, _ := unstructured.NestedBool(m.Object, "status", "initialization", "provisioned"); done {
		return nil
	}
	_ = unstructured.SetNestedField(m.Object, true, "status", "initialization", "provisioned")
	setReady(m, "True", "InstanceRunning", "instance "+providerID+" runs")
	_, err = res.UpdateStatus(ctx, m, metav1.UpdateOptions{})
	p.logf("%s/%s: instance %s provisioned (%v)", m.GetNamespace(), m.GetName(), providerID, err)
	return err
}

// deleteInstance deletes the InfraMachine's instance and then, only then,
// removes its finalizer.
func (p *InfraProvider) deleteInstance(ctx context.Context, res dynamic.ResourceInterface, m *unstructured.Unstructured, key, node string) error {
	if !slices.Contains(m.GetFinalizers(), InfraFinalizer) {
		return nil
	}
	if reason := m.GetAnnotations()[RefuseDeletionAnnotation]; reason != "" {
		// A change of the annotation brings the object back here.
		return p.report(ctx, res, m, "False", "DeletionRefused", reason)
	}
	p.mu.Lock()
	first, ok := p.deleting[key]
	if !ok {
		first = time.Now()
		p.deleting[key] = first
	}
	p.mu.Unlock()
	if left := p.opts.ShutdownTime - time.Since(first); left > 0 {
		p.queue.AddAfter(key, left)
		return p.report(ctx, res, m, "False", "InstanceShuttingDown", "the instance is shutting down")
	}
	if err := p.opts.StopInstance(ctx, node); err != nil {
		_ = p.report(ctx, res, m, "False", "InstanceDeletionFailed", err.Error())
		return fmt.Errorf("stopping the instance of node %s: %w", node, err)
	}
	if p.opts.BeforeRelease != nil {
		p.opts.BeforeRelease(ctx, node)
	}
	return p.release(ctx, res, m, key, node)
}

// release removes the InfraMachine's finalizer: the report that its
// instance (of node, if it had one) is deleted.
func (p *InfraProvider) release(ctx context.Context, res dynamic.ResourceInterface, m *unstructured.Unstructured, key, node string) error {
	if !slices.Contains(m.GetFinalizers(), InfraFinalizer) {
		return nil
	}
	m.SetFinalizers(slices.DeleteFunc(m.GetFinalizers(), func(f string) bool { return f == InfraFinalizer }))
	before := time.Now()
	if _, err := res.Update(ctx, m, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p.mu.Lock()
	if node != "" {
		p.released[node] = before
	}
	delete(p.deleting, key)
	p.mu.Unlock()
	p.logf("%s: instance of node %q deleted, finalizer removed", key, node)
	return nil
}

// report sets the InfraMachine's Ready condition, when it changes.
func (p *InfraProvider) report(ctx context.Context, res dynamic.ResourceInterface, m *unstructured.Unstructured, status, reason, message string) error {
	if !setReady(m, status, reason, message) {
		return nil
	}
	_, err := res.UpdateStatus(ctx, m, metav1.UpdateOptions{})
	p.logf("%s/%s: Ready %s %s: %s (%v)", m.GetNamespace(), m.GetName(), status, reason, message, err)
	return err
}

// setReady sets the Ready condition of m (v1beta2 conditions, the
// metav1.Condition shape) and reports whether it changed.
func setReady(m *unstructured.Unstructured, status, reason, message string) bool {
	conds, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
	for _, c := range conds {
		if cm, ok := c.(map[string]interface{}); ok && cm["type"] == "Ready" && cm["status"] == status && cm["reason"] == reason && cm["message"] == message {
			return false
		}
	}
	conds = slices.DeleteFunc(conds, func(c interface{}) bool {
		cm, ok := c.(map[string]interface{})
		return ok && cm["type"] == "Ready"
	})
	conds = append(conds, map[string]interface{}{"type": "Ready", "status": status, "reason": reason, "message": message,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	_ = unstructured.SetNestedSlice(m.Object, conds, "status", "conditions")
	return true
}

// StopInstance stops a node's whole instance, as its infrastructure
// provider deleting it does: its heartbeat stops (the node turns NotReady
// if it was not already), every driver's kubelet and node agent are killed
// and its plugins get SIGTERM, so that a mock started with
// --sigterm-is-power-loss tells its array that the node lost its power (its
// mounts and I/O gone). It returns once nothing of the node runs any more.
func (p *Product) StopInstance(ctx context.Context, node string) error {
	if err := p.c.ShutDown(ctx, node); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	n := p.Nodes[node]
	if n == nil {
		return fmt.Errorf("node %s was not started", node)
	}
	for _, pl := range n.Plugins {
		pl.stop()
		if pl.Process != nil {
			pl.Process.Stop(5 * time.Second)
		}
	}
	for _, pl := range n.Plugins {
		for _, proc := range []*Process{pl.Process, pl.Agent} {
			if proc != nil && !proc.Exited() {
				return fmt.Errorf("%s still runs", proc.Name)
			}
		}
	}
	return nil
}

// WorkloadCluster is a Cluster API Cluster (CreateWorkloadCluster,
// CreateManagedWorkloadCluster) whose Machines are KWOK nodes.
type WorkloadCluster struct {
	Namespace, Name string
	// Machines names each node's Machine, as they were created.
	Machines map[string]string
	// MachineSet is the name of the MachineSet of the workers, if any.
	MachineSet string
}

// CreateWorkloadCluster creates, in a namespace of its own, a Cluster of
// the test provider with a Machine (and its FenceTestMachine) per node, and
// waits until Cluster API's Machine controller has found each node by its
// providerID: the Machine's status.nodeRef names it and the node carries
// Cluster API's annotations. The Cluster's kubeconfig Secret points back at
// this control plane. The Cluster has no control-plane Machine: its control
// plane never counts as initialized, and Cluster API deletes no Node. Remove
// it with RemoveWorkloadCluster.
func (a *ClusterAPI) CreateWorkloadCluster(ctx context.Context, namespace, name string, nodes []string) (*WorkloadCluster, error) {
	wc := &WorkloadCluster{Namespace: namespace, Name: name, Machines: map[string]string{}}
	objs, err := a.clusterBase(ctx, wc)
	if err != nil {
		return nil, err
	}
	for _, node := range nodes {
		machine := "machine-" + node
		wc.Machines[node] = machine
		objs = append(objs, wc.standAloneMachine(node, machine, nil)...)
	}
	if err := a.c.createObjects(ctx, objs, ApplyOptions{}); err != nil {
		return nil, err
	}
	for _, node := range nodes {
		if err := a.waitMachineFound(ctx, wc, wc.Machines[node], node); err != nil {
			return nil, err
		}
	}
	a.c.log.Logf("Cluster API Cluster %s/%s: Machines %v found their nodes", namespace, name, wc.Machines)
	return wc, nil
}

// clusterBase creates the workload cluster's namespace and Secrets, and
// returns its InfraCluster and Cluster to create.
func (a *ClusterAPI) clusterBase(ctx context.Context, wc *WorkloadCluster) ([]*unstructured.Unstructured, error) {
	c := a.c
	namespace, name := wc.Namespace, wc.Name
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	kubeconfig, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	clusterLabel := map[string]string{"cluster.x-k8s.io/cluster-name": name}
	for _, s := range []*corev1.Secret{
		// Cluster API reads the workload cluster's nodes through it.
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Namespace: namespace, Labels: clusterLabel},
			Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": kubeconfig}},
		// The Machines' bootstrap data, which nothing here boots from.
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: namespace, Labels: clusterLabel},
			Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": []byte("#!/bin/sh\n")}},
	} {
		if _, err := c.Client.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return []*unstructured.Unstructured{
		{Object: map[string]interface{}{"apiVersion": InfraGroupVersion, "kind": InfraClusterKind,
			"metadata": map[string]interface{}{"name": name, "namespace": namespace, "labels": wc.labels(nil)},
			"spec":     map[string]interface{}{}}},
		{Object: map[string]interface{}{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]interface{}{"name": name, "namespace": namespace},
			"spec": map[string]interface{}{
				"infrastructureRef": map[string]interface{}{"apiGroup": InfraGroup, "kind": InfraClusterKind, "name": name}}}},
	}, nil
}

// labels are the labels of the workload cluster's objects, and more.
func (wc *WorkloadCluster) labels(more map[string]interface{}) map[string]interface{} {
	l := map[string]interface{}{"cluster.x-k8s.io/cluster-name": wc.Name}
	for k, v := range more {
		l[k] = v
	}
	return l
}

// machineSpec is the spec of the workload cluster's Machines whose
// InfraMachine (or InfraMachineTemplate) is infra.
func (wc *WorkloadCluster) machineSpec(infraKind, infra string) map[string]interface{} {
	return map[string]interface{}{
		"clusterName":       wc.Name,
		"bootstrap":         map[string]interface{}{"dataSecretName": wc.Name + "-bootstrap"},
		"infrastructureRef": map[string]interface{}{"apiGroup": InfraGroup, "kind": infraKind, "name": infra},
	}
}

// standAloneMachine is a Machine owned by nothing whose instance is node,
// and its InfraMachine, named after the node.
func (wc *WorkloadCluster) standAloneMachine(node, machine string, labels map[string]interface{}) []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		{Object: map[string]interface{}{"apiVersion": InfraGroupVersion, "kind": InfraMachineKind,
			"metadata": map[string]interface{}{"name": node, "namespace": wc.Namespace, "labels": wc.labels(nil)},
			"spec":     map[string]interface{}{"nodeName": node}}},
		{Object: map[string]interface{}{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
			"metadata": map[string]interface{}{"name": machine, "namespace": wc.Namespace, "labels": wc.labels(labels)},
			"spec":     wc.machineSpec(InfraMachineKind, node)}},
	}
}

// waitMachineFound waits until Cluster API's Machine controller has found
// node by its providerID: the Machine's status.nodeRef names it and the
// node carries Cluster API's annotations.
func (a *ClusterAPI) waitMachineFound(ctx context.Context, wc *WorkloadCluster, machine, node string) error {
	c := a.c
	return WaitFor(ctx, 90*time.Second, fmt.Sprintf("Machine %s/%s with status.nodeRef %s, and the node annotated by Cluster API", wc.Namespace, machine, node), func(ctx context.Context) (bool, error) {
		m, err := c.Dynamic.Resource(machineResource).Namespace(wc.Namespace).Get(ctx, machine, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); ref != node {
			return false, nil
		}
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return n.Annotations["cluster.x-k8s.io/machine"] == machine && n.Annotations["cluster.x-k8s.io/cluster-namespace"] == wc.Namespace &&
			n.Spec.ProviderID == ProviderIDPrefix+node, nil
	})
}

// WorkerPoolLabel (value "workers") labels the Machines of a managed
// workload cluster's MachineSet, for a MachineHealthCheck to select.
const WorkerPoolLabel = "fence-e2e.csi-fence.io/pool"

// ManagedClusterOptions say what CreateManagedWorkloadCluster creates.
type ManagedClusterOptions struct {
	Namespace, Name string
	// ControlPlaneNode is the instance of the Cluster's control-plane
	// Machine: a stand-alone Machine labelled cluster.x-k8s.io/control-plane,
	// as a cluster without a control-plane provider has. Once it has its
	// nodeRef, Cluster API counts the control plane initialized, which
	// MachineHealthCheck waits for before it judges a worker; and with a
	// control-plane Machine, the Machine controller drains and, once the
	// instance is gone, deletes the Node of a deleted Machine.
	ControlPlaneNode string
	// Workers is the replica count of the MachineSet, whose Machines get
	// their instances from the provider (InfraOptions.Pool, then new ones).
	Workers int
}

// CreateManagedWorkloadCluster creates a Cluster of the test provider as
// a cluster without a control-plane provider is built: a control-plane
// Machine, and a MachineSet of workers cloning a FenceTestMachineTemplate.
// It waits until the control plane counts as initialized (the Cluster's
// ControlPlaneInitialized condition) and every worker Machine has found
// its node; WorkloadCluster.Machines then maps the nodes of the workers
// and of the control plane to their Machines. Remove it with
// RemoveWorkloadCluster.
func (a *ClusterAPI) CreateManagedWorkloadCluster(ctx context.Context, opts ManagedClusterOptions) (*WorkloadCluster, error) {
	c := a.c
	wc := &WorkloadCluster{Namespace: opts.Namespace, Name: opts.Name, Machines: map[string]string{}, MachineSet: opts.Name + "-workers"}
	objs, err := a.clusterBase(ctx, wc)
	if err != nil {
		return nil, err
	}
	cpMachine := "machine-" + opts.ControlPlaneNode
	wc.Machines[opts.ControlPlaneNode] = cpMachine
	objs = append(objs, wc.standAloneMachine(opts.ControlPlaneNode, cpMachine, map[string]interface{}{"cluster.x-k8s.io/control-plane": ""})...)
	pool := wc.labels(map[string]interface{}{WorkerPoolLabel: "workers"})
	objs = append(objs,
		&unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": InfraGroupVersion, "kind": InfraMachineTemplateKind,
			"metadata": map[string]interface{}{"name": wc.MachineSet, "namespace": wc.Namespace, "labels": wc.labels(nil)},
			"spec":     map[string]interface{}{"template": map[string]interface{}{"spec": map[string]interface{}{}}}}},
		&unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
			"metadata": map[string]interface{}{"name": wc.MachineSet, "namespace": wc.Namespace, "labels": wc.labels(nil)},
			"spec": map[string]interface{}{
				"clusterName": wc.Name,
				"replicas":    int64(opts.Workers),
				"deletion":    map[string]interface{}{"order": "Random"},
				"selector":    map[string]interface{}{"matchLabels": pool},
				"template": map[string]interface{}{
					"metadata": map[string]interface{}{"labels": pool},
					"spec":     wc.machineSpec(InfraMachineTemplateKind, wc.MachineSet),
				},
			}}})
	if err := c.createObjects(ctx, objs, ApplyOptions{}); err != nil {
		return nil, err
	}
	if err := a.waitMachineFound(ctx, wc, cpMachine, opts.ControlPlaneNode); err != nil {
		return nil, err
	}
	if err := WaitFor(ctx, 60*time.Second, fmt.Sprintf("Cluster %s/%s ControlPlaneInitialized", wc.Namespace, wc.Name), func(ctx context.Context) (bool, error) {
		cl, err := c.Dynamic.Resource(capiClusterResource).Namespace(wc.Namespace).Get(ctx, wc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ConditionStatus(cl, "ControlPlaneInitialized") == "True", nil
	}); err != nil {
		return nil, err
	}
	var workers []*unstructured.Unstructured
	if err := WaitFor(ctx, 90*time.Second, fmt.Sprintf("%d Machines of MachineSet %s/%s with a nodeRef", opts.Workers, wc.Namespace, wc.MachineSet), func(ctx context.Context) (bool, error) {
		if workers, err = wc.Workers(ctx, c); err != nil {
			return false, err
		}
		found := 0
		for _, m := range workers {
			if ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); ref != "" {
				found++
			}
		}
		return found == opts.Workers && len(workers) == opts.Workers, nil
	}); err != nil {
		return nil, err
	}
	for _, m := range workers {
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		if err := a.waitMachineFound(ctx, wc, m.GetName(), node); err != nil {
			return nil, err
		}
		wc.Machines[node] = m.GetName()
	}
	c.log.Logf("Cluster API Cluster %s/%s: control plane initialized, MachineSet %s's Machines %v found their nodes", wc.Namespace, wc.Name, wc.MachineSet, wc.Machines)
	return wc, nil
}

// Workers lists the Machines of the workload cluster's MachineSet, read
// live (those being deleted included).
func (wc *WorkloadCluster) Workers(ctx context.Context, c *Cluster) ([]*unstructured.Unstructured, error) {
	list, err := c.Dynamic.Resource(machineResource).Namespace(wc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: WorkerPoolLabel + "=workers"})
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// UnhealthyNodeCondition is a check of a MachineHealthCheck: a node whose
// condition Type has had Status for Timeout is unhealthy.
type UnhealthyNodeCondition struct {
	Type, Status string
	Timeout      time.Duration
}

// HealthCheck is a MachineHealthCheck over the workers.
type HealthCheck struct {
	Checks []UnhealthyNodeCondition
	// Limit, when set, is its spec.remediation.triggerIf
	// .unhealthyLessThanOrEqualTo: MHC remediates nothing while more
	// Machines are unhealthy (0: nothing at all). Unset: no limit.
	Limit *int
}

// CreateWorkerHealthCheck creates the MachineHealthCheck wc.Name-workers
// over the MachineSet's Machines.
func (a *ClusterAPI) CreateWorkerHealthCheck(ctx context.Context, wc *WorkloadCluster, hc HealthCheck) error {
	var conds []interface{}
	for _, ch := range hc.Checks {
		conds = append(conds, map[string]interface{}{"type": ch.Type, "status": ch.Status, "timeoutSeconds": int64(ch.Timeout / time.Second)})
	}
	spec := map[string]interface{}{
		"clusterName": wc.Name,
		"selector":    map[string]interface{}{"matchLabels": map[string]interface{}{WorkerPoolLabel: "workers"}},
		"checks":      map[string]interface{}{"unhealthyNodeConditions": conds},
	}
	if hc.Limit != nil {
		spec["remediation"] = map[string]interface{}{"triggerIf": map[string]interface{}{"unhealthyLessThanOrEqualTo": int64(*hc.Limit)}}
	}
	mhc := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
		"metadata": map[string]interface{}{"name": wc.HealthCheck(), "namespace": wc.Namespace, "labels": wc.labels(nil)},
		"spec":     spec}}
	return a.c.createObjects(ctx, []*unstructured.Unstructured{mhc}, ApplyOptions{})
}

// HealthCheck names the workers' MachineHealthCheck.
func (wc *WorkloadCluster) HealthCheck() string { return wc.Name + "-workers" }

// LiftHealthCheckLimit removes the limit of the workers' MachineHealthCheck
// and returns its new generation.
func (a *ClusterAPI) LiftHealthCheckLimit(ctx context.Context, wc *WorkloadCluster) (int64, error) {
	mhc, err := a.c.Dynamic.Resource(machineHealthCheckResource).Namespace(wc.Namespace).Patch(ctx, wc.HealthCheck(), types.MergePatchType,
		[]byte(`{"spec":{"remediation":null}}`), metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return mhc.GetGeneration(), nil
}

// WorkerHealthCheck reads the workers' MachineHealthCheck.
func (a *ClusterAPI) WorkerHealthCheck(ctx context.Context, wc *WorkloadCluster) (*unstructured.Unstructured, error) {
	return a.c.Dynamic.Resource(machineHealthCheckResource).Namespace(wc.Namespace).Get(ctx, wc.HealthCheck(), metav1.GetOptions{})
}

// ConditionStatus returns the status of the condition typ in a Cluster
// API object's status.conditions (v1beta2), "" when it has none.
func ConditionStatus(obj *unstructured.Unstructured, typ string) string {
	c := Condition(obj, typ)
	if c == nil {
		return ""
	}
	s, _ := c["status"].(string)
	return s
}

// Condition returns the condition typ of obj's status.conditions, if any.
func Condition(obj *unstructured.Unstructured, typ string) map[string]interface{} {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]interface{}); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// RemoveWorkloadCluster drops every Cluster API and test provider object of
// the workload cluster's namespace without deleting any instance: call it
// once the manager and the provider are stopped. Finalizers are removed,
// then the namespace is deleted.
func (a *ClusterAPI) RemoveWorkloadCluster(ctx context.Context, wc *WorkloadCluster) error {
	for _, r := range []schema.GroupVersionResource{machineHealthCheckResource, machineSetResource, machineResource, capiClusterResource,
		InfraMachineResource, InfraMachineTemplateResource, InfraClusterResource} {
		res := a.c.Dynamic.Resource(r).Namespace(wc.Namespace)
		list, err := res.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, o := range list.Items {
			if len(o.GetFinalizers()) > 0 {
				patch := []byte(`{"metadata":{"finalizers":null}}`)
				if _, err := res.Patch(ctx, o.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
			if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	err := a.c.Client.CoreV1().Namespaces().Delete(ctx, wc.Namespace, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
