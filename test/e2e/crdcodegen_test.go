//go:build e2e

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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/test/e2e/framework"
)

// The CRD files compared: the v0.1 hand-written schema, kept as a fixture,
// and the one hack/update-codegen.sh generates from the Go types (the
// chart's copy is the same bytes: hack/verify-codegen.sh).
const (
	handWrittenCRDs = "test/e2e/testdata/crd-v0.1"
	generatedCRDs   = "deploy/kubernetes/base"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdFixture is one object run through both schemas.
type crdFixture struct {
	name     string
	resource string                 // contract.FencingResource or contract.FenceAgentConfigResource
	object   map[string]interface{} // created (metadata.name set by the test when absent)
	// status, when set, is written to the status subresource of the object
	// created (a create ignores it): what the failover and node agents do.
	status map[string]interface{}
	// update, when set, changes the object created, then it is updated:
	// for the rules on transitions (oldSelf).
	update func(obj map[string]interface{})
	// valid is what the v0.1 schema does with it: the fixture's own check
	// that it tests what it says.
	valid bool
	// tightened, when set, says why the generated schema refuses what
	// v0.1 accepted, on purpose.
	tightened string
}

// The generated CRDs accept every fixture the v0.1 hand-written ones
// accepted, with the same object stored (pruned and defaulted alike), and
// refuse every one they refused; the only exceptions are the tightenings
// listed, each with its reason. Both sets of CRDs are installed side by
// side under test groups of their own (the product's group is served by the
// running product), and each fixture is a server-side dry run on both: a
// create, or a status or spec update of an object created for real.
func TestGeneratedCRDsAcceptWhatHandWrittenDid(t *testing.T) {
	ctx := context.Background()
	oldGroup, newGroup := "v01.crdcodegen.test", "gen.crdcodegen.test"
	installCRDs(ctx, t, handWrittenCRDs, oldGroup)
	installCRDs(ctx, t, generatedCRDs, newGroup)
	for _, f := range crdFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			oldObj, oldErr := runFixture(ctx, t, f, oldGroup)
			newObj, newErr := runFixture(ctx, t, f, newGroup)
			if (oldErr == nil) != f.valid {
				t.Fatalf("the v0.1 schema: %v, the fixture says valid=%v: fix the fixture", oldErr, f.valid)
			}
			switch {
			case f.tightened != "":
				if newErr == nil {
					t.Errorf("the generated schema accepts it; listed as tightened (%s)", f.tightened)
				}
			case oldErr != nil && newErr == nil:
				t.Errorf("the v0.1 schema refused it (%v), the generated one accepts it", oldErr)
			case oldErr == nil && newErr != nil:
				t.Errorf("the v0.1 schema accepted it, the generated one refuses it: %v", newErr)
			case oldErr == nil && !equality.Semantic.DeepEqual(storedContent(oldObj), storedContent(newObj)):
				t.Errorf("stored differently:\nv0.1:      %v\ngenerated: %v", storedContent(oldObj), storedContent(newObj))
			}
		})
	}
}

// An upgrade keeps every FencingRequest and FenceAgentConfig: objects
// stored under the v0.1 CRDs (every fixture it accepted, the tightened
// ones included) read back unchanged once the CRDs are replaced by the
// generated ones in place, and stay writable: the apiserver's validation
// ratcheting lets an update through that leaves a value the new schema
// refuses unchanged, so a condition written by hand under v0.1 does not
// block the failover's next status write.
func TestGeneratedCRDsUpgradeKeepsObjects(t *testing.T) {
	ctx := context.Background()
	group := "upgrade.crdcodegen.test"
	installCRDs(ctx, t, handWrittenCRDs, group)
	type stored struct {
		f   crdFixture
		obj *unstructured.Unstructured
	}
	var objs []stored
	var probe *crdFixture // a tightened fixture: refused once the new schema is served
	for _, f := range crdFixtures(t) {
		if !f.valid || f.update != nil {
			continue
		}
		res := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: contract.FencingVersion, Resource: f.resource})
		obj, err := createFixture(ctx, res, f, group, false, true)
		if err != nil {
			t.Fatalf("%s under v0.1: %v", f.name, err)
		}
		objs = append(objs, stored{f, obj})
		if f.tightened != "" && f.status != nil && probe == nil {
			probe = &f
		}
	}
	if probe == nil {
		t.Fatal("no tightened status fixture to tell when the new schema is served")
	}
	for _, crd := range readCRDs(t, generatedCRDs, group) {
		cur, err := cluster.Dynamic.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crd.SetResourceVersion(cur.GetResourceVersion())
		if _, err := cluster.Dynamic.Resource(crdGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("replacing %s by the generated CRD: %v", crd.GetName(), err)
		}
	}
	// The apiserver swaps a CRD's handler asynchronously: a condition
	// reason only the generated schema refuses says when. It is a new
	// value, which ratcheting does not let through.
	probeRes := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: contract.FencingVersion, Resource: probe.resource})
	probeStatus := runtime.DeepCopyJSON(probe.status)
	probeStatus["conditions"].([]interface{})[0].(map[string]interface{})["reason"] = "probe: not CamelCase"
	if err := framework.WaitFor(ctx, 30*time.Second, "the generated schema served", func(ctx context.Context) (bool, error) {
		_, err := writeStatus(ctx, probeRes, fixtureName(*probe), probeStatus, true)
		return apierrors.IsInvalid(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, s := range objs {
		res := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: contract.FencingVersion, Resource: s.f.resource})
		got, err := res.Get(ctx, s.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s after the upgrade: %v", s.f.name, err)
			continue
		}
		if !equality.Semantic.DeepEqual(got.Object, s.obj.Object) {
			t.Errorf("%s read back changed by the upgrade:\nbefore: %v\nafter:  %v", s.f.name, s.obj.Object, got.Object)
		}
		// The writers' next writes: a status update leaving it as it is,
		// and a change of the metadata through the main resource.
		if s.f.status != nil {
			if _, err := writeStatus(ctx, res, got.GetName(), s.f.status, false); err != nil {
				t.Errorf("%s: status update after the upgrade: %v", s.f.name, err)
			}
		}
		got, err = res.Get(ctx, s.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.SetAnnotations(map[string]string{"crdcodegen.test/touched": "true"})
		if _, err := res.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%s: update after the upgrade: %v", s.f.name, err)
			continue
		}
		// Written through the generated schema, pruned by it: a field
		// the v0.1 schema kept and this one lacked would be gone now.
		got, err = res.Get(ctx, s.obj.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"spec", "status"} {
			if !equality.Semantic.DeepEqual(got.Object[field], s.obj.Object[field]) {
				t.Errorf("%s: %s changed by the writes after the upgrade:\nbefore: %v\nafter:  %v", s.f.name, field, s.obj.Object[field], got.Object[field])
			}
		}
	}
}

// installCRDs creates the CRDs of dir under group (so that they do not
// meet the product's) and waits until each is established and served; they
// are deleted, with their objects, when the test ends.
func installCRDs(ctx context.Context, t *testing.T, dir, group string) {
	t.Helper()
	for _, crd := range readCRDs(t, dir, group) {
		if _, err := cluster.Dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", crd.GetName(), err)
		}
		name := crd.GetName()
		t.Cleanup(func() {
			if err := cluster.Dynamic.Resource(crdGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting %s: %v", name, err)
			}
		})
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		res := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: contract.FencingVersion, Resource: plural})
		if err := framework.WaitFor(ctx, 30*time.Second, name+" served", func(ctx context.Context) (bool, error) {
			_, err := res.List(ctx, metav1.ListOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// readCRDs reads the two CRDs of dir, moved to group.
func readCRDs(t *testing.T, dir, group string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, plural := range []string{contract.FencingResource, contract.FenceAgentConfigResource} {
		b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), dir, "crd-"+plural+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := framework.DecodeManifests(b)
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s/crd-%s.yaml: %v (%d objects)", dir, plural, err, len(objs))
		}
		crd := objs[0]
		if err := unstructured.SetNestedField(crd.Object, group, "spec", "group"); err != nil {
			t.Fatal(err)
		}
		crd.SetName(plural + "." + group)
		out = append(out, crd)
	}
	return out
}

// runFixture runs f on group's CRDs: the dry run of the create, or of the
// status write or update of an object created for real. It returns what
// the apiserver would store, or its refusal.
func runFixture(ctx context.Context, t *testing.T, f crdFixture, group string) (*unstructured.Unstructured, error) {
	t.Helper()
	res := cluster.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: contract.FencingVersion, Resource: f.resource})
	if f.status == nil && f.update == nil {
		return createFixture(ctx, res, f, group, true, false)
	}
	if _, err := createFixture(ctx, res, f, group, false, false); err != nil {
		t.Fatalf("creating the object to update: %v", err)
	}
	if f.status != nil {
		return writeStatus(ctx, res, fixtureName(f), f.status, true)
	}
	cur, err := res.Get(ctx, fixtureName(f), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.update(cur.Object)
	return res.Update(ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
}

// createFixture creates f's object under group, or only dry-runs it; with
// withStatus, then writes f's status, if any, for real.
func createFixture(ctx context.Context, res dynamic.NamespaceableResourceInterface, f crdFixture, group string, dryRun, withStatus bool) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(f.object)}
	obj.SetAPIVersion(group + "/" + contract.FencingVersion)
	obj.SetName(fixtureName(f))
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	created, err := res.Create(ctx, obj, opts)
	if err != nil || dryRun || !withStatus || f.status == nil {
		return created, err
	}
	return writeStatus(ctx, res, created.GetName(), f.status, false)
}

// writeStatus writes status to the status subresource of the object name,
// as a merge patch (a status write that needs no resourceVersion).
func writeStatus(ctx context.Context, res dynamic.NamespaceableResourceInterface, name string, status map[string]interface{}, dryRun bool) (*unstructured.Unstructured, error) {
	patch, err := yaml.Marshal(map[string]interface{}{"status": status})
	if err != nil {
		return nil, err
	}
	patch, err = yaml.YAMLToJSON(patch)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return res.Patch(ctx, name, types.MergePatchType, patch, opts, "status")
}

// fixtureName is the object's name: its own, or the fixture's (also its
// spec.nodeName for a FencingRequest: the CRD's rule).
func fixtureName(f crdFixture) string {
	meta, _ := f.object["metadata"].(map[string]interface{})
	if name, _ := meta["name"].(string); name != "" {
		return name
	}
	return f.name
}

// storedContent is what an object stores apart from what the apiserver
// writes of its own (identity, times, versions, group).
func storedContent(u *unstructured.Unstructured) map[string]interface{} {
	out := map[string]interface{}{"name": u.GetName(), "labels": u.GetLabels(), "annotations": u.GetAnnotations()}
	for k, v := range u.Object {
		if k != "metadata" && k != "apiVersion" {
			out[k] = v
		}
	}
	return out
}

// crdFixtures are the objects run through both schemas: FencingRequests of
// every shape the product's writers and tests produce (built from the Go
// types), FenceAgentConfigs of the docs and the tests, and what the v0.1
// schema refused, one rule at a time.
func crdFixtures(t *testing.T) []crdFixture {
	t.Helper()
	now := metav1.NewTime(time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Minute))
	uid := types.UID("0f3c2a9e-5d1b-4c7e-9a8f-2b6d4e1c7a30")
	fullStatus := fencingv1alpha1.FencingRequestStatus{
		Phase: fencingv1alpha1.PhaseFenced,
		Conditions: []metav1.Condition{{Type: fencingv1alpha1.ConditionFenced, Status: metav1.ConditionTrue,
			ObservedGeneration: 1, LastTransitionTime: now, Reason: "AllAttachmentsFenced", Message: "every attachment of every driver on the node is fenced"}},
		StartTime: &earlier, ErrorReason: "FenceFailed", ErrorMessage: "one driver did not answer",
		Volumes: []fencingv1alpha1.FencedVolume{
			{Driver: "hostpath.csi.k8s.io", VolumeHandle: "vol-1", PersistentVolumeName: "pv-1", NodeID: "node-1",
				StartedTime: &earlier, FencedTime: &now},
			{Driver: "hostpath.csi.k8s.io", VolumeHandle: "vol-2", StartedTime: &earlier, FenceError: "rpc error: deadline exceeded",
				FencesInFlight: []string{"a1b2c3d4", "e5f6"}},
			{Driver: "other.csi.example.com", VolumeHandle: "vol-3", StartedTime: &earlier, FencedTime: &earlier,
				CleanedTime: &now, CleanupError: "umount: target is busy"},
		},
		NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendPower, Config: "rack-1-ipmi", Agent: "fence_ipmilan",
			StartedTime: &earlier, Attempts: 2, ConfirmedTime: &now, NotReadySince: &earlier, Error: "", Output: "Status: OFF"},
		ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{{Namespace: "default", Name: "writer-0", UID: uid,
			TerminationReason: "NodeFenced", DeletedTime: &now}},
	}
	oosStatus := fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFencing,
		NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendOutOfService, StartedTime: &earlier, OutOfServiceTaintAdded: &earlier, NotReadySince: &earlier}}
	machineStatus := fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFencing,
		NodeFence: &fencingv1alpha1.NodeFence{Backend: fencingv1alpha1.BackendMachine, StartedTime: &earlier, Attempts: 1,
			Machine: &fencingv1alpha1.MachineTarget{Namespace: "capi", Name: "worker-1-abc", UID: uid, ProviderID: "docker:////worker-1",
				DeletionStartedBy: "fence-attacher", Infrastructure: fencingv1alpha1.InfrastructureRef{
					APIVersion: "infrastructure.cluster.x-k8s.io/v1beta2", Kind: "DockerMachine", Name: "worker-1-abc", UID: uid, DeletionSeenTime: &now}}}}
	completeStatus := fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseComplete, StartTime: &earlier, CompletionTime: &now,
		Conditions: []metav1.Condition{
			{Type: fencingv1alpha1.ConditionFenced, Status: metav1.ConditionFalse, LastTransitionTime: now, Reason: "NotFencedAsAWhole", Message: "the node is not fenced as a whole any more"},
			{Type: fencingv1alpha1.ConditionCleaned, Status: metav1.ConditionTrue, LastTransitionTime: now, Reason: "AllVolumesCleaned", Message: "every fenced volume was cleaned up on the node"},
		},
		Volumes: []fencingv1alpha1.FencedVolume{{Driver: "d", VolumeHandle: "v", StartedTime: &earlier, FencedTime: &earlier, CleanedTime: &now}}}
	// At the writers' bounds (fencerecord).
	bounded := fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.PhaseFencing}
	for i := 0; i < fencerecord.MaxVolumes; i++ {
		v := fencingv1alpha1.FencedVolume{Driver: "d", VolumeHandle: fmt.Sprintf("vol-%d", i)}
		if i == 0 {
			v.FenceError = strings.Repeat("e", fencerecord.MaxMessageLength)
			v.CleanupError = strings.Repeat("c", fencerecord.MaxMessageLength)
			for j := 0; j < fencerecord.MaxFencesInFlight; j++ {
				v.FencesInFlight = append(v.FencesInFlight, fmt.Sprintf("%032d", j))
			}
		}
		bounded.Volumes = append(bounded.Volumes, v)
	}
	for i := 0; i < fencerecord.MaxForceDeletedPods; i++ {
		bounded.ForceDeletedPods = append(bounded.ForceDeletedPods, fencingv1alpha1.ForceDeletedPod{
			Namespace: "ns", Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprint(i)), TerminationReason: "NodeFenced"})
	}

	fr := func(name, spec string) map[string]interface{} {
		return fromYAML(t, fmt.Sprintf("kind: FencingRequest\nmetadata: {name: %s}\nspec: %s", name, spec))
	}
	status := func(s fencingv1alpha1.FencingRequestStatus) map[string]interface{} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// withStatus is fullStatus changed by change, as a map to break.
	withStatus := func(change func(m map[string]interface{})) map[string]interface{} {
		m := status(fullStatus)
		change(m)
		return m
	}
	volume0 := func(m map[string]interface{}) map[string]interface{} {
		return m["volumes"].([]interface{})[0].(map[string]interface{})
	}
	condition0 := func(m map[string]interface{}) map[string]interface{} {
		return m["conditions"].([]interface{})[0].(map[string]interface{})
	}
	machine := func(m map[string]interface{}) map[string]interface{} {
		return m["nodeFence"].(map[string]interface{})["machine"].(map[string]interface{})
	}
	setReleased := func(v interface{}) func(map[string]interface{}) {
		return func(obj map[string]interface{}) {
			spec := obj["spec"].(map[string]interface{})
			if v == nil {
				delete(spec, "released")
			} else {
				spec["released"] = v
			}
		}
	}
	fixtures := []crdFixture{
		// FencingRequests the product and its users write.
		{name: "fr-minimal", object: fr("fr-minimal", "{nodeName: fr-minimal}"), valid: true},
		{name: "fr-manual", object: fr("fr-manual", "{nodeName: fr-manual, origin: Manual, reason: disk controller replaced}"), valid: true},
		{name: "fr-automatic", object: fr("fr-automatic", "{nodeName: fr-automatic, origin: Automatic, reason: NodeUnreachable}"), valid: true},
		{name: "fr-released", object: fr("fr-released", "{nodeName: fr-released, origin: Manual, released: true}"), valid: true},
		{name: "fr-unknown-field-pruned", object: fr("fr-unknown-field-pruned", "{nodeName: fr-unknown-field-pruned, color: blue}"), valid: true},
		{name: "fr-full-status", object: fr("fr-full-status", "{nodeName: fr-full-status, origin: Automatic}"), status: status(fullStatus), valid: true},
		{name: "fr-out-of-service", object: fr("fr-out-of-service", "{nodeName: fr-out-of-service, origin: Automatic}"), status: status(oosStatus), valid: true},
		{name: "fr-machine", object: fr("fr-machine", "{nodeName: fr-machine, origin: Automatic}"), status: status(machineStatus), valid: true},
		{name: "fr-complete", object: fr("fr-complete", "{nodeName: fr-complete}"), status: status(completeStatus), valid: true},
		{name: "fr-at-bounds", object: fr("fr-at-bounds", "{nodeName: fr-at-bounds}"), status: status(bounded), valid: true},
		{name: "fr-phase-pending", object: fr("fr-phase-pending", "{nodeName: fr-phase-pending}"), status: map[string]interface{}{"phase": "Pending"}, valid: true},
		{name: "fr-phase-cleaning", object: fr("fr-phase-cleaning", "{nodeName: fr-phase-cleaning}"), status: map[string]interface{}{"phase": "Cleaning"}, valid: true},
		{name: "fr-status-unknown-field-pruned", object: fr("fr-status-unknown-field-pruned", "{nodeName: fr-status-unknown-field-pruned}"),
			status: map[string]interface{}{"phase": "Fencing", "extra": "x"}, valid: true},
		{name: "fr-release-manual", object: fr("fr-release-manual", "{nodeName: fr-release-manual}"), update: setReleased(true), valid: true},
		{name: "fr-release-again", object: fr("fr-release-again", "{nodeName: fr-release-again, released: true}"), update: setReleased(true), valid: true},

		// What the v0.1 schema refused.
		{name: "fr-name-not-node", object: fr("fr-name-not-node", "{nodeName: another-node}")},
		{name: "fr-empty-node", object: fr("fr-empty-node", `{nodeName: ""}`)},
		{name: "fr-no-node", object: fr("fr-no-node", "{reason: none}")},
		{name: "fr-no-spec", object: fromYAML(t, "kind: FencingRequest\nmetadata: {name: fr-no-spec}")},
		{name: "fr-node-not-string", object: fr("fr-node-not-string", "{nodeName: 7}")},
		{name: "fr-bad-origin", object: fr("fr-bad-origin", "{nodeName: fr-bad-origin, origin: Sometimes}")},
		{name: "fr-released-not-bool", object: fr("fr-released-not-bool", `{nodeName: fr-released-not-bool, released: "yes"}`)},
		{name: "fr-automatic-released", object: fr("fr-automatic-released", "{nodeName: fr-automatic-released, origin: Automatic, released: true}")},
		{name: "fr-automatic-release-update", object: fr("fr-automatic-release-update", "{nodeName: fr-automatic-release-update, origin: Automatic}"), update: setReleased(true)},
		{name: "fr-unrelease", object: fr("fr-unrelease", "{nodeName: fr-unrelease, released: true}"), update: setReleased(false)},
		{name: "fr-unrelease-by-removal", object: fr("fr-unrelease-by-removal", "{nodeName: fr-unrelease-by-removal, released: true}"), update: setReleased(nil)},
		{name: "fr-change-node", object: fr("fr-change-node", "{nodeName: fr-change-node}"), update: func(obj map[string]interface{}) {
			obj["spec"].(map[string]interface{})["nodeName"] = "elsewhere"
		}},
		{name: "fr-bad-phase", object: fr("fr-bad-phase", "{nodeName: fr-bad-phase}"), status: map[string]interface{}{"phase": "Done"}},
		{name: "fr-bad-time", object: fr("fr-bad-time", "{nodeName: fr-bad-time}"), status: map[string]interface{}{"startTime": "yesterday"}},
		{name: "fr-volume-no-handle", object: fr("fr-volume-no-handle", "{nodeName: fr-volume-no-handle}"), status: withStatus(func(m map[string]interface{}) {
			delete(volume0(m), "volumeHandle")
		})},
		{name: "fr-volume-no-driver", object: fr("fr-volume-no-driver", "{nodeName: fr-volume-no-driver}"), status: withStatus(func(m map[string]interface{}) {
			delete(volume0(m), "driver")
		})},
		{name: "fr-too-many-volumes", object: fr("fr-too-many-volumes", "{nodeName: fr-too-many-volumes}"), status: func() map[string]interface{} {
			m := status(bounded)
			m["volumes"] = append(m["volumes"].([]interface{}), map[string]interface{}{"driver": "d", "volumeHandle": "one-more"})
			return m
		}()},
		{name: "fr-fence-error-too-long", object: fr("fr-fence-error-too-long", "{nodeName: fr-fence-error-too-long}"), status: withStatus(func(m map[string]interface{}) {
			volume0(m)["fenceError"] = strings.Repeat("e", fencerecord.MaxMessageLength+1)
		})},
		{name: "fr-cleanup-error-too-long", object: fr("fr-cleanup-error-too-long", "{nodeName: fr-cleanup-error-too-long}"), status: withStatus(func(m map[string]interface{}) {
			volume0(m)["cleanupError"] = strings.Repeat("c", fencerecord.MaxMessageLength+1)
		})},
		{name: "fr-too-many-in-flight", object: fr("fr-too-many-in-flight", "{nodeName: fr-too-many-in-flight}"), status: withStatus(func(m map[string]interface{}) {
			volume0(m)["fencesInFlight"] = []interface{}{"1", "2", "3", "4", "5", "6", "7", "8", "9"}
		})},
		{name: "fr-in-flight-id-too-long", object: fr("fr-in-flight-id-too-long", "{nodeName: fr-in-flight-id-too-long}"), status: withStatus(func(m map[string]interface{}) {
			volume0(m)["fencesInFlight"] = []interface{}{strings.Repeat("f", 33)}
		})},
		{name: "fr-too-many-pods", object: fr("fr-too-many-pods", "{nodeName: fr-too-many-pods}"), status: func() map[string]interface{} {
			m := status(bounded)
			m["forceDeletedPods"] = append(m["forceDeletedPods"].([]interface{}),
				map[string]interface{}{"namespace": "ns", "name": "one-more", "uid": "x", "terminationReason": "NodeFenced"})
			return m
		}()},
		{name: "fr-pod-no-reason", object: fr("fr-pod-no-reason", "{nodeName: fr-pod-no-reason}"), status: withStatus(func(m map[string]interface{}) {
			delete(m["forceDeletedPods"].([]interface{})[0].(map[string]interface{}), "terminationReason")
		})},
		{name: "fr-node-fence-no-backend", object: fr("fr-node-fence-no-backend", "{nodeName: fr-node-fence-no-backend}"), status: withStatus(func(m map[string]interface{}) {
			delete(m["nodeFence"].(map[string]interface{}), "backend")
		})},
		{name: "fr-node-fence-storage", object: fr("fr-node-fence-storage", "{nodeName: fr-node-fence-storage}"), status: withStatus(func(m map[string]interface{}) {
			m["nodeFence"].(map[string]interface{})["backend"] = fencingv1alpha1.BackendStorage
		})},
		{name: "fr-attempts-not-integer", object: fr("fr-attempts-not-integer", "{nodeName: fr-attempts-not-integer}"), status: withStatus(func(m map[string]interface{}) {
			m["nodeFence"].(map[string]interface{})["attempts"] = "three"
		})},
		{name: "fr-machine-no-uid", object: fr("fr-machine-no-uid", "{nodeName: fr-machine-no-uid}"), status: func() map[string]interface{} {
			m := status(machineStatus)
			delete(machine(m), "uid")
			return m
		}()},
		{name: "fr-infrastructure-no-kind", object: fr("fr-infrastructure-no-kind", "{nodeName: fr-infrastructure-no-kind}"), status: func() map[string]interface{} {
			m := status(machineStatus)
			delete(machine(m)["infrastructure"].(map[string]interface{}), "kind")
			return m
		}()},
		{name: "fr-condition-no-reason", object: fr("fr-condition-no-reason", "{nodeName: fr-condition-no-reason}"), status: withStatus(func(m map[string]interface{}) {
			delete(condition0(m), "reason")
		})},
		{name: "fr-condition-bad-status", object: fr("fr-condition-bad-status", "{nodeName: fr-condition-bad-status}"), status: withStatus(func(m map[string]interface{}) {
			condition0(m)["status"] = "Maybe"
		})},
		{name: "fr-condition-twice", object: fr("fr-condition-twice", "{nodeName: fr-condition-twice}"), status: withStatus(func(m map[string]interface{}) {
			m["conditions"] = append(m["conditions"].([]interface{}), runtime.DeepCopyJSONValue(condition0(m)))
		})},

		// Accepted by v0.1, refused by the generated schema on purpose: its
		// conditions are metav1.Condition's own schema, every Kubernetes
		// API's. The product's writers set only CamelCase reasons (Go
		// constants) and short messages, and a stored one stays writable
		// (TestGeneratedCRDsUpgradeKeepsObjects).
		{name: "fr-condition-empty-reason", object: fr("fr-condition-empty-reason", "{nodeName: fr-condition-empty-reason}"), status: withStatus(func(m map[string]interface{}) {
			condition0(m)["reason"] = ""
		}), valid: true, tightened: "metav1.Condition: reason is not empty"},
		{name: "fr-condition-reason-not-camelcase", object: fr("fr-condition-reason-not-camelcase", "{nodeName: fr-condition-reason-not-camelcase}"), status: withStatus(func(m map[string]interface{}) {
			condition0(m)["reason"] = "all attachments fenced"
		}), valid: true, tightened: "metav1.Condition: reason is CamelCase"},
		{name: "fr-condition-type-with-space", object: fr("fr-condition-type-with-space", "{nodeName: fr-condition-type-with-space}"), status: withStatus(func(m map[string]interface{}) {
			condition0(m)["type"] = "Fenced Now"
		}), valid: true, tightened: "metav1.Condition: type is a qualified name"},
		{name: "fr-condition-negative-generation", object: fr("fr-condition-negative-generation", "{nodeName: fr-condition-negative-generation}"), status: withStatus(func(m map[string]interface{}) {
			condition0(m)["observedGeneration"] = int64(-1)
		}), valid: true, tightened: "metav1.Condition: observedGeneration >= 0"},
	}

	fac := func(name, spec string) map[string]interface{} {
		return fromYAML(t, fmt.Sprintf("kind: FenceAgentConfig\nmetadata: {name: %s}\nspec: %s", name, spec))
	}
	const nodes = "nodes: [{name: worker-1}]"
	fixtures = append(fixtures,
		crdFixture{name: "fac-docs", object: docsFenceAgentConfig(t), valid: true},
		crdFixture{name: "fac-real-nodes", object: fac("fac-real-nodes", `{agent: fence_ipmilan, sharedParameters: {lanplus: "1", cipher: "3"},
  credentials: {secretName: real-bmc-credentials, secretNamespace: kube-system, parameters: {username: user, password: password}},
  nodes: [{name: node-0, parameters: {ip: 10.0.0.1, ipport: "6230"}}],
  timeouts: {callTimeoutSeconds: 40, retries: 1, retryIntervalSeconds: 1, confirmTimeoutSeconds: 30, statusIntervalSeconds: 1}}`), valid: true},
		crdFixture{name: "fac-minimal", object: fac("fac-minimal", "{agent: fence_redfish, "+nodes+"}"), valid: true},
		crdFixture{name: "fac-timeouts-at-bounds", object: fac("fac-timeouts-at-bounds", "{agent: fence_aws, "+nodes+`,
  timeouts: {callTimeoutSeconds: 0, retries: 20, retryIntervalSeconds: 0, confirmTimeoutSeconds: 0, statusIntervalSeconds: 0}}`), valid: true},
		crdFixture{name: "fac-retries-zero", object: fac("fac-retries-zero", "{agent: fence_aws, "+nodes+", timeouts: {retries: 0}}"), valid: true},
		crdFixture{name: "fac-agent-63", object: fac("fac-agent-63", "{agent: fence_"+strings.Repeat("a", 57)+", "+nodes+"}"), valid: true},
		crdFixture{name: "fac-unknown-field-pruned", object: fac("fac-unknown-field-pruned", "{agent: fence_ipmilan, "+nodes+", color: blue}"), valid: true},
		crdFixture{name: "fac-node-update", object: fac("fac-node-update", "{agent: fence_ipmilan, "+nodes+"}"), update: func(obj map[string]interface{}) {
			spec := obj["spec"].(map[string]interface{})
			spec["nodes"] = append(spec["nodes"].([]interface{}), map[string]interface{}{"name": "worker-2"})
		}, valid: true},

		crdFixture{name: "fac-no-agent", object: fac("fac-no-agent", "{"+nodes+"}")},
		crdFixture{name: "fac-agent-not-fence", object: fac("fac-agent-not-fence", "{agent: ipmilan, "+nodes+"}")},
		crdFixture{name: "fac-agent-path", object: fac("fac-agent-path", "{agent: /usr/sbin/fence_ipmilan, "+nodes+"}")},
		crdFixture{name: "fac-agent-upper", object: fac("fac-agent-upper", "{agent: fence_IPMI, "+nodes+"}")},
		crdFixture{name: "fac-agent-64", object: fac("fac-agent-64", "{agent: fence_"+strings.Repeat("a", 58)+", "+nodes+"}")},
		crdFixture{name: "fac-no-nodes", object: fac("fac-no-nodes", "{agent: fence_ipmilan}")},
		crdFixture{name: "fac-empty-nodes", object: fac("fac-empty-nodes", "{agent: fence_ipmilan, nodes: []}")},
		crdFixture{name: "fac-node-twice", object: fac("fac-node-twice", "{agent: fence_ipmilan, nodes: [{name: w}, {name: w}]}")},
		crdFixture{name: "fac-node-no-name", object: fac("fac-node-no-name", "{agent: fence_ipmilan, nodes: [{parameters: {ip: 10.0.0.1}}]}")},
		crdFixture{name: "fac-node-empty-name", object: fac("fac-node-empty-name", `{agent: fence_ipmilan, nodes: [{name: ""}]}`)},
		crdFixture{name: "fac-parameter-not-string", object: fac("fac-parameter-not-string", "{agent: fence_ipmilan, sharedParameters: {lanplus: 1}, "+nodes+"}")},
		crdFixture{name: "fac-credentials-no-parameters", object: fac("fac-credentials-no-parameters", "{agent: fence_ipmilan, "+nodes+
			", credentials: {secretName: s, secretNamespace: kube-system}}")},
		crdFixture{name: "fac-credentials-empty-name", object: fac("fac-credentials-empty-name", "{agent: fence_ipmilan, "+nodes+
			`, credentials: {secretName: "", secretNamespace: kube-system, parameters: {password: p}}}`)},
		crdFixture{name: "fac-node-credentials-no-namespace", object: fac("fac-node-credentials-no-namespace",
			"{agent: fence_ipmilan, nodes: [{name: w, credentials: {secretName: s, parameters: {password: p}}}]}")},
		crdFixture{name: "fac-retries-21", object: fac("fac-retries-21", "{agent: fence_ipmilan, "+nodes+", timeouts: {retries: 21}}")},
		crdFixture{name: "fac-negative-timeout", object: fac("fac-negative-timeout", "{agent: fence_ipmilan, "+nodes+", timeouts: {callTimeoutSeconds: -1}}")},
		crdFixture{name: "fac-remove-every-node", object: fac("fac-remove-every-node", "{agent: fence_ipmilan, "+nodes+"}"), update: func(obj map[string]interface{}) {
			obj["spec"].(map[string]interface{})["nodes"] = []interface{}{}
		}},
	)
	for i := range fixtures {
		fixtures[i].resource = contract.FencingResource
		if fixtures[i].object["kind"] == contract.FenceAgentConfigKind {
			fixtures[i].resource = contract.FenceAgentConfigResource
		}
	}
	return fixtures
}

// docsFenceAgentConfig is the FenceAgentConfig of docs/power-fencing.md, as
// a user copies it.
func docsFenceAgentConfig(t *testing.T) map[string]interface{} {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "docs/power-fencing.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		objs, err := framework.DecodeManifests([]byte(block[1]))
		if err != nil {
			continue
		}
		for _, o := range objs {
			if o.GetKind() == contract.FenceAgentConfigKind {
				return o.Object
			}
		}
	}
	t.Fatal("docs/power-fencing.md: no FenceAgentConfig in a yaml block")
	return nil
}

func fromYAML(t *testing.T, s string) map[string]interface{} {
	t.Helper()
	var m map[string]interface{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v in:\n%s", err, s)
	}
	return m
}
