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

package fencemode

import (
	"errors"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/csi-fence/fence-attacher/pkg/contract"
)

const driver = "disk.csi.example.com"

func csiDriver(annotations map[string]string) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver, Annotations: annotations}}
}

func TestMode(t *testing.T) {
	declared := map[string]string{contract.UnpublishRevokesAccessAnnotation: contract.UnpublishRevokesAccessTrue}
	for _, tc := range []struct {
		name     string
		canFence bool
		objects  []runtime.Object
		// getErr answers the GET of the CSIDriver instead of the API.
		getErr    error
		want      Mode
		wantErr   bool
		wantGets  int
		wantEvent string
	}{
		{name: "UNPUBLISH_FENCE: the fence field, nothing read", canFence: true, objects: []runtime.Object{csiDriver(declared)}, want: FenceField},
		{name: "declared, read live", objects: []runtime.Object{csiDriver(declared)}, want: RevokingUnpublish, wantGets: 1},
		{name: "no annotation", objects: []runtime.Object{csiDriver(nil)}, want: None, wantGets: 1},
		{name: "no CSIDriver", want: None, wantGets: 1},
		{name: "another value: not declared, with a warning saying what was expected",
			objects: []runtime.Object{csiDriver(map[string]string{contract.UnpublishRevokesAccessAnnotation: "yes"})}, want: None, wantGets: 1,
			wantEvent: `Warning InvalidFenceDeclaration CSIDriver disk.csi.example.com has annotation csi-fence.io/unpublish-revokes-access="yes", expected "true"`},
		{name: "True is not true", objects: []runtime.Object{csiDriver(map[string]string{contract.UnpublishRevokesAccessAnnotation: "True"})}, want: None, wantGets: 1,
			wantEvent: "Warning InvalidFenceDeclaration"},
		{name: "may not read CSIDrivers: not declared",
			getErr: apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "csidrivers"}, driver, errors.New("RBAC")), want: None, wantGets: 1},
		{name: "a read that fails and may pass: an error, so that nothing is sent",
			objects: []runtime.Object{csiDriver(declared)}, getErr: apierrors.NewServiceUnavailable("etcd down"), want: None, wantErr: true, wantGets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset(tc.objects...)
			gets := 0
			client.PrependReactor("get", "csidrivers", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				if tc.getErr != nil {
					return true, nil, tc.getErr
				}
				return false, nil, nil
			})
			recorder := record.NewFakeRecorder(10)
			r := NewReader(client.StorageV1(), driver, recorder)
			for range 2 { // the second read says nothing new
				got, err := r.Mode(ctx, tc.canFence)
				if (err != nil) != tc.wantErr {
					t.Fatalf("error %v, want one: %v", err, tc.wantErr)
				}
				if got != tc.want {
					t.Errorf("mode %q, want %q", got, tc.want)
				}
			}
			if gets != 2*tc.wantGets {
				t.Errorf("%d GETs of the CSIDriver, want %d", gets, 2*tc.wantGets)
			}
			close(recorder.Events)
			var events []string
			for ev := range recorder.Events {
				events = append(events, ev)
			}
			switch {
			case tc.wantEvent == "" && len(events) > 0:
				t.Errorf("unexpected Events %q", events)
			case tc.wantEvent != "" && (len(events) != 1 || !strings.HasPrefix(events[0], tc.wantEvent)):
				t.Errorf("Events %q, want one starting with %q", events, tc.wantEvent)
			}
		})
	}
}

// Without a client (the sidecar may not read CSIDrivers) nothing is
// declared, and a nil Reader is such a reader.
func TestModeWithoutClient(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, r := range []*Reader{nil, NewReader(nil, driver, nil)} {
		if m, err := r.Mode(ctx, false); err != nil || m != None {
			t.Errorf("mode %q, %v; want none", m, err)
		}
		if m, err := r.Mode(ctx, true); err != nil || m != FenceField {
			t.Errorf("mode %q, %v; want the fence field", m, err)
		}
	}
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		canFence, declared bool
		want               Mode
		fences, field      bool
	}{
		{want: None},
		{declared: true, want: RevokingUnpublish, fences: true},
		{canFence: true, want: FenceField, fences: true, field: true},
		{canFence: true, declared: true, want: FenceField, fences: true, field: true},
	} {
		m := Of(tc.canFence, tc.declared)
		if m != tc.want || m.Fences() != tc.fences || m.SendsFenceField() != tc.field {
			t.Errorf("Of(%v, %v) = %q (fences %v, field %v), want %q", tc.canFence, tc.declared, m, m.Fences(), m.SendsFenceField(), tc.want)
		}
	}
}

// Cached reads the declaration from a cached CSIDriver with the same rules,
// and says a bad value once per change; OfDriver decides as Cached does.
func TestCached(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	recorder := record.NewFakeRecorder(10)
	r := NewReader(nil, driver, recorder)
	bad := csiDriver(map[string]string{contract.UnpublishRevokesAccessAnnotation: "1"})
	for _, tc := range []struct {
		d        *storagev1.CSIDriver
		canFence bool
		want     Mode
		events   int
	}{
		{d: csiDriver(map[string]string{contract.UnpublishRevokesAccessAnnotation: "true"}), want: RevokingUnpublish},
		{d: nil, want: None},
		{d: bad, want: None, events: 1},
		{d: bad, want: None}, // said already
		{d: bad, canFence: true, want: FenceField},
	} {
		// OfDriver decides the same and says nothing (the Events
		// counted are Cached's).
		if got := OfDriver(tc.d, tc.canFence); got != tc.want {
			t.Errorf("OfDriver(%v, %v) = %q, want %q", tc.d, tc.canFence, got, tc.want)
		}
		if got := r.Cached(ctx, tc.d, tc.canFence); got != tc.want {
			t.Errorf("Cached(%v, %v) = %q, want %q", tc.d, tc.canFence, got, tc.want)
		}
		if got := len(recorder.Events); got != tc.events {
			t.Errorf("%d Events, want %d", got, tc.events)
		}
		for len(recorder.Events) > 0 {
			<-recorder.Events
		}
	}
	var none *Reader
	if got := none.Cached(ctx, bad, false); got != None {
		t.Errorf("a nil Reader's Cached = %q", got)
	}
}
