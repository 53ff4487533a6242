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

package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// PreStopFinalizer is what the simulated kubelet puts on each pod with a
// preStop hook on its node. A real kubelet needs none: the pod stays in the
// API while its containers stop. KWOK, which stands in for the kubelet's
// status reporting, deletes a terminating pod after a second unless a
// finalizer holds it; this one holds it until the hooks have run, as the
// running containers would. It never holds a pod deleted with grace period
// 0 (ReleaseForceDeleted): that one is gone from the API at once, whatever
// its containers do.
const PreStopFinalizer = "kubeletsim.csi-fence.io/prestop"

// minGracePeriod is the kubelet's floor for a hook's time, also for a pod
// deleted with grace period 0.
const minGracePeriod = 2 * time.Second

// PreStopOptions configure a PreStopRunner.
type PreStopOptions struct {
	Client   kubernetes.Interface
	NodeName string
	// PathMap maps a command's path inside a container to a file on this
	// machine (no container images here): the helper's path in the pod to
	// the built binary.
	PathMap map[string]string
	// PodEnv returns environment the pod's containers get beyond their
	// spec's, called once per pod while it is alive (a real pod's mounted
	// ServiceAccount token, which the helper finds through KUBECONFIG here).
	PodEnv func(ctx context.Context, pod *v1.Pod) ([]string, error)
	// HookEnv returns environment a hook gets when it runs, last (it
	// overrides the spec's): what the node's network gives the pod then,
	// e.g. where a Service routes from this node.
	HookEnv func(pod *v1.Pod) []string
	// HTTPHost is where HTTP GET hooks without a host go (the kubelet uses
	// the pod IP; KWOK's pod IPs are not routable). Default 127.0.0.1.
	HTTPHost string
}

// HookRun is one preStop hook run.
type HookRun struct {
	Namespace, Pod, Container string
	UID                       types.UID
	// Command is the hook's command as run (after PathMap), or the URL of
	// an HTTP GET.
	Command []string
	Output  string
	Err     error
	Start   time.Time
	Took    time.Duration
	// Deadline is the time the hook had: the pod's grace period.
	Deadline time.Duration
}

// PreStopRunner runs the preStop hooks of the pods on one node when they are
// deleted, as the kubelet does: each container's hook, in parallel, as a
// local process with the container's environment (its env, the downward API
// fields the helper needs, PodEnv), bounded by the pod's grace period; then
// it lets the pod go.
type PreStopRunner struct {
	opts PreStopOptions

	mu  sync.Mutex
	env map[types.UID][]string
	// known is the last state seen of each pod with a hook on the node,
	// kept across Stop and Run as a kubelet keeps its pods across a
	// partition: a pod deleted from the API meanwhile is stopped, hooks
	// first, from this copy when the runner runs again.
	known   map[types.UID]*v1.Pod
	started map[types.UID]bool
	runs    []HookRun
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewPreStopRunner returns a runner; Run starts it.
func NewPreStopRunner(opts PreStopOptions) (*PreStopRunner, error) {
	if opts.Client == nil || opts.NodeName == "" {
		return nil, errors.New("kubeletsim: Client and NodeName are required")
	}
	if opts.HTTPHost == "" {
		opts.HTTPHost = "127.0.0.1"
	}
	return &PreStopRunner{opts: opts, env: map[types.UID][]string{}, known: map[types.UID]*v1.Pod{}, started: map[types.UID]bool{}, changed: make(chan struct{})}, nil
}

// Run watches the node's pods until ctx is done or Stop is called. It may
// run again after Stop (a node back from a partition): the pods it knew
// that are gone from the API then have their hooks run, as a kubelet does
// with the pods its first list after the partition no longer has.
func (r *PreStopRunner) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
	defer close(done)
	logger := klog.FromContext(ctx).WithValues("node", r.opts.NodeName)
	ctx = klog.NewContext(ctx, logger)
	factory := informers.NewSharedInformerFactoryWithOptions(r.opts.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", r.opts.NodeName).String()
	}))
	defer factory.Shutdown()
	handle := func(obj interface{}) {
		if pod, ok := obj.(*v1.Pod); ok {
			r.sync(ctx, pod)
		}
	}
	informer := factory.Core().V1().Pods().Informer()
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: handle, UpdateFunc: func(_, o interface{}) { handle(o) },
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				r.removed(ctx, pod.UID)
			}
		},
	})
	factory.Start(ctx.Done())
	logger.Info("Simulated kubelet running preStop hooks")
	if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		listed := map[types.UID]bool{}
		for _, obj := range informer.GetStore().List() {
			listed[obj.(*v1.Pod).UID] = true
		}
		r.mu.Lock()
		var gone []types.UID
		for uid := range r.known {
			if !listed[uid] {
				gone = append(gone, uid)
			}
		}
		r.mu.Unlock()
		for _, uid := range gone {
			r.removed(ctx, uid)
		}
	}
	<-ctx.Done()
}

// removed stops a known pod that is gone from the API, hooks first, from
// the last copy seen of it: one force-deleted (its deletion came with grace
// period 0, or while the node was cut off).
func (r *PreStopRunner) removed(ctx context.Context, uid types.UID) {
	r.mu.Lock()
	pod := r.known[uid]
	r.mu.Unlock()
	if pod != nil {
		klog.FromContext(ctx).V(2).Info("Pod gone from the API: stopping it from the last copy seen", "pod", klog.KObj(pod), "uid", uid)
		r.start(ctx, pod)
	}
}

// Stop stops the runner (a node that loses power or its network): hooks
// already running go on to their end, as processes of a partitioned node
// would, but nothing new starts.
func (r *PreStopRunner) Stop() {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-r.done
	}
}

func hasPreStop(pod *v1.Pod) bool {
	return slices.ContainsFunc(hookContainers(pod), func(c v1.Container) bool { return c.Lifecycle != nil && c.Lifecycle.PreStop != nil })
}

func hookContainers(pod *v1.Pod) []v1.Container {
	var out []v1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return append(out, pod.Spec.Containers...)
}

// sync handles one pod event: a live pod with a hook gets the finalizer and
// its environment; a deleted one gets its hooks run, once.
func (r *PreStopRunner) sync(ctx context.Context, pod *v1.Pod) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	if pod.Spec.NodeName != r.opts.NodeName || !hasPreStop(pod) {
		return
	}
	held := slices.Contains(pod.Finalizers, PreStopFinalizer)
	r.mu.Lock()
	if !r.started[pod.UID] {
		r.known[pod.UID] = pod.DeepCopy()
	}
	r.mu.Unlock()
	// A runner started after the pod (a node back from a partition, as a
	// kubelet after a reboot) prepares its environment when it first sees
	// it, terminating or not.
	r.mu.Lock()
	_, haveEnv := r.env[pod.UID]
	r.mu.Unlock()
	if !haveEnv && r.opts.PodEnv != nil && (held || pod.DeletionTimestamp == nil) {
		env, err := r.opts.PodEnv(ctx, pod)
		if err != nil {
			logger.Error(err, "Preparing the pod's environment")
			return
		}
		r.mu.Lock()
		r.env[pod.UID] = env
		r.mu.Unlock()
	}
	if pod.DeletionTimestamp == nil {
		if !held {
			if err := r.finalizer(ctx, pod, true); err != nil {
				logger.Error(err, "Adding the preStop finalizer")
			}
		}
		return
	}
	if !held && !forceDeleted(pod) {
		return // not ours to hold (it came before this runner): KWOK lets it go
	}
	r.start(ctx, pod)
}

// forceDeleted reports a deletion with grace period 0, which a kubelet
// handles at once (and ReleaseForceDeleted lets go at once).
func forceDeleted(pod *v1.Pod) bool {
	return pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
}

// start runs the pod's hooks once, then lets the pod go.
func (r *PreStopRunner) start(ctx context.Context, pod *v1.Pod) {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	r.mu.Lock()
	if r.started[pod.UID] || ctx.Err() != nil {
		// Run once; and not at all by a runner stopped meanwhile (a node
		// cut off sees no deletion).
		r.mu.Unlock()
		return
	}
	r.started[pod.UID] = true
	delete(r.known, pod.UID)
	env := r.env[pod.UID]
	r.mu.Unlock()
	pod = pod.DeepCopy()
	go func() {
		r.runHooks(ctx, pod, env)
		// The hooks ran: the containers are stopped, the pod may go, even
		// if this runner has been stopped meanwhile.
		if err := r.finalizer(context.WithoutCancel(ctx), pod, false); err != nil {
			logger.Error(err, "Removing the preStop finalizer")
		}
	}()
}

func (r *PreStopRunner) finalizer(ctx context.Context, pod *v1.Pod, add bool) error {
	pods := r.opts.Client.CoreV1().Pods(pod.Namespace)
	return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID {
			return nil // gone: nothing to hold or release
		}
		has := slices.Contains(cur.Finalizers, PreStopFinalizer)
		switch {
		case add && !has && cur.DeletionTimestamp == nil:
			cur.Finalizers = append(cur.Finalizers, PreStopFinalizer)
		case !add && has:
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == PreStopFinalizer })
		default:
			return nil
		}
		_, err = pods.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// runHooks runs every container's hook in parallel within the grace period.
func (r *PreStopRunner) runHooks(ctx context.Context, pod *v1.Pod, env []string) {
	grace := 30 * time.Second
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		// A pod gone from the API, stopped from the copy seen before.
		grace = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	grace = max(grace, minGracePeriod)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range hookContainers(pod) {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := r.runHook(hctx, pod, c, env)
			run.Deadline = grace
			klog.FromContext(ctx).Info("Ran preStop hook", "pod", klog.KObj(pod), "container", c.Name, "command", run.Command,
				"took", run.Took, "err", run.Err, "output", run.Output)
			r.mu.Lock()
			r.runs = append(r.runs, run)
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
		}()
	}
	wg.Wait()
}

func (r *PreStopRunner) runHook(ctx context.Context, pod *v1.Pod, c v1.Container, extra []string) (run HookRun) {
	run = HookRun{Namespace: pod.Namespace, Pod: pod.Name, Container: c.Name, UID: pod.UID, Start: time.Now()}
	defer func() { run.Took = time.Since(run.Start) }()
	h := c.Lifecycle.PreStop
	switch {
	case h.Exec != nil && len(h.Exec.Command) > 0:
		argv := slices.Clone(h.Exec.Command)
		if p, ok := r.opts.PathMap[argv[0]]; ok {
			argv[0] = p
		}
		run.Command = argv
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(containerEnv(pod, c), extra...)
		if r.opts.HookEnv != nil {
			cmd.Env = append(cmd.Env, r.opts.HookEnv(pod)...)
		}
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		run.Output, run.Err = string(out), err
	case h.HTTPGet != nil:
		g := h.HTTPGet
		host := g.Host
		if host == "" {
			host = r.opts.HTTPHost
		}
		port := g.Port.IntValue()
		for _, p := range c.Ports {
			if g.Port.StrVal != "" && p.Name == g.Port.StrVal {
				port = int(p.ContainerPort)
			}
		}
		scheme := "http"
		if g.Scheme == v1.URISchemeHTTPS {
			scheme = "https"
		}
		url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + g.Path
		run.Command = []string{"GET", url}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err == nil {
			for _, hh := range g.HTTPHeaders {
				req.Header.Add(hh.Name, hh.Value)
			}
			var rsp *http.Response
			if rsp, err = http.DefaultClient.Do(req); err == nil {
				rsp.Body.Close()
				run.Output = rsp.Status
			}
		}
		run.Err = err
	default:
		run.Err = fmt.Errorf("hook kind not simulated: %+v", h)
	}
	return run
}

// containerEnv is the container's environment as the kubelet builds it from
// the spec: plain values and the downward API's pod fields (no ConfigMaps or
// Secrets: the hooks here need none).
func containerEnv(pod *v1.Pod, c v1.Container) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOSTNAME=" + pod.Name}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = pod.Spec.NodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			case "status.podIP":
				v = pod.Status.PodIP
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// Runs returns the hooks run so far.
func (r *PreStopRunner) Runs() []HookRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// WaitRun waits until the hook of container in the pod namespace/name has
// run, and returns it.
func (r *PreStopRunner) WaitRun(ctx context.Context, namespace, name, container string) (HookRun, error) {
	for {
		r.mu.Lock()
		changed := r.changed
		for _, run := range r.runs {
			if run.Namespace == namespace && run.Pod == name && run.Container == container {
				r.mu.Unlock()
				return run, nil
			}
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return HookRun{}, fmt.Errorf("preStop hook of %s/%s container %s never ran (ran: %s): %w", namespace, name, container, r.summary(), ctx.Err())
		case <-changed:
		}
	}
}

func (r *PreStopRunner) summary() string {
	var s []string
	for _, run := range r.Runs() {
		s = append(s, run.Namespace+"/"+run.Pod+"/"+run.Container)
	}
	return strings.Join(s, ", ")
}

// ReleaseForceDeleted removes PreStopFinalizer from every pod deleted with
// grace period 0, until ctx is done: the stand-in, on the control plane's
// side, for a force-deleted pod being gone from the API at once. The
// runners (on the nodes' side, stopped while a node is cut off) run such a
// pod's hooks from their last copy of it (PreStopRunner.Run).
func ReleaseForceDeleted(ctx context.Context, client kubernetes.Interface) {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	defer factory.Shutdown()
	release := func(obj interface{}) {
		pod, ok := obj.(*v1.Pod)
		if !ok || !forceDeleted(pod) || !slices.Contains(pod.Finalizers, PreStopFinalizer) {
			return
		}
		r := &PreStopRunner{opts: PreStopOptions{Client: client}}
		if err := r.finalizer(ctx, pod, false); err != nil {
			logger.Error(err, "Letting a force-deleted pod go", "pod", klog.KObj(pod))
			return
		}
		logger.V(2).Info("Force-deleted pod let go at once", "pod", klog.KObj(pod))
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: release, UpdateFunc: func(_, o interface{}) { release(o) },
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
}
