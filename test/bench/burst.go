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
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
	"github.com/csi-fence/fence-attacher/test/e2e/scenario"
)

// burstLabel marks the VolumeAttachments of one burst, so that they are
// deleted in one request and followed in one watch.
const burstLabel = "fence-bench/burst"

// attacherUser is csi-fence-attacher's ServiceAccount in the audit log.
const attacherUser = "system:serviceaccount:default:csi-fence-attacher"

// burstResult is what one burst of detaches cost.
type burstResult struct {
	kind     string
	volumes  int
	elapsed  time.Duration
	unpub    float64 // ControllerUnpublishVolume calls
	recorded int     // entries recorded fenced at the end

	frWrites, frConflicts, frReads int
	writes, reads                  int // every request of the attacher
	gaveUpIntent, gaveUpOutcome    int
	// writesBy counts the writes by resource (and subresource).
	writesBy map[string]int
}

// runBurst measures a burst of detaches from one node, as when a node with
// many volumes dies: volumes VolumeAttachments of the mock driver on one node
// are deleted in one request, once with the node Ready (plain detaches, the
// baseline) and once, on another node, with the node NotReady (each detach
// is fenced, write-ahead, by one of the attacher's workers). The attacher
// runs with its default --worker-threads and --kube-api-qps and the
// NonGracefulFailover gate off, so that its workers alone write the node's
// FencingRequest (no pod uses the volumes: the failover has nothing to do).
func (b *bench) runBurst(ctx context.Context, volumes int) (err error) {
	c, err := framework.Start(ctx, b, b.opts)
	if err != nil {
		return err
	}
	defer func() { b.cleanup(ctx, c, err) }()
	p, err := c.StartProduct(ctx, framework.ProductOptions{AttacherArgs: []string{"--feature-gates=NonGracefulFailover=false"}})
	if err != nil {
		return err
	}
	nodes, err := c.CreateNodes(ctx, "burst", 2, framework.DriverName)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := p.Array.RegisterNode(n, 0); err != nil {
			return err
		}
	}
	var results []burstResult
	defer func() {
		// What was measured, also when a later burst fails.
		if len(results) > 0 {
			b.printf("\n%s", burstTable(volumes, results))
		}
	}()
	for i, kind := range []string{"plain", "fenced"} {
		r, err := b.burst(ctx, c, p, nodes[i], kind, volumes)
		if err != nil {
			return fmt.Errorf("%s burst: %w", kind, err)
		}
		results = append(results, r)
	}
	return nil
}

// burstTable is the table of what each burst of volumes detaches cost.
func burstTable(volumes int, results []burstResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d detaches from one node at once (default --worker-threads and --kube-api-qps):\n", volumes)
	fmt.Fprintf(&sb, "%-7s %8s %10s %9s %10s %6s %16s %10s %10s %10s\n",
		"detach", "time", "unpublish", "fenced", "FR writes", "409s", "gave up (i/o)", "FR reads", "writes", "reads")
	fmt.Fprintf(&sb, "%-7s %8s %10s %9s %10s %6s %16s %10s %10s %10s\n",
		"", "", "RPCs", "recorded", "", "", "", "/detach", "/detach", "/detach")
	for _, r := range results {
		n := float64(r.volumes)
		fmt.Fprintf(&sb, "%-7s %7.1fs %10.0f %9d %10d %6d %16s %10.2f %10.2f %10.2f\n", r.kind, r.elapsed.Seconds(), r.unpub, r.recorded,
			r.frWrites, r.frConflicts, fmt.Sprintf("%d/%d", r.gaveUpIntent, r.gaveUpOutcome),
			float64(r.frReads)/n, float64(r.writes)/n, float64(r.reads)/n)
	}
	for _, r := range results {
		fmt.Fprintf(&sb, "%s writes per detach:", r.kind)
		for _, res := range slices.Sorted(maps.Keys(r.writesBy)) {
			fmt.Fprintf(&sb, " %s %.2f", res, float64(r.writesBy[res])/float64(r.volumes))
		}
		fmt.Fprintln(&sb)
	}
	return sb.String()
}

// burst attaches volumes volumes to node, fails the node if kind is
// "fenced", then deletes every attachment at once and measures until the
// last one is gone.
func (b *bench) burst(ctx context.Context, c *framework.Cluster, p *framework.Product, node, kind string, volumes int) (burstResult, error) {
	r := burstResult{kind: kind, volumes: volumes}
	sel := burstLabel + "=" + kind
	for i := 0; i < volumes; i++ {
		handle := fmt.Sprintf("burst-%s-%03d", kind, i)
		if err := scenario.CreateVolume(ctx, c, p.Driver, handle, nil); err != nil {
			return r, err
		}
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: handle, Labels: map[string]string{burstLabel: kind}},
			Spec: storagev1.VolumeAttachmentSpec{
				Attacher: framework.DriverName, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &handle},
			},
		}
		if _, err := c.Client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			return r, err
		}
	}
	begin := time.Now()
	if err := waitVAs(ctx, c, sel, 20*time.Minute, func(vas map[string]*storagev1.VolumeAttachment) bool {
		attached := 0
		for _, va := range vas {
			if va.Status.Attached {
				attached++
			}
		}
		return attached == volumes
	}); err != nil {
		return r, fmt.Errorf("attaching: %w", err)
	}
	b.printf("%s: %d volumes attached to %s (%.1fs)\n", kind, volumes, node, time.Since(begin).Seconds())
	if kind == "fenced" {
		if err := c.ShutDown(ctx, node); err != nil {
			return r, err
		}
		// The taint follows the NotReady condition: by then the attacher's
		// cache has the node NotReady too.
		if err := c.WaitTaint(ctx, node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute, true, 60*time.Second); err != nil {
			return r, err
		}
		b.printf("%s: %s NotReady\n", kind, node)
	}

	before, err := c.AuditEvents()
	if err != nil {
		return r, err
	}
	unpub0, err := unpublishCalls(ctx, p)
	if err != nil {
		return r, err
	}
	logOffset, err := fileSize(p.Attacher.LogPath)
	if err != nil {
		return r, err
	}
	begin = time.Now()
	if err := c.Client.StorageV1().VolumeAttachments().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return r, err
	}
	if err := waitVAs(ctx, c, sel, 30*time.Minute, func(vas map[string]*storagev1.VolumeAttachment) bool { return len(vas) == 0 }); err != nil {
		return r, fmt.Errorf("detaching: %w", err)
	}
	r.elapsed = time.Since(begin)
	b.printf("%s: %d volumes detached in %.1fs\n", kind, volumes, r.elapsed.Seconds())

	after, err := c.AuditEvents()
	if err != nil {
		return r, err
	}
	r.countRequests(after[len(before):])
	unpub, err := unpublishCalls(ctx, p)
	if err != nil {
		return r, err
	}
	r.unpub = unpub - unpub0
	if r.gaveUpIntent, r.gaveUpOutcome, err = gaveUp(p.Attacher.LogPath, logOffset); err != nil {
		return r, err
	}
	fr, err := fencingv1alpha1.NewClient(c.Dynamic).Get(ctx, node)
	if err == nil {
		for _, v := range fr.Status.Volumes {
			if fencerecord.IsFenced(fr, v.Driver, v.VolumeHandle) {
				r.recorded++
			}
		}
	}
	if kind == "fenced" && r.recorded != volumes {
		return r, fmt.Errorf("%d of %d volumes recorded fenced on %s: %v", r.recorded, volumes, node, err)
	}
	return r, nil
}

// countRequests counts the attacher's API requests among events.
func (r *burstResult) countRequests(events []framework.AuditEvent) {
	for _, e := range events {
		if e.User != attacherUser {
			continue
		}
		read := e.Verb == "get" || e.Verb == "list"
		write := e.Verb == "create" || e.Verb == "update" || e.Verb == "patch" || e.Verb == "delete"
		if read {
			r.reads++
		}
		if write {
			r.writes++
			if r.writesBy == nil {
				r.writesBy = map[string]int{}
			}
			res := e.Resource
			if e.Subresource != "" {
				res += "/" + e.Subresource
			}
			r.writesBy[res]++
		}
		if e.Resource != "fencingrequests" {
			continue
		}
		switch {
		case read:
			r.frReads++
		case write:
			r.frWrites++
			if e.Code == 409 {
				r.frConflicts++
			}
		}
	}
}

// unpublishCalls is the number of ControllerUnpublishVolume calls the
// attacher made so far.
func unpublishCalls(ctx context.Context, p *framework.Product) (float64, error) {
	return framework.MetricSum(ctx, p.AttacherHTTP, "csi_sidecar_operations_seconds_count",
		map[string]string{"method_name": "/csi.v1.Controller/ControllerUnpublishVolume"})
}

// gaveUp counts the detaches that failed, since offset in the attacher's
// log, because a record write gave up: before the fence (intent), or after
// it (outcome; the volume is fenced again on the retry).
func gaveUp(logPath string, offset int64) (intent, outcome int, err error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, 0, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "Failed to sync VolumeAttachment") {
			continue
		}
		switch {
		case strings.Contains(line, "recording the intent to fence"):
			intent++
		case strings.Contains(line, "the fence could not be recorded"):
			outcome++
		}
	}
	return intent, outcome, nil
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// waitVAs follows the VolumeAttachments matching the label selector sel
// until done is true of them (by name).
func waitVAs(ctx context.Context, c *framework.Cluster, sel string, timeout time.Duration, done func(map[string]*storagev1.VolumeAttachment) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lw := cache.NewFilteredListWatchFromClient(c.Client.StorageV1().RESTClient(), "volumeattachments", "", func(o *metav1.ListOptions) {
		o.LabelSelector = sel
	})
	vas := map[string]*storagev1.VolumeAttachment{}
	_, err := watchtools.UntilWithSync(ctx, lw, &storagev1.VolumeAttachment{}, func(store cache.Store) (bool, error) {
		for _, o := range store.List() {
			va := o.(*storagev1.VolumeAttachment)
			vas[va.Name] = va
		}
		return done(vas), nil
	}, func(ev watch.Event) (bool, error) {
		va, ok := ev.Object.(*storagev1.VolumeAttachment)
		if !ok {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			delete(vas, va.Name)
		} else {
			vas[va.Name] = va
		}
		return done(vas), nil
	})
	return err
}
