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

package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-fence/fence-attacher/mock-driver/faults"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
	"github.com/csi-fence/fence-attacher/test/e2e/timeline"
)

// AttachOptions are the flags of --mode=attach.
type AttachOptions struct {
	// Counts are the VolumeAttachments per round (--counts).
	Counts []int
	// QPS are the attacher's --kube-api-qps per round (burst = qps), each
	// "default" (external-attacher's 5/10) or a number (--qps).
	QPS []string
	// BurstVolumes are the VolumeAttachments fenced at once from a failed
	// node while attaches run; 0: no burst phase (--burst-volumes).
	BurstVolumes int
	// BurstQPS are the attacher's --kube-api-qps in the burst phase
	// (--burst-qps).
	BurstQPS []string
	// FenceDelay is the mock driver's latency of each
	// ControllerUnpublishVolume during the burst (--fence-delay).
	FenceDelay time.Duration
	// Attaches are the attaches measured alone and during the burst
	// (--attaches).
	Attaches int
}

// APISetting is one --kube-api-qps/--kube-api-burst of the attacher.
type APISetting string

func (s APISetting) args() []string {
	if s == "default" {
		return nil // external-attacher's: 5 and 10
	}
	return []string{"--kube-api-qps=" + string(s), "--kube-api-burst=" + string(s)}
}

// failoverArgs are the same setting for the failover's own API clients
// (--failover-kube-api-qps and -burst), which default to 20 and 30.
func (s APISetting) failoverArgs() []string {
	if s == "default" {
		return nil
	}
	return []string{"--failover-kube-api-qps=" + string(s), "--failover-kube-api-burst=" + string(s)}
}

func (s APISetting) String() string {
	if s == "default" {
		return "5/10"
	}
	return string(s) + "/" + string(s)
}

// fencingModes: the fencing Attacher on (the product), and off
// (--disable-fencing: external-attacher's own controller and attacher).
var fencingModes = []string{"fence", "plain"}

func fencingArgs(mode string) []string {
	if mode == "plain" {
		return []string{"--disable-fencing"}
	}
	return nil
}

// roundResult is what attaching, then detaching, n VolumeAttachments cost.
type roundResult struct {
	setting                 APISetting
	fencing                 string
	n                       int
	attach, detach          time.Duration
	attachWrites, detWrites int
	attachReads, detReads   int
}

// burstAttachResult is what attaches cost alone and during a fence burst.
type burstAttachResult struct {
	setting          APISetting
	fencing          string
	alone, during    attachLatencies
	burstVols        int
	burstDone        time.Duration // from the burst's start to its last detach
	unpublishInBurst float64
	// detachWrites are the attacher's writes to the burst's
	// VolumeAttachments while the attaches ran, from the audit log.
	detachWrites int
}

type attachLatencies struct {
	p50, p95, all time.Duration
	// begin is when the first VolumeAttachment was created, end when the
	// last was seen attached.
	begin, end time.Time
}

// runAttach measures attach and detach throughput on a Ready node, with the
// fencing Attacher and with external-attacher's controller unchanged, side
// by side in one control plane, at each API client setting; then the
// attaches to a Ready node while another node's volumes are fenced, each
// fence taking fenceDelay in the driver (external-attacher issue #761).
func (b *bench) runAttach(ctx context.Context, o AttachOptions) (err error) {
	c, err := framework.Start(ctx, b, b.opts)
	if err != nil {
		return err
	}
	defer func() { b.cleanup(ctx, c, err) }()
	// NonGracefulFailover off: only the attacher acts on the node that
	// fails in the burst, so that its fences are the attacher's.
	p, err := c.StartProduct(ctx, framework.ProductOptions{AttacherArgs: []string{"--feature-gates=NonGracefulFailover=false"}})
	if err != nil {
		return err
	}
	nodes, err := c.CreateNodes(ctx, "ready", 1, framework.DriverName)
	if err != nil {
		return err
	}
	if err := p.Array.RegisterNode(nodes[0], 0); err != nil {
		return err
	}
	target := nodes[0]

	var rounds []roundResult
	var bursts []burstAttachResult
	defer func() {
		// What was measured, also when a later round fails.
		if err != nil {
			b.printAttach(rounds, bursts, o)
		}
	}()
	for i, q := range o.QPS {
		for j, f := range fencingModes {
			if err := restartAttacher(ctx, p, APISetting(q), f); err != nil {
				return err
			}
			for k, n := range o.Counts {
				// Fresh volumes each round: the first attach of a PV also
				// adds external-attacher's finalizer to it, which a round on
				// volumes attached before would not pay.
				handles, err := createVolumes(ctx, c, p, fmt.Sprintf("r%d%d%d", i, j, k), n)
				if err != nil {
					return err
				}
				r, err := attachRound(ctx, c, target, handles)
				if err != nil {
					return fmt.Errorf("%s, qps %s, %d volumes: %w", f, q, n, err)
				}
				r.setting, r.fencing = APISetting(q), f
				b.printf("%s qps %s n=%d: attach %.1fs, detach %.1fs\n", f, r.setting, n, r.attach.Seconds(), r.detach.Seconds())
				rounds = append(rounds, r)
			}
		}
	}

	if o.BurstVolumes > 0 {
		for i, q := range o.BurstQPS {
			for j, f := range fencingModes {
				if err := restartAttacher(ctx, p, APISetting(q), f); err != nil {
					return err
				}
				r, err := b.burstAttach(ctx, c, p, fmt.Sprintf("fail%d%d", i, j), target, o)
				if err != nil {
					return fmt.Errorf("burst, %s, qps %s: %w", f, q, err)
				}
				r.setting, r.fencing = APISetting(q), f
				bursts = append(bursts, r)
			}
		}
	}
	b.printAttach(rounds, bursts, o)
	return nil
}

// restartAttacher runs csi-fence-attacher with external-attacher's retry
// and timeout defaults (the e2e harness shortens them), less verbose
// logging, the API client setting q and the fencing mode f, and waits until
// it leads.
func restartAttacher(ctx context.Context, p *framework.Product, q APISetting, f string) error {
	args := []string{"--v=2", "--timeout=15s", "--retry-interval-start=1s", "--retry-interval-max=5m", "--reconcile-sync=1m"}
	args = append(append(args, q.args()...), fencingArgs(f)...)
	if err := p.RestartAttacher(ctx, args...); err != nil {
		return err
	}
	// The killed replica's Lease has to expire first.
	return framework.WaitFor(ctx, 60*time.Second, "csi-fence-attacher leading", func(ctx context.Context) (bool, error) {
		return framework.Leading(ctx, p.AttacherHTTP)
	})
}

// createVolumes creates n volumes of the mock driver and their PVs.
func createVolumes(ctx context.Context, c *framework.Cluster, p *framework.Product, prefix string, n int) ([]string, error) {
	handles := make([]string, n)
	for i := range handles {
		handles[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	err := parallel(8, handles, func(h string) error { return scenario.CreateVolume(ctx, c, p.Driver, h, nil) })
	return handles, err
}

// parallel runs fn on every item, at most workers at a time, and returns
// the first error.
func parallel(workers int, items []string, fn func(string) error) error {
	ch := make(chan string)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range ch {
				if err := fn(it); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	close(errs)
	return <-errs
}

// createVAs creates a VolumeAttachment of each handle's PV to node, named
// after the handle and labelled label, and returns when each was created.
func createVAs(ctx context.Context, c *framework.Cluster, node, label string, handles []string) (map[string]time.Time, error) {
	var mu sync.Mutex
	created := map[string]time.Time{}
	err := parallel(8, handles, func(h string) error {
		pvName := h
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: h, Labels: map[string]string{burstLabel: label}},
			Spec: storagev1.VolumeAttachmentSpec{
				Attacher: framework.DriverName, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName},
			},
		}
		begin := time.Now()
		if _, err := c.Client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		created[h] = begin
		mu.Unlock()
		return nil
	})
	return created, err
}

// waitAttached waits until every VolumeAttachment labelled label is
// attached and returns when the watch saw each attached.
func waitAttached(ctx context.Context, c *framework.Cluster, label string, n int, timeout time.Duration) (map[string]time.Time, error) {
	seen := map[string]time.Time{}
	err := waitVAs(ctx, c, burstLabel+"="+label, timeout, func(vas map[string]*storagev1.VolumeAttachment) bool {
		for name, va := range vas {
			if _, ok := seen[name]; !ok && va.Status.Attached {
				seen[name] = time.Now()
			}
		}
		return len(seen) == n
	})
	return seen, err
}

// detachAll deletes the VolumeAttachments labelled label and waits until
// they are gone (detached, finalizer removed).
func detachAll(ctx context.Context, c *framework.Cluster, label string, timeout time.Duration) error {
	sel := burstLabel + "=" + label
	if err := c.Client.StorageV1().VolumeAttachments().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return err
	}
	return waitVAs(ctx, c, sel, timeout, func(vas map[string]*storagev1.VolumeAttachment) bool { return len(vas) == 0 })
}

// attachRound attaches handles to node, then detaches them, and counts the
// attacher's API requests of each phase in the audit log.
func attachRound(ctx context.Context, c *framework.Cluster, node string, handles []string) (roundResult, error) {
	r := roundResult{n: len(handles)}
	const label = "round"
	ev0, err := c.AuditEvents()
	if err != nil {
		return r, err
	}
	begin := time.Now()
	if _, err := createVAs(ctx, c, node, label, handles); err != nil {
		return r, err
	}
	if _, err := waitAttached(ctx, c, label, len(handles), 30*time.Minute); err != nil {
		return r, fmt.Errorf("attaching: %w", err)
	}
	r.attach = time.Since(begin)
	ev1, err := c.AuditEvents()
	if err != nil {
		return r, err
	}
	begin = time.Now()
	if err := detachAll(ctx, c, label, 30*time.Minute); err != nil {
		return r, fmt.Errorf("detaching: %w", err)
	}
	r.detach = time.Since(begin)
	ev2, err := c.AuditEvents()
	if err != nil {
		return r, err
	}
	var a, d burstResult
	a.countRequests(ev1[len(ev0):])
	d.countRequests(ev2[len(ev1):])
	r.attachWrites, r.attachReads, r.detWrites, r.detReads = a.writes, a.reads, d.writes, d.reads
	return r, nil
}

// burstAttach measures attaching handles to target alone, then again while
// burstVols volumes are detached at once from a node that failed, each
// unpublish taking o.fenceDelay in the driver.
func (b *bench) burstAttach(ctx context.Context, c *framework.Cluster, p *framework.Product, prefix, target string, o AttachOptions) (burstAttachResult, error) {
	res := burstAttachResult{burstVols: o.BurstVolumes}
	failing, err := c.CreateNodes(ctx, prefix, 1, framework.DriverName)
	if err != nil {
		return res, err
	}
	if err := p.Array.RegisterNode(failing[0], 0); err != nil {
		return res, err
	}
	burstHandles, err := createVolumes(ctx, c, p, prefix, o.BurstVolumes)
	if err != nil {
		return res, err
	}
	if _, err := createVAs(ctx, c, failing[0], prefix, burstHandles); err != nil {
		return res, err
	}
	if _, err := waitAttached(ctx, c, prefix, len(burstHandles), 20*time.Minute); err != nil {
		return res, fmt.Errorf("attaching the burst's volumes: %w", err)
	}

	// Attaches alone, the baseline, and during the burst, each on fresh
	// volumes.
	alone, err := createVolumes(ctx, c, p, prefix+"-alone", o.Attaches)
	if err != nil {
		return res, err
	}
	during, err := createVolumes(ctx, c, p, prefix+"-during", o.Attaches)
	if err != nil {
		return res, err
	}
	if res.alone, err = timedAttaches(ctx, c, target, alone); err != nil {
		return res, err
	}
	if err := detachAll(ctx, c, "timed", 20*time.Minute); err != nil {
		return res, err
	}

	if err := c.ShutDown(ctx, failing[0]); err != nil {
		return res, err
	}
	// The taint follows the NotReady condition: by then the attacher's
	// cache has the node NotReady too.
	if err := c.WaitTaint(ctx, failing[0], corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, true, 90*time.Second); err != nil {
		return res, err
	}
	store := faults.NewStore(p.Driver.StateDir)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{Latency: o.FenceDelay}); err != nil {
		return res, err
	}
	unpub0, err := unpublishCalls(ctx, p)
	if err != nil {
		return res, err
	}
	ev0, err := c.AuditEvents()
	if err != nil {
		return res, err
	}
	begin := time.Now()
	if err := c.Client.StorageV1().VolumeAttachments().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: burstLabel + "=" + prefix}); err != nil {
		return res, err
	}
	if res.during, err = timedAttaches(ctx, c, target, during); err != nil {
		return res, err
	}
	if err := waitVAs(ctx, c, burstLabel+"="+prefix, 30*time.Minute, func(vas map[string]*storagev1.VolumeAttachment) bool { return len(vas) == 0 }); err != nil {
		return res, fmt.Errorf("detaching the burst: %w", err)
	}
	res.burstDone = time.Since(begin)
	unpub, err := unpublishCalls(ctx, p)
	if err != nil {
		return res, err
	}
	res.unpublishInBurst = unpub - unpub0
	ev1, err := c.AuditEvents()
	if err != nil {
		return res, err
	}
	res.detachWrites = writesDuring(ev1[len(ev0):], burstHandles, res.during.begin, res.during.end)
	if err := store.Set("ControllerUnpublishVolume", faults.Fault{}); err != nil {
		return res, err
	}
	b.printf("burst %s: attaches alone p50 %.2fs all %.2fs; during the burst p50 %.2fs all %.2fs, %d detach writes meanwhile; burst done in %.1fs\n", prefix,
		res.alone.p50.Seconds(), res.alone.all.Seconds(), res.during.p50.Seconds(), res.during.all.Seconds(), res.detachWrites, res.burstDone.Seconds())
	return res, detachAll(ctx, c, "timed", 20*time.Minute)
}

// writesDuring counts the attacher's writes to the VolumeAttachments named
// in names among events received from begin to end.
func writesDuring(events []framework.AuditEvent, names []string, begin, end time.Time) int {
	n := 0
	for _, e := range events {
		switch e.Verb {
		case "create", "update", "patch", "delete":
		default:
			continue
		}
		if e.User == attacherUser && e.Resource == "volumeattachments" && slices.Contains(names, e.Name) &&
			!e.Time.Before(begin) && !e.Time.After(end) {
			n++
		}
	}
	return n
}

// timedAttaches attaches handles to node at once and returns the latency
// of each attach, from its VolumeAttachment's creation to attached.
func timedAttaches(ctx context.Context, c *framework.Cluster, node string, handles []string) (attachLatencies, error) {
	var l attachLatencies
	begin := time.Now()
	created, err := createVAs(ctx, c, node, "timed", handles)
	if err != nil {
		return l, err
	}
	attached, err := waitAttached(ctx, c, "timed", len(handles), 20*time.Minute)
	if err != nil {
		return l, fmt.Errorf("timed attaches: %w", err)
	}
	var samples []time.Duration
	last := begin
	for h, t := range attached {
		samples = append(samples, t.Sub(created[h]))
		if t.After(last) {
			last = t
		}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	l.p50, l.p95, l.all = timeline.Percentile(samples, 50), timeline.Percentile(samples, 95), last.Sub(begin)
	l.begin, l.end = begin, last
	return l, nil
}

func (b *bench) printAttach(rounds []roundResult, bursts []burstAttachResult, o AttachOptions) {
	if len(rounds) == 0 && len(bursts) == 0 {
		return
	}
	b.printf("\nAttach, then detach, N VolumeAttachments on a Ready node (attacher's API requests from the audit log):\n")
	b.printf("%-9s %-6s %5s | %9s %9s %8s | %9s %9s %8s | %8s\n", "qps/burst", "attach", "N",
		"attach/s", "writes/op", "reads/op", "detach/s", "writes/op", "reads/op", "time vs")
	b.printf("%-9s %-6s %5s | %9s %9s %8s | %9s %9s %8s | %8s\n", "", "er", "", "", "", "", "", "", "", "plain")
	plain := map[string]roundResult{}
	for _, r := range rounds {
		if r.fencing == "plain" {
			plain[fmt.Sprint(r.setting, r.n)] = r
		}
	}
	for _, r := range rounds {
		n := float64(r.n)
		vs := ""
		if base, ok := plain[fmt.Sprint(r.setting, r.n)]; ok && r.fencing == "fence" {
			vs = fmt.Sprintf("%+.1f%%", 100*((r.attach+r.detach).Seconds()/(base.attach+base.detach).Seconds()-1))
		}
		b.printf("%-9s %-6s %5d | %9.1f %9.2f %8.2f | %9.1f %9.2f %8.2f | %8s\n", r.setting, r.fencing, r.n,
			n/r.attach.Seconds(), float64(r.attachWrites)/n, float64(r.attachReads)/n,
			n/r.detach.Seconds(), float64(r.detWrites)/n, float64(r.detReads)/n, vs)
	}
	if len(bursts) == 0 {
		return
	}
	b.printf("\n%d attaches to a Ready node, alone and while %d volumes are detached from a NotReady node (%v per ControllerUnpublishVolume):\n",
		o.Attaches, o.BurstVolumes, o.FenceDelay)
	b.printf("%-9s %-6s | %9s %9s %9s | %9s %9s %9s %8s | %8s | %8s %8s\n", "qps/burst", "attach", "alone p50", "p95", "all",
		"burst p50", "p95", "all", "detach", "p50 vs", "burst", "unpub")
	b.printf("%-9s %-6s | %9s %9s %9s | %9s %9s %9s %8s | %8s | %8s %8s\n", "", "er", "", "", "", "", "", "", "writes", "alone", "done", "RPCs")
	for _, r := range bursts {
		b.printf("%-9s %-6s | %8.2fs %8.2fs %8.2fs | %8.2fs %8.2fs %8.2fs %8d | %+7.0f%% | %7.1fs %8.0f\n", r.setting, r.fencing,
			r.alone.p50.Seconds(), r.alone.p95.Seconds(), r.alone.all.Seconds(),
			r.during.p50.Seconds(), r.during.p95.Seconds(), r.during.all.Seconds(), r.detachWrites,
			100*(r.during.p50.Seconds()/r.alone.p50.Seconds()-1), r.burstDone.Seconds(), r.unpublishInBurst)
	}
}
