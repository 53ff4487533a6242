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

// Package faults injects errors, latency and lies into the mock driver's
// RPCs. Faults are set by flags and changeable while the driver runs: they
// live in a control file in the state directory that every instance re-reads
// on every call, so an end-to-end test can make a driver slow, flaky or
// lying mid-run (`csi-fence-mock fault ...`).
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Fault is what happens to calls of one RPC method.
type Fault struct {
	// Code is the gRPC code to fail with (OK: no error).
	Code codes.Code `json:"code,omitempty"`
	// Latency is added before the call is handled (or failed).
	Latency time.Duration `json:"latency,omitempty"`
	// AnswerDelay holds the answer of a call that was handled: its effect
	// is applied at once and its caller learns of it that much later, or
	// never if it gives up or dies meanwhile (a fence applied whose answer
	// was lost).
	AnswerDelay time.Duration `json:"answerDelay,omitempty"`
	// Probability of applying the fault to a call, in (0, 1]; 0 means 1.
	Probability float64 `json:"probability,omitempty"`
	// Count is how many more calls get the fault; 0 means unlimited.
	Count int `json:"count,omitempty"`
	// Node limits the fault to the node instance of that node ID.
	Node string `json:"node,omitempty"`
	// Lie answers success without doing anything: a driver that says it did
	// what it did not.
	Lie bool `json:"lie,omitempty"`
}

func (f Fault) empty() bool {
	return f.Code == codes.OK && f.Latency == 0 && f.AnswerDelay == 0 && !f.Lie
}

// String is the Parse syntax of f (without the method).
func (f Fault) String() string {
	var parts []string
	if f.Code != codes.OK {
		parts = append(parts, "code="+f.Code.String())
	}
	if f.Latency > 0 {
		parts = append(parts, "latency="+f.Latency.String())
	}
	if f.AnswerDelay > 0 {
		parts = append(parts, "answer-delay="+f.AnswerDelay.String())
	}
	if f.Probability > 0 && f.Probability < 1 {
		parts = append(parts, "prob="+strconv.FormatFloat(f.Probability, 'g', -1, 64))
	}
	if f.Count > 0 {
		parts = append(parts, "count="+strconv.Itoa(f.Count))
	}
	if f.Node != "" {
		parts = append(parts, "node="+f.Node)
	}
	if f.Lie {
		parts = append(parts, "lie")
	}
	return strings.Join(parts, ",")
}

// lies are the responses a lie answers with, by method: the calls whose
// success means "I changed the state of the volume".
var lies = map[string]func() proto.Message{
	"ControllerPublishVolume":   func() proto.Message { return &csi.ControllerPublishVolumeResponse{} },
	"ControllerUnpublishVolume": func() proto.Message { return &csi.ControllerUnpublishVolumeResponse{} },
	"NodeStageVolume":           func() proto.Message { return &csi.NodeStageVolumeResponse{} },
	"NodeUnstageVolume":         func() proto.Message { return &csi.NodeUnstageVolumeResponse{} },
	"NodePublishVolume":         func() proto.Message { return &csi.NodePublishVolumeResponse{} },
	"NodeUnpublishVolume":       func() proto.Message { return &csi.NodeUnpublishVolumeResponse{} },
	"DeleteVolume":              func() proto.Message { return &csi.DeleteVolumeResponse{} },
}

// Methods are the short names of the CSI methods the mock serves (Identity,
// Controller, Node), the only ones a fault can apply to.
var Methods = func() map[string]bool {
	m := map[string]bool{}
	for _, sd := range []grpc.ServiceDesc{csi.Identity_ServiceDesc, csi.Controller_ServiceDesc, csi.Node_ServiceDesc} {
		for _, md := range sd.Methods {
			m[md.MethodName] = true
		}
	}
	return m
}()

// Parse reads "Method:code=Unavailable,latency=2s,prob=0.5,count=3,node=N,lie".
// Method is the short RPC name, e.g. ControllerUnpublishVolume; a name that
// is not one of Methods is an error (a misspelt fault would never fire).
// Codes are gRPC code names in any case (Unavailable, FAILED_PRECONDITION) or
// numbers. "Method:off" parses to an empty fault, which Set treats as
// removal.
func Parse(spec string) (string, Fault, error) {
	method, rest, ok := strings.Cut(spec, ":")
	if !ok || method == "" || strings.ContainsAny(method, "/@ ") {
		return "", Fault{}, fmt.Errorf("fault %q: want Method:key=value,... (e.g. ControllerUnpublishVolume:code=Unavailable,count=3)", spec)
	}
	if !Methods[method] {
		return "", Fault{}, fmt.Errorf("fault %q: unknown CSI method %q; want one of: %s", spec, method, strings.Join(sortedKeys(Methods), ", "))
	}
	var f Fault
	for _, kv := range strings.Split(rest, ",") {
		if kv == "" || kv == "off" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "code":
			f.Code, err = ParseCode(v)
		case "latency":
			f.Latency, err = time.ParseDuration(v)
			if err == nil && f.Latency < 0 {
				err = fmt.Errorf("latency %v < 0", f.Latency)
			}
		case "answer-delay":
			f.AnswerDelay, err = time.ParseDuration(v)
			if err == nil && f.AnswerDelay < 0 {
				err = fmt.Errorf("answer-delay %v < 0", f.AnswerDelay)
			}
		case "prob", "probability":
			f.Probability, err = strconv.ParseFloat(v, 64)
			if err == nil && (f.Probability <= 0 || f.Probability > 1) {
				err = fmt.Errorf("probability %v not in (0,1]", f.Probability)
			}
		case "count":
			f.Count, err = strconv.Atoi(v)
			if err == nil && f.Count < 0 {
				err = fmt.Errorf("count %d < 0", f.Count)
			}
		case "node":
			f.Node = v
			if v == "" {
				err = errors.New("empty node")
			}
		case "lie":
			f.Lie = v == "" || v == "true"
			if v != "" && v != "true" && v != "false" {
				err = fmt.Errorf("lie=%q: want lie, lie=true or lie=false", v)
			}
		default:
			err = fmt.Errorf("unknown key %q (want code, latency, answer-delay, prob, count, node, lie)", k)
		}
		if err != nil {
			return "", Fault{}, fmt.Errorf("fault %q: %w", spec, err)
		}
	}
	if f.Lie {
		if _, ok := lies[method]; !ok {
			return "", Fault{}, fmt.Errorf("fault %q: lie is supported for %s only", spec, strings.Join(sortedKeys(lies), ", "))
		}
		if f.Code != codes.OK {
			return "", Fault{}, fmt.Errorf("fault %q: a lie answers success, it cannot also fail with %s", spec, f.Code)
		}
	}
	if f.AnswerDelay > 0 && (f.Code != codes.OK || f.Lie) {
		return "", Fault{}, fmt.Errorf("fault %q: answer-delay holds the answer of a call that was handled; a failed or lying call is not handled", spec)
	}
	return method, f, nil
}

// ParseCode reads a gRPC code by name (any case, with or without
// underscores) or number.
func ParseCode(s string) (codes.Code, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n <= 16 {
		return codes.Code(n), nil
	}
	want := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if strings.ToLower(c.String()) == want {
			return c, nil
		}
	}
	return codes.OK, fmt.Errorf("unknown gRPC code %q", s)
}

// Store keeps the faults in dir/faults.json, shared by every instance.
type Store struct {
	file string
	rand func() float64
}

// NewStore returns the store of state directory dir.
func NewStore(dir string) *Store {
	return &Store{file: filepath.Join(dir, "faults.json"), rand: rand.Float64}
}

// WithRand returns a store on the same file that draws probabilities from r.
func (s *Store) WithRand(r func() float64) *Store { return &Store{file: s.file, rand: r} }

func key(method, node string) string {
	if node == "" {
		return method
	}
	return method + "@" + node
}

// Set replaces the fault of method (for f.Node, if set); an empty fault (no
// code, latency or lie) removes it.
func (s *Store) Set(method string, f Fault) error {
	return s.update(func(m map[string]Fault) {
		if f.empty() {
			delete(m, key(method, f.Node))
		} else {
			m[key(method, f.Node)] = f
		}
	})
}

// Clear removes every fault.
func (s *Store) Clear() error {
	return s.update(func(m map[string]Fault) { clear(m) })
}

// List returns the faults as "Method[@node]" -> fault.
func (s *Store) List() (map[string]Fault, error) {
	var out map[string]Fault
	err := s.locked(syscall.LOCK_SH, func(m map[string]Fault) bool {
		out = m
		return false
	})
	return out, err
}

// Take returns the fault to apply to one call of method on the instance of
// node ("" for the controller), consuming one of its count. A node's own
// fault wins over the fault for every instance.
func (s *Store) Take(method, node string) (Fault, bool, error) {
	var out Fault
	applied := false
	err := s.update(func(m map[string]Fault) {
		k := key(method, node)
		f, ok := m[k]
		if !ok || node == "" {
			k = method
			if f, ok = m[k]; !ok {
				return
			}
		}
		if f.Probability > 0 && f.Probability < 1 && s.rand() >= f.Probability {
			return
		}
		out, applied = f, true
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				delete(m, k)
			} else {
				m[k] = f
			}
		}
	})
	return out, applied, err
}

func (s *Store) update(fn func(map[string]Fault)) error {
	return s.locked(syscall.LOCK_EX, func(m map[string]Fault) bool {
		before, _ := json.Marshal(m)
		fn(m)
		after, _ := json.Marshal(m)
		return string(before) != string(after)
	})
}

func (s *Store) locked(how int, fn func(map[string]Fault) bool) error {
	lf, err := os.OpenFile(s.file+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	for {
		err = syscall.Flock(int(lf.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("locking fault file: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) //nolint:errcheck
	m := map[string]Fault{}
	b, err := os.ReadFile(s.file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("corrupt fault file %s: %w", s.file, err)
		}
	}
	if !fn(m) {
		return nil
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.file + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.file)
}

// Observer is told of every fault applied.
type Observer func(method string, f Fault)

// Interceptor applies the store's faults to every unary call of the
// controller instance. Methods are named by their short name, e.g.
// "ControllerUnpublishVolume".
func (s *Store) Interceptor() grpc.UnaryServerInterceptor { return s.InterceptorFor("", nil) }

// InterceptorFor applies the store's faults to every unary call of the
// instance of node ("" for the controller) and tells observe (if not nil).
// A fault file that cannot be read fails the call with Internal rather than
// letting it through unchecked.
func (s *Store) InterceptorFor(node string, observe Observer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req interface{}, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
		method := path.Base(info.FullMethod)
		f, ok, err := s.Take(method, node)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "fault injection: %v", err)
		}
		if !ok {
			return handler(ctx, req)
		}
		if observe != nil {
			observe(method, f)
		}
		if f.Latency > 0 {
			t := time.NewTimer(f.Latency)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		switch {
		case f.Code != codes.OK:
			return nil, status.Errorf(f.Code, "injected fault in %s", method)
		case f.Lie:
			if lie, ok := lies[method]; ok {
				return lie(), nil
			}
			return nil, status.Errorf(codes.Internal, "fault injection: cannot lie in %s", method)
		}
		resp, err := handler(ctx, req)
		if f.AnswerDelay > 0 {
			t := time.NewTimer(f.AnswerDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				// Applied all the same: only the answer is lost.
				t.Stop()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		return resp, err
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
