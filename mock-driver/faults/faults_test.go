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

package faults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		method  string
		want    Fault
		wantErr string
	}{
		{spec: "ControllerUnpublishVolume:code=Unavailable,count=3,latency=2s,prob=0.5", method: "ControllerUnpublishVolume",
			want: Fault{Code: codes.Unavailable, Count: 3, Latency: 2 * time.Second, Probability: 0.5}},
		{spec: "NodeUnstageVolume:code=FAILED_PRECONDITION,node=n1", method: "NodeUnstageVolume", want: Fault{Code: codes.FailedPrecondition, Node: "n1"}},
		{spec: "NodeUnstageVolume:code=9", method: "NodeUnstageVolume", want: Fault{Code: codes.FailedPrecondition}},
		{spec: "Probe:code=deadlineexceeded", method: "Probe", want: Fault{Code: codes.DeadlineExceeded}},
		{spec: "ControllerUnpublishVolume:lie", method: "ControllerUnpublishVolume", want: Fault{Lie: true}},
		{spec: "ControllerUnpublishVolume:lie=true,count=1", method: "ControllerUnpublishVolume", want: Fault{Lie: true, Count: 1}},
		{spec: "ControllerPublishVolume:off", method: "ControllerPublishVolume", want: Fault{}},
		{spec: "ControllerPublishVolume", wantErr: "want Method:"},
		{spec: ":code=Internal", wantErr: "want Method:"},
		{spec: "Probe:code=Nope", wantErr: "unknown gRPC code"},
		{spec: "Probe:latency=-1s", wantErr: "< 0"},
		{spec: "Probe:prob=1.5", wantErr: "not in (0,1]"},
		{spec: "Probe:prob=0", wantErr: "not in (0,1]"},
		{spec: "Probe:count=-2", wantErr: "count -2"},
		{spec: "Probe:colour=red", wantErr: "unknown key"},
		{spec: "CreateVolume:lie", wantErr: "lie is supported for"},
		{spec: "ControlerUnpublishVolume:code=Internal", wantErr: `unknown CSI method "ControlerUnpublishVolume"; want one of: ControllerExpandVolume, `},
		{spec: "csi.v1.Controller/ControllerPublishVolume:code=Internal", wantErr: "want Method:"},
		{spec: "Ping:off", wantErr: "unknown CSI method"},
		{spec: "DeleteVolume:lie,code=Internal", wantErr: "cannot also fail"},
		{spec: "DeleteVolume:lie=maybe", wantErr: "want lie"},
		{spec: "Probe:node=", wantErr: "empty node"},
		{spec: "ControllerUnpublishVolume:answer-delay=8s,count=1", method: "ControllerUnpublishVolume", want: Fault{AnswerDelay: 8 * time.Second, Count: 1}},
		{spec: "Probe:answer-delay=-1s", wantErr: "answer-delay -1s < 0"},
		{spec: "Probe:answer-delay=1s,code=Internal", wantErr: "is not handled"},
		{spec: "DeleteVolume:answer-delay=1s,lie", wantErr: "is not handled"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			m, f, err := Parse(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || m != tc.method || f != tc.want {
				t.Fatalf("got %q %+v %v, want %q %+v", m, f, err, tc.method, tc.want)
			}
			// String round-trips through Parse.
			if _, back, err := Parse(m + ":" + f.String()); err != nil || back != f {
				t.Fatalf("round trip of %q: %+v %v", f.String(), back, err)
			}
		})
	}
}

func TestTake(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Set("A", Fault{Code: codes.Unavailable, Count: 2}))
	must(s.Set("B", Fault{Code: codes.Internal}))
	must(s.Set("B", Fault{Code: codes.Aborted, Node: "n1"}))
	// Another store on the same directory (another instance) sees and
	// consumes the same faults.
	other := NewStore(dir)
	type take struct {
		method, node string
		applied      bool
		code         codes.Code
	}
	for i, tk := range []take{
		{"A", "", true, codes.Unavailable},
		{"A", "n1", true, codes.Unavailable}, // a fault for every instance applies to nodes too
		{"A", "", false, codes.OK},           // count used up
		{"B", "n1", true, codes.Aborted},     // the node's own fault wins
		{"B", "n2", true, codes.Internal},
		{"B", "", true, codes.Internal}, // the controller never gets a node's fault
		{"C", "", false, codes.OK},
	} {
		st := s
		if i%2 == 1 {
			st = other
		}
		f, ok, err := st.Take(tk.method, tk.node)
		must(err)
		if ok != tk.applied || f.Code != tk.code {
			t.Fatalf("take %d %+v: got %v %v", i, tk, ok, f.Code)
		}
	}
	list, err := s.List()
	must(err)
	if _, ok := list["A"]; ok || len(list) != 2 {
		t.Fatalf("faults left: %v", list)
	}
	must(s.Set("B", Fault{Node: "n1"})) // empty: removes
	must(s.Clear())
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("after Clear: %v", list)
	}

	// Probability: the fault applies when the draw is below it, and a count
	// is consumed only by applied faults.
	draws := []float64{0.9, 0.1, 0.6, 0.2}
	ps := s.WithRand(func() float64 { d := draws[0]; draws = draws[1:]; return d })
	must(ps.Set("P", Fault{Code: codes.Internal, Probability: 0.5, Count: 2}))
	var got []bool
	for range 4 {
		_, ok, err := ps.Take("P", "")
		must(err)
		got = append(got, ok)
	}
	if want := []bool{false, true, false, true}; !equal(got, want) {
		t.Fatalf("probabilistic takes: got %v, want %v", got, want)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("count not consumed: %v", list)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInterceptor(t *testing.T) {
	s := NewStore(t.TempDir())
	var observed []string
	icpt := s.InterceptorFor("n1", func(m string, f Fault) { observed = append(observed, m+":"+f.String()) })
	called := 0
	handler := func(context.Context, interface{}) (interface{}, error) {
		called++
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	info := func(m string) *grpc.UnaryServerInfo { return &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/" + m} }
	call := func(ctx context.Context, m string) (interface{}, error) { return icpt(ctx, nil, info(m), handler) }

	if _, err := call(context.Background(), "NodeUnpublishVolume"); err != nil || called != 1 {
		t.Fatalf("no fault: %v, handler called %d times", err, called)
	}
	if err := s.Set("NodeUnpublishVolume", Fault{Code: codes.Unavailable, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := call(context.Background(), "NodeUnpublishVolume"); status.Code(err) != codes.Unavailable || called != 1 {
		t.Fatalf("injected error: %v, handler called %d times", err, called)
	}
	if err := s.Set("NodeUnpublishVolume", Fault{Lie: true}); err != nil {
		t.Fatal(err)
	}
	if rsp, err := call(context.Background(), "NodeUnpublishVolume"); err != nil || rsp == nil || called != 1 {
		t.Fatalf("lie: %v %v, handler called %d times", rsp, err, called)
	}
	// Latency honours the caller's deadline.
	if err := s.Set("NodeUnpublishVolume", Fault{Latency: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := call(ctx, "NodeUnpublishVolume"); status.Code(err) != codes.DeadlineExceeded || called != 1 {
		t.Fatalf("latency past the deadline: %v, handler called %d times", err, called)
	}
	if err := s.Set("NodeUnpublishVolume", Fault{Latency: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := call(context.Background(), "NodeUnpublishVolume"); err != nil || called != 2 || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("latency only: %v, handler called %d times after %v", err, called, time.Since(start))
	}
	// An answer delay applies the call at once and holds only its answer:
	// a caller that gives up has had its call applied all the same.
	if err := s.Set("NodeUnpublishVolume", Fault{AnswerDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := call(ctx, "NodeUnpublishVolume"); status.Code(err) != codes.DeadlineExceeded || called != 3 {
		t.Fatalf("answer delay past the deadline: %v, handler called %d times", err, called)
	}
	if err := s.Set("NodeUnpublishVolume", Fault{AnswerDelay: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := call(context.Background(), "NodeUnpublishVolume"); err != nil || called != 4 || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("answer delay only: %v, handler called %d times after %v", err, called, time.Since(start))
	}
	if len(observed) != 6 {
		t.Fatalf("observed %v", observed)
	}
	// A corrupt control file fails calls rather than letting them through.
	if err := writeFile(s.file, "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := call(context.Background(), "NodeUnpublishVolume"); status.Code(err) != codes.Internal || called != 4 {
		t.Fatalf("corrupt fault file: %v", err)
	}
}

func writeFile(name, content string) error { return os.WriteFile(name, []byte(content), 0o644) }
