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

	"github.com/csi-fence/fence-attacher/pkg/contract"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// The helper's bound: whatever the API does, the reason comes within the
// timeout, Unknown unless the API answered.
func TestReasonFromIsBounded(t *testing.T) {
	pod := &v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
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
		// The pod was force-deleted while its node was away; the Event of
		// its deletion, on its UID, carries the reason.
		"gone": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path != "/api/v1/namespaces/ns/events" {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
				return
			}
			_ = json.NewEncoder(w).Encode(&v1.EventList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "EventList"}, Items: []v1.Event{
				{ObjectMeta: metav1.ObjectMeta{Name: "other"}, InvolvedObject: v1.ObjectReference{UID: "u2"}, Reason: "ForceDeleted"},
				{ObjectMeta: metav1.ObjectMeta{Name: "p.1", Annotations: map[string]string{contract.TerminationReasonAnnotation: contract.TerminationIntolerableTaint}},
					InvolvedObject: v1.ObjectReference{UID: "u1"}, Reason: "ForceDeleted"},
			}})
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
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name, server, host string
		uid                string
		want               string
	}{
		{name: "the pod is gone: the reason on the Event of its force-delete", server: "gone", uid: "u1", want: contract.TerminationIntolerableTaint},
		{name: "the pod is gone, no Event of it: Unknown", server: "gone", uid: "u3", want: termreason.Unknown},
		{name: "the pod is gone, its UID not given: Unknown", server: "gone", want: termreason.Unknown},
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
			got := ReasonOf(context.Background(), &rest.Config{Host: host}, "ns", "p", tc.uid, timeout)
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
