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

package sidecar

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/klog/v2/textlogger"
)

func TestWantedFeatures(t *testing.T) {
	tests := []struct {
		args []string
		gate bool
		want Wanted
	}{
		{args: nil, want: Wanted{}},
		{args: nil, gate: true, want: Wanted{Failover: true}},
		// power is one of the defaults: tried when granted, not asked for.
		{args: []string{"--fencing-backends=storage,power,out-of-service"}, want: Wanted{Failover: true, Power: true}},
		{args: []string{"--fencing-backends=storage,out-of-service"}, gate: true, want: Wanted{Failover: true}},
		{args: []string{"--fencing-backends=storage,machine"}, want: Wanted{Failover: true, Machine: true}},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var o FailoverOptions
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := WantedFeatures(tc.gate, &o); got != tc.want {
			t.Errorf("%v, gate %v: %+v, want %+v", tc.args, tc.gate, got, tc.want)
		}
	}
}

// without returns a copy of rules in which verb is no longer granted on
// group/resource.
func without(rules []rbacv1.PolicyRule, verb, group, resource string) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		r = *r.DeepCopy()
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
			if len(r.Resources) > 1 {
				// Split the rule: the resource apart, without the verb.
				rest := r
				rest.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == resource })
				out = append(out, rest)
				r.Resources = []string{resource}
			}
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
			if len(r.Verbs) == 0 {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// The preflight on each feature's roles of deploy/, bound as the
// kustomize components (and the chart's values) bind them: what runs,
// what each enabled feature lacks, and what the sidecar says about it (one
// warning line and one Warning Event per enabled feature that lacks a
// rule, naming verb, resource and API group; no Event where Events may not
// be posted).
func TestPreflight(t *testing.T) {
	ns := DefaultStormGuardNamespace
	detach := rulesIn(t, deployDir+"base/rbac-attacher.yaml", ns)
	failover := rulesIn(t, deployDir+"failover/rbac.yaml", ns)
	power := rulesIn(t, deployDir+"power-fencing/rbac.yaml", ns)
	machine := rulesIn(t, deployDir+"machine-fencing/rbac-machine.yaml", ns)
	gate := Wanted{Failover: true}

	type state = map[string]string
	tests := []struct {
		name   string
		rules  []rbacv1.PolicyRule
		wanted Wanted
		want   state
		// warned: feature -> the permissions its warning and Event must
		// name (exactly those); features not listed get neither.
		warned map[string][]string
		// noEvent: the warnings are logged only (no Events allowed).
		noEvent bool
	}{
		{name: "fenced detach alone", rules: detach,
			want: state{FeatureFencedDetach: "on", FeatureFailover: "off", FeaturePowerFencing: "off", FeatureMachineFencing: "off"}},
		{name: "fenced detach's roles, failover enabled", rules: detach, wanted: gate,
			want:   state{FeatureFencedDetach: "on", FeatureFailover: "off: missing permissions"},
			warned: map[string][]string{FeatureFailover: nil}},
		{name: "failover", rules: concat(detach, failover), wanted: gate,
			want: state{FeatureFencedDetach: "on", FeatureFailover: "on", FeaturePowerFencing: "off", FeatureMachineFencing: "off"}},
		{name: "failover's roles, power asked for", rules: concat(detach, failover), wanted: Wanted{Failover: true, Power: true},
			want:   state{FeatureFailover: "on", FeaturePowerFencing: "off: missing permissions"},
			warned: map[string][]string{FeaturePowerFencing: {`list fenceagentconfigs (apiGroup "fencing.csi-fence.io")`, `watch fenceagentconfigs (apiGroup "fencing.csi-fence.io")`, `get secrets (apiGroup "")`}}},
		{name: "power fencing", rules: concat(detach, failover, power), wanted: Wanted{Failover: true, Power: true},
			want: state{FeatureFencedDetach: "on", FeatureFailover: "on", FeaturePowerFencing: "on", FeatureMachineFencing: "off"}},
		{name: "machine fencing", rules: concat(detach, failover, machine), wanted: Wanted{Failover: true, Machine: true},
			want: state{FeatureFencedDetach: "on", FeatureFailover: "on", FeaturePowerFencing: "off", FeatureMachineFencing: "on"}},
		{name: "machine fencing without delete machines", rules: concat(detach, failover, without(machine, "delete", "cluster.x-k8s.io", "machines")), wanted: Wanted{Failover: true, Machine: true},
			want:   state{FeatureFailover: "on", FeatureMachineFencing: "off: missing permissions"},
			warned: map[string][]string{FeatureMachineFencing: {`delete machines (apiGroup "cluster.x-k8s.io")`}}},
		{name: "failover without patch nodes/status", rules: concat(detach, without(failover, "patch", "", "nodes/status")), wanted: gate,
			want:   state{FeatureFencedDetach: "on", FeatureFailover: "off: missing permissions"},
			warned: map[string][]string{FeatureFailover: {`patch nodes/status (apiGroup "")`}}},
		{name: "failover without the cluster-wide Leases (its Role in another namespace)", rules: concat(detach, rulesIn(t, deployDir+"failover/rbac.yaml", "elsewhere")), wanted: gate,
			want:   state{FeatureFailover: "off: missing permissions"},
			warned: map[string][]string{FeatureFailover: {`create leases (apiGroup "coordination.k8s.io")`, `update leases (apiGroup "coordination.k8s.io")`}}},
		{name: "fenced detach without create fencingrequests: the failover needs it too", rules: concat(without(detach, "create", "fencing.csi-fence.io", "fencingrequests"), failover), wanted: gate,
			want:   state{FeatureFencedDetach: "off: missing permissions", FeatureFailover: "off: missing permissions"},
			warned: map[string][]string{FeatureFencedDetach: {`create fencingrequests (apiGroup "fencing.csi-fence.io")`}, FeatureFailover: {}}},
		{name: "fenced detach without create events: said, not posted", rules: without(detach, "create", "", "events"),
			want:    state{FeatureFencedDetach: "on, limited", FeatureFailover: "off"},
			warned:  map[string][]string{FeatureFencedDetach: {`create events (apiGroup "")`}},
			noEvent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewSimpleClientset()
			client.PrependReactor("create", "selfsubjectrulesreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectRulesReview)
				r.Status = reviewStatus(tc.rules)
				return true, r, nil
			})
			access, checks := Preflight(ctx, client, ns, true, tc.wanted)
			for _, c := range checks {
				if want, ok := tc.want[c.Feature]; ok && c.state() != want {
					t.Errorf("%s: %s, want %s (missing %v, needs %q)", c.Feature, c.state(), want, c.Missing, c.Needs)
				}
			}

			var log bytes.Buffer
			events := record.NewFakeRecorder(10)
			ReportFeatures(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log))), events, access, "drv.example.com", checks)
			close(events.Events)
			var posted []string
			for e := range events.Events {
				posted = append(posted, e)
			}
			var warnings []string
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.Contains(l, "Warning:") {
					warnings = append(warnings, l)
				}
			}
			wantEvents := len(tc.warned)
			if tc.noEvent {
				wantEvents = 0
			}
			if len(warnings) != len(tc.warned) || len(posted) != wantEvents {
				t.Fatalf("%d warnings and %d Events, want %d and %d:\n%s\nEvents: %q", len(warnings), len(posted), len(tc.warned), wantEvents, log.String(), posted)
			}
			for feature, perms := range tc.warned {
				line := find(warnings, `feature="`+feature+`"`)
				event := find(posted, "Warning "+EventReasonMissingPermissions+" "+feature+":")
				if line == "" || !tc.noEvent && event == "" {
					t.Errorf("%s: warning %q, Event %q", feature, line, event)
					continue
				}
				for _, p := range perms {
					if !strings.Contains(line, strings.ReplaceAll(p, `"`, `\"`)) || !tc.noEvent && !strings.Contains(event, p) {
						t.Errorf("%s: %s not named\nwarning: %s\nEvent: %s", feature, p, line, event)
					}
				}
				if perms != nil {
					var c FeatureCheck
					for _, x := range checks {
						if x.Feature == feature {
							c = x
						}
					}
					if len(c.Missing) != len(perms) {
						t.Errorf("%s: missing %v, want only %v", feature, c.Missing, perms)
					}
				}
			}
			if !strings.Contains(log.String(), "Features of the controller role") {
				t.Errorf("no summary of the features:\n%s", log.String())
			}
		})
	}
}

func find(lines []string, s string) string {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// A server that cannot list every rule (a webhook authorizer): each
// permission the review does not show is asked on its own, and a feature
// runs only when every answer grants what it needs; what is refused, or
// not answered, is reported missing (issue 38 item 9: an incomplete review
// is not full access).
func TestPreflightIncompleteReview(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   func(*authorizationv1.ResourceAttributes) (bool, error)
		wantRuns bool
	}{
		{name: "every permission allowed", answer: func(*authorizationv1.ResourceAttributes) (bool, error) { return true, nil }, wantRuns: true},
		{name: "deleting pods refused", answer: func(r *authorizationv1.ResourceAttributes) (bool, error) {
			return !(r.Verb == "delete" && r.Resource == "pods"), nil
		}},
		{name: "no answer", answer: func(*authorizationv1.ResourceAttributes) (bool, error) { return false, errors.New("webhook down") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewSimpleClientset()
			client.PrependReactor("create", "selfsubjectrulesreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectRulesReview)
				r.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "webhook"}
				return true, r, nil
			})
			client.PrependReactor("create", "selfsubjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				allowed, err := tc.answer(r.Spec.ResourceAttributes)
				r.Status.Allowed = allowed
				return true, r, err
			})
			_, checks := Preflight(ctx, client, "ns", true, Wanted{Failover: true, Power: true})
			for _, c := range checks {
				if c.Feature != FeatureFailover {
					continue
				}
				if c.Runs != tc.wantRuns || (len(c.Missing) == 0) != tc.wantRuns {
					t.Errorf("%+v: want runs=%v, something missing=%v", c, tc.wantRuns, !tc.wantRuns)
				}
			}
		})
	}
}

// A replica checks its permissions again when it leads, and says so only
// when they changed since its start: a feature's state, or what it lacks.
func TestFeaturesChanged(t *testing.T) {
	ns := DefaultStormGuardNamespace
	detach := rulesIn(t, deployDir+"base/rbac-attacher.yaml", ns)
	failover := rulesIn(t, deployDir+"failover/rbac.yaml", ns)
	gate := Wanted{Failover: true}
	checksOf := func(rules []rbacv1.PolicyRule, w Wanted) []FeatureCheck {
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewSimpleClientset()
		client.PrependReactor("create", "selfsubjectrulesreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
			r := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectRulesReview)
			r.Status = reviewStatus(rules)
			return true, r, nil
		})
		_, checks := Preflight(ctx, client, ns, true, w)
		return checks
	}
	for _, tc := range []struct {
		name          string
		before, after []FeatureCheck
		changed       bool
	}{
		{name: "the same roles", before: checksOf(concat(detach, failover), gate), after: checksOf(concat(detach, failover), gate)},
		{name: "the same lack", before: checksOf(detach, gate), after: checksOf(detach, gate)},
		{name: "the failover's roles bound meanwhile", before: checksOf(detach, gate), after: checksOf(concat(detach, failover), gate), changed: true},
		{name: "the failover's roles taken away meanwhile", before: checksOf(concat(detach, failover), gate), after: checksOf(detach, gate), changed: true},
		{name: "one more rule missing, the state the same", before: checksOf(concat(detach, without(failover, "patch", "", "nodes/status")), gate),
			after: checksOf(concat(detach, without(without(failover, "patch", "", "nodes/status"), "delete", "", "pods")), gate), changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FeaturesChanged(tc.before, tc.after); got != tc.changed {
				t.Errorf("FeaturesChanged: %v, want %v", got, tc.changed)
			}
		})
	}
}
