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
	"encoding/json"
	"net"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	fencingv1alpha1 "github.com/csi-fence/fence-attacher/pkg/apis/fencing/v1alpha1"
	"github.com/csi-fence/fence-attacher/pkg/fencerecord"
	"github.com/csi-fence/fence-attacher/pkg/termreason"
)

// RecordGetter reads a node's FencingRequest.
type RecordGetter interface {
	Get(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error)
}

// reasonReadTimeout bounds the record read of one request: the helper that
// asks has a few seconds of the pod's grace period for everything.
const reasonReadTimeout = 2 * time.Second

// Bounds of the termination reason endpoint (ReasonEndpoint).
const (
	// reasonQPS and reasonBurst rate the endpoint's own API client: a
	// node's pods terminate a few at a time, and each asks once.
	reasonQPS   = 5
	reasonBurst = 10
	// maxReasonsInFlight bounds the requests served at once; more are
	// refused at once (429) rather than queued behind reads that may each
	// wait up to reasonReadTimeout.
	maxReasonsInFlight = 8
)

// ReasonEndpoint is the handler of termreason.ServedPath that the node
// role serves. The endpoint is unauthenticated, so whoever can reach it
// must not be able to slow the node's cleanups, whose writes go through the
// client built from cfg: it reads through a client of its own, built from a
// copy of cfg with its own small rate limiter, and serves at most
// maxReasonsInFlight requests at once.
//
// A live read, not an informer: the record it serves is written while the
// node is away (before the force-delete), and the hooks that ask run as
// soon as the node is back, the very moment this agent's watch may not have
// caught up after the partition; a cache would answer "no reason" there.
// The bounds keep the live reads cheap: at most reasonQPS to the apiserver,
// whatever the flood.
//
// Each read goes over a connection of its own, made for it: a connection
// that lived through the partition may be stalled when the node is back
// (what it had sent unacknowledged is retried with a backoff of seconds,
// and HTTP/2 notices a dead connection only after tens of seconds), and a
// read queued on it outlasts the helper's bound, which then gives the hook
// Unknown. Seen on a real node: the agent's first read after the heal
// waited more than 2 s on the connection its other clients shared.
func ReasonEndpoint(ctx context.Context, cfg *rest.Config, nodeName string) (http.Handler, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = reasonQPS, reasonBurst
	// A RateLimiter in cfg would be shared by every client built from
	// it; nil makes the client build its own from QPS and Burst.
	cfg.RateLimiter = nil
	freshConnections(cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return limitInFlight(ReasonHandler(ctx, fencingv1alpha1.NewClient(dyn), nodeName), maxReasonsInFlight), nil
}

// freshConnections makes the clients of cfg open a connection for each
// request and close it after: a dialer of their own gives them a transport
// of their own (client-go shares one, and its connections, between the
// configurations that differ only in rate limits), HTTP/1.1 keeps each
// connection to one request, and each request asks for its connection to
// be closed once answered. A TLS handshake per read is cheap at reasonQPS.
func freshConnections(cfg *rest.Config) {
	d := &net.Dialer{Timeout: reasonReadTimeout, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	cfg.NextProtos = []string{"http/1.1"}
	cfg.WrapTransport = transport.Wrappers(cfg.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
		return closingRoundTripper{rt}
	})
}

// closingRoundTripper asks for each request's connection to be closed
// after the response.
type closingRoundTripper struct{ http.RoundTripper }

func (c closingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Close = true
	return c.RoundTripper.RoundTrip(req)
}

// limitInFlight serves at most n requests of h at once and refuses the
// others with 429 Too Many Requests.
func limitInFlight(h http.Handler, n int) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many termination reason requests in flight", http.StatusTooManyRequests)
		}
	})
}

// ReasonHandler serves termreason.ServedPath: the termination reason of a
// pod that this system force-deleted from nodeName while the node was away,
// from the node's FencingRequest (status.forceDeletedPods), read live; the
// pod's preStop helper asks when its own pod can no longer be read. Only the
// pods of this node are served, by UID, which only the pod itself knows; a
// reason says why a pod that no longer exists was stopped, nothing more.
func ReasonHandler(ctx context.Context, records RecordGetter, nodeName string) http.Handler {
	logger := klog.FromContext(ctx).WithValues("node", nodeName)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		uid := r.URL.Query().Get("uid")
		if uid == "" {
			http.Error(w, "the pod's uid is required (?uid=)", http.StatusBadRequest)
			return
		}
		rctx, cancel := context.WithTimeout(r.Context(), reasonReadTimeout)
		defer cancel()
		fr, err := records.Get(rctx, nodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Cannot read the fencing record for a termination reason", "uid", uid)
			http.Error(w, "cannot read the FencingRequest of node "+nodeName, http.StatusServiceUnavailable)
			return
		}
		p, ok := fencerecord.ForceDeletedPodReason(fr, types.UID(uid))
		if !ok {
			logger.V(4).Info("No termination reason recorded", "uid", uid)
			http.Error(w, "no termination reason recorded for this pod on node "+nodeName, http.StatusNotFound)
			return
		}
		logger.V(2).Info("Served the termination reason of a force-deleted pod", "pod", klog.KRef(p.Namespace, p.Name), "uid", uid, "reason", p.TerminationReason)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(termreason.ServedReason{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Reason: p.TerminationReason})
	})
}
