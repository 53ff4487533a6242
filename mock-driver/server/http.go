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

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/csi-fence/fence-attacher/mock-driver/array"
	"github.com/csi-fence/fence-attacher/mock-driver/faults"
)

// handler serves, on every instance:
//
//	/metrics  Prometheus metrics
//	/status   the array as JSON (see Report)
//	/healthz  200 while the array's state can be read
//
// and on a node instance, the data path of a workload on that node:
//
//	/write?volume=V   one write: 200 with the volume's data counter, 403 refused, 404 unknown volume
//	/read?volume=V    one read, likewise
//	/writer?volume=V[&interval=100ms]  POST starts a background writer (replacing one),
//	                  DELETE stops it; both answer its counts as JSON
//	/writer           GET lists the running writers' counts
func (i *Instance) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(i.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		rep, err := BuildReport(i.arr, i.faults)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := i.arr.Snapshot(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if i.opts.Role == RoleNode {
		mux.HandleFunc("/write", i.ioHandler(true))
		mux.HandleFunc("/read", i.ioHandler(false))
		mux.HandleFunc("/writer", i.writerHandler)
	}
	return mux
}

func (i *Instance) ioHandler(write bool) http.HandlerFunc {
	node := i.opts.Driver.NodeID
	return func(w http.ResponseWriter, r *http.Request) {
		vol := r.URL.Query().Get("volume")
		if vol == "" {
			http.Error(w, "volume is required", http.StatusBadRequest)
			return
		}
		var err error
		var data int64
		if write {
			data, err = i.arr.WriteData(vol, node)
		} else {
			data, err = i.arr.Read(vol, node)
		}
		if err != nil {
			http.Error(w, err.Error(), httpCode(err))
			return
		}
		fmt.Fprintln(w, data)
	}
}

// httpCode maps array decisions to HTTP: refused 403, unknown volume 404,
// anything else (the state could not be read) 500.
func httpCode(err error) int {
	var ae *array.Error
	switch {
	case errors.As(err, &ae) && ae.Code == array.CodeNotFound:
		return http.StatusNotFound
	case errors.As(err, &ae):
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

func (i *Instance) writerHandler(w http.ResponseWriter, r *http.Request) {
	vol := r.URL.Query().Get("volume")
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, i.writers.List())
		return
	case http.MethodPost, http.MethodDelete:
	default:
		http.Error(w, "GET, POST or DELETE", http.StatusMethodNotAllowed)
		return
	}
	if vol == "" {
		http.Error(w, "volume is required", http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodDelete {
		st, ok := i.writers.Stop(vol)
		if !ok {
			http.Error(w, "no writer on volume "+vol, http.StatusNotFound)
			return
		}
		writeJSON(w, st)
		return
	}
	interval := 100 * time.Millisecond
	if s := r.URL.Query().Get("interval"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			http.Error(w, "interval: want a positive duration", http.StatusBadRequest)
			return
		}
		interval = d
	}
	// The writer outlives the request: it runs until stopped or until the
	// instance stops.
	writeJSON(w, i.writers.Start(context.Background(), i.arr, i.opts.Driver.NodeID, vol, interval))
}

func writeJSON(w http.ResponseWriter, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Report is the array as the status command and /status show it.
type Report struct {
	// Violations counts recorded violations per invariant (S1, S2); a test
	// asserts they are zero.
	Violations map[string]int `json:"violations"`
	// ViolationRecords are the latest violations in detail.
	ViolationRecords []array.Violation `json:"violationRecords,omitempty"`
	// RefusedUnsafe counts the refused publishes that S1 or S2 forbid
	// (publish-elsewhere, publish-quarantined): only a strict array
	// (--refuse-unsafe) refuses them; a witness one carries them out and
	// counts them under Violations.
	RefusedUnsafe map[string]int64 `json:"refusedUnsafe"`
	// Refused counts every request the array refused, by kind.
	Refused   map[string]int64         `json:"refused"`
	Overrides array.Overrides          `json:"overrides"`
	Faults    map[string]string        `json:"faults,omitempty"`
	Nodes     map[string]*array.Node   `json:"nodes"`
	Volumes   map[string]*array.Volume `json:"volumes"`
}

// BuildReport reads the array and the faults.
func BuildReport(arr *array.Array, store *faults.Store) (*Report, error) {
	s, err := arr.Snapshot()
	if err != nil {
		return nil, err
	}
	fs, err := store.List()
	if err != nil {
		return nil, err
	}
	rep := &Report{Violations: s.CountViolations(), ViolationRecords: s.Violations, RefusedUnsafe: s.RefusedUnsafe(), Refused: s.Refused,
		Overrides: s.Overrides, Nodes: s.Nodes, Volumes: s.Volumes}
	if len(fs) > 0 {
		rep.Faults = map[string]string{}
		for k, f := range fs {
			rep.Faults[k] = f.String()
		}
	}
	return rep, nil
}
