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

package prestop

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/nodeagent"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// The helper's bound: whatever the API does, the reason comes within the
// timeout, Unknown unless the API answered.
func TestReasonFromIsBounded(t *testing.T) {
	pod := &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1",
		Annotations: map[string]string{termreason.ReasonAnnotation: "Rack B"}}}
	release := make(chan struct{})
	defer close(release)
	servers := map[string]http.HandlerFunc{
		"answers": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/namespaces/ns/pods/p" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(pod)
		},
		"hangs": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		},
		// The pod was force-deleted while its node was away: the API has
		// no such pod, rejects the token bound to it, or has a replacement
		// of the same name.
		"gone": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
		},
		"rejects": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
		},
		"replaced": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			replacement := pod.DeepCopy()
			replacement.UID = "u9"
			_ = json.NewEncoder(w).Encode(replacement)
		},
		"forbids": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
		},
	}
	// A port nothing listens on: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	// The node's agent, with the reason of u1 recorded.
	record := &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{
		{Namespace: "ns", Name: "p", UID: "u1", TerminationReason: contract.TerminationIntolerableTaint}}}}
	agent := httptest.NewServer(nodeagent.ReasonHandler(context.Background(), recordGetter{record}, "n1"))
	defer agent.Close()
	agentURL := agent.URL + termreason.ServedPath
	hangingAgent := httptest.NewServer(servers["hangs"])
	defer hangingAgent.Close()
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name, server, host string
		uid, agent         string
		want               string
	}{
		{name: "the pod is gone: its node's agent has the reason", server: "gone", uid: "u1", agent: agentURL, want: contract.TerminationIntolerableTaint},
		{name: "the token bound to the pod is rejected: its node's agent has the reason", server: "rejects", uid: "u1", agent: agentURL, want: contract.TerminationIntolerableTaint},
		{name: "a replacement of the same name: its node's agent has the reason", server: "replaced", uid: "u1", agent: agentURL, want: contract.TerminationIntolerableTaint},
		{name: "a replacement of the same name, no agent: Unknown, not the replacement's reason", server: "replaced", uid: "u1", want: termreason.Unknown},
		{name: "the pod is gone, the agent has no reason for it: Unknown", server: "gone", uid: "u3", agent: agentURL, want: termreason.Unknown},
		{name: "the pod is gone, its UID not given: Unknown", server: "gone", agent: agentURL, want: termreason.Unknown},
		{name: "the pod is gone, the agent hangs: Unknown in time", server: "gone", uid: "u1", agent: hangingAgent.URL, want: termreason.Unknown},
		{name: "the pod is gone, the agent is not there: Unknown", server: "gone", uid: "u1", agent: refused, want: termreason.Unknown},
		{name: "the API answers for this pod: the agent is not asked", server: "answers", uid: "u1", agent: refused, want: "Rack B"},
		{name: "the API answers: the deleter's reason", server: "answers", want: "Rack B"},
		{name: "the API hangs: Unknown in time", server: "hangs", want: termreason.Unknown},
		{name: "the API refuses connections: Unknown", host: refused, want: termreason.Unknown},
		{name: "the ServiceAccount may not read the pod: Unknown", server: "forbids", want: termreason.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host
			if tc.server != "" {
				s := httptest.NewServer(servers[tc.server])
				defer s.Close()
				host = s.URL
			}
			start := time.Now()
			got := ReasonOf(context.Background(), &rest.Config{Host: host}, Pod{Namespace: "ns", Name: "p", UID: tc.uid}, tc.agent, timeout)
			if took := time.Since(start); took > timeout+300*time.Millisecond {
				t.Errorf("took %v, the bound is %v", took, timeout)
			}
			if got != tc.want {
				t.Errorf("reason %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHTTPGetCarriesTheReason(t *testing.T) {
	got := make(chan *http.Request, 1)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r }))
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	var p int
	_ = json.Unmarshal([]byte(port), &p)
	for _, tc := range []struct {
		name, header, path, wantPath, wantQuery string
	}{
		{name: "default header", header: DefaultHeader, path: "/stop", wantPath: "/stop"},
		{name: "renamed header, path with a query", header: "X-Why", path: "/stop?now=1", wantPath: "/stop", wantQuery: "now=1"},
		{name: "path without a slash", header: "X-Why", path: "stop", wantPath: "/stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := HTTPGet{Port: p, Path: tc.path, Headers: http.Header{"X-Orig": {"kept"}}}
			if err := g.Do(context.Background(), tc.header, "Decommissioned"); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.Header.Get(tc.header) != "Decommissioned" || r.Header.Get("X-Orig") != "kept" || r.URL.Path != tc.wantPath || r.URL.RawQuery != tc.wantQuery {
				t.Fatalf("server got %s %v", r.URL, r.Header)
			}
		})
	}
}

type recordGetter struct {
	fr *fencingv1alpha1.FencingRequest
}

func (r recordGetter) Get(context.Context, string) (*fencingv1alpha1.FencingRequest, error) {
	return r.fr, nil
}
