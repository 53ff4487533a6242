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

package nodeagent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

type getterFunc func(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)

func (f getterFunc) Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
	return f(ctx, name)
}

func TestReasonHandler(t *testing.T) {
	record := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: fencingv1alpha1.FencingRequestStatus{ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{
			{Namespace: "ns", Name: "db-0", UID: "u1", TerminationReason: termreason.IntolerableTaint},
		}}}
	recorded := getterFunc(func(_ context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
		if name != "node-1" {
			return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), name)
		}
		return record, nil
	})
	for _, tc := range []struct {
		name    string
		records RecordGetter
		query   string
		want    int
		reason  string
	}{
		{name: "a pod force-deleted from this node", records: recorded, query: "?uid=u1", want: http.StatusOK, reason: termreason.IntolerableTaint},
		{name: "another pod", records: recorded, query: "?uid=u2", want: http.StatusNotFound},
		{name: "no uid", records: recorded, want: http.StatusBadRequest},
		{name: "no record of this node", records: getterFunc(func(_ context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
			return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), name)
		}), query: "?uid=u1", want: http.StatusNotFound},
		{name: "the record cannot be read", records: getterFunc(func(context.Context, string) (*fencingv1alpha1.FencingRequest, error) {
			return nil, errors.New("connection refused")
		}), query: "?uid=u1", want: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			ReasonHandler(context.Background(), tc.records, "node-1").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, termreason.ServedPath+tc.query, nil))
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want != http.StatusOK {
				return
			}
			var got termreason.ServedReason
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got != (termreason.ServedReason{Namespace: "ns", Name: "db-0", UID: "u1", Reason: tc.reason}) {
				t.Errorf("served %+v", got)
			}
		})
	}
}

// countingLimiter is a client's rate limiter that counts the requests that
// waited on it (client-go calls Wait before each request).
type countingLimiter struct {
	flowcontrol.RateLimiter
	waits atomic.Int64
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	l.waits.Add(1)
	return l.RateLimiter.Wait(ctx)
}

// fakeRecordAPI answers the FencingRequest reads and status writes of
// node-1, as the apiserver does.
func fakeRecordAPI(t *testing.T, fr *fencingv1alpha1.FencingRequest) *httptest.Server {
	u, err := fencingv1alpha1.ToUnstructured(fr)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	base := "/apis/" + fencingv1alpha1.Resource.Group + "/" + fencingv1alpha1.Resource.Version + "/" + fencingv1alpha1.Resource.Resource + "/node-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == base:
			_, _ = w.Write(body)
		case r.Method == http.MethodPut && r.URL.Path == base+"/status":
			_, _ = io.Copy(w, r.Body)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The endpoint is unauthenticated: a flood of requests must not consume the
// rate limiter of the client that writes the node's cleanups (built from
// the same configuration), nor pile up without bound; the cleanup write
// still takes its turn at once.
func TestReasonEndpointSparesTheCleanupClient(t *testing.T) {
	record := &fencingv1alpha1.FencingRequest{TypeMeta: metav1.TypeMeta{APIVersion: fencingv1alpha1.SchemeGroupVersion.String(), Kind: "FencingRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: fencingv1alpha1.FencingRequestStatus{ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{
			{Namespace: "ns", Name: "db-0", UID: "u1", TerminationReason: termreason.IntolerableTaint}}}}
	api := fakeRecordAPI(t, record)
	cleanupLimiter := &countingLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(1000, 1000)}
	cfg := &rest.Config{Host: api.URL, RateLimiter: cleanupLimiter}
	cleanupDyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, err := ReasonEndpoint(context.Background(), cfg, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(endpoint)
	defer srv.Close()

	const flood = 3 * maxReasonsInFlight
	statuses := make(chan int, flood)
	var wg sync.WaitGroup
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rsp, err := http.Get(srv.URL + termreason.ServedPath + "?uid=u1")
			if err != nil {
				statuses <- 0
				return
			}
			rsp.Body.Close()
			statuses <- rsp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	t.Logf("statuses of %d concurrent requests: %v", flood, count)
	if count[http.StatusOK] == 0 {
		t.Errorf("no request of the flood was served: %v", count)
	}
	if count[http.StatusOK]+count[http.StatusTooManyRequests]+count[http.StatusServiceUnavailable] != flood {
		t.Errorf("unexpected statuses: %v", count)
	}
	if n := cleanupLimiter.waits.Load(); n != 0 {
		t.Errorf("the flood of endpoint requests took %d turns of the cleanup client's rate limiter, want 0", n)
	}

	// A cleanup write after the flood: the cleanup client's limiter sees
	// it, and only it.
	if _, err := fencingv1alpha1.NewClient(cleanupDyn).UpdateStatus(context.Background(), record); err != nil {
		t.Fatal(err)
	}
	if n := cleanupLimiter.waits.Load(); n != 1 {
		t.Errorf("the cleanup client's rate limiter saw %d requests, want the one cleanup write", n)
	}
}

// Requests beyond the bound of those in flight are refused at once with 429,
// not queued: a request in flight may wait for the record for seconds.
func TestReasonEndpointBoundsRequestsInFlight(t *testing.T) {
	const limit = 3
	entered, release := make(chan struct{}), make(chan struct{})
	blocking := getterFunc(func(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
		select {
		case entered <- struct{}{}:
		case <-ctx.Done(): // a request the test does not expect here
			return nil, ctx.Err()
		}
		<-release
		return nil, apierrors.NewNotFound(fencingv1alpha1.Resource.GroupResource(), name)
	})
	h := limitInFlight(ReasonHandler(context.Background(), blocking, "node-1"), limit)
	get := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, termreason.ServedPath+"?uid=u1", nil))
		return rec.Code
	}
	done := make(chan int, limit)
	for range limit {
		go func() { done <- get() }()
		<-entered // in flight, reading the record
	}
	if code := get(); code != http.StatusTooManyRequests {
		t.Errorf("request %d with %d in flight: status %d, want %d", limit+1, limit, code, http.StatusTooManyRequests)
	}
	close(release)
	for range limit {
		if code := <-done; code != http.StatusNotFound {
			t.Errorf("a request in flight: status %d, want %d", code, http.StatusNotFound)
		}
	}
	// Their slots are free again.
	go func() { <-entered }()
	if code := get(); code != http.StatusNotFound {
		t.Errorf("a request after the others ended: status %d, want %d", code, http.StatusNotFound)
	}
}

// Each read of the record goes over a connection of its own: when the node
// is back from a partition, a connection that lived through it may be
// stalled for seconds, and a read queued on it would outlast the hook's
// bound. The fake apiserver (TLS, HTTP/2 offered, as the apiserver does)
// never answers a second request on a connection, as a stalled one would
// not; the cleanup client, built from the same configuration, opens a
// connection first.
func TestReasonEndpointReadsOnFreshConnections(t *testing.T) {
	record := &fencingv1alpha1.FencingRequest{TypeMeta: metav1.TypeMeta{APIVersion: fencingv1alpha1.SchemeGroupVersion.String(), Kind: "FencingRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: fencingv1alpha1.FencingRequestStatus{ForceDeletedPods: []fencingv1alpha1.ForceDeletedPod{
			{Namespace: "ns", Name: "db-0", UID: "u1", TerminationReason: termreason.IntolerableTaint}}}}
	u, err := fencingv1alpha1.ToUnstructured(record)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	stalled := make(chan struct{})
	var mu sync.Mutex
	used := map[string]bool{}
	var conns atomic.Int64
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		again := used[r.RemoteAddr]
		used[r.RemoteAddr] = true
		mu.Unlock()
		if again {
			select { // a stalled connection: no answer
			case <-stalled:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	api.EnableHTTP2 = true
	api.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	api.StartTLS()
	defer api.Close()
	defer close(stalled)
	cfg := &rest.Config{Host: api.URL, TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(api.Certificate())}}

	cleanupDyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fencingv1alpha1.NewClient(cleanupDyn).Get(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	endpoint, err := ReasonEndpoint(context.Background(), cfg, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rec := httptest.NewRecorder()
		endpoint.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, termreason.ServedPath+"?uid=u1", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("read %d: status %d, want 200: %s", i+1, rec.Code, rec.Body)
		}
	}
	if n := conns.Load(); n != 4 {
		t.Errorf("the apiserver saw %d connections, want 4: the cleanup client's and one for each of 3 reads", n)
	}
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
