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
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/csi-fence/fence-attacher/pkg/fence"
)

// A node-side teardown is logged at V(2) with its volume, path and force
// field, done or failed; the e2e test of a real node's return reads these
// lines from the node plugin's log.
func TestLogRPCTeardown(t *testing.T) {
	unpublish := &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/k/pods/u/volumes/kubernetes.io~csi/pv/mount"}
	fence.SetNodeUnpublishForce(unpublish, true)
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/k/plugins/kubernetes.io/csi/d/h/globalmount"}
	for _, tc := range []struct {
		name string
		req  interface{}
		err  error
		want []string
	}{
		{"forced unpublish done", unpublish, nil,
			[]string{`"GRPC done"`, `method="NodeUnpublishVolume"`, `volumeID="vol-1"`, `path="/k/pods/u/volumes/kubernetes.io~csi/pv/mount"`, ` force=true`}},
		{"plain unstage refused", unstage, status.Error(codes.FailedPrecondition, "fenced"),
			[]string{`"GRPC failed"`, `method="NodeUnstageVolume"`, `path="/k/plugins/kubernetes.io/csi/d/h/globalmount"`, ` force=false`, `code="FailedPrecondition"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// klog's text format, as the node plugin's container logs it.
			var out bytes.Buffer
			logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2), textlogger.Output(&out)))
			ctx := klog.NewContext(context.Background(), logger)
			method := map[bool]string{true: "/csi.v1.Node/NodeUnpublishVolume", false: "/csi.v1.Node/NodeUnstageVolume"}[tc.req == unpublish]
			_, _ = logRPC(ctx, tc.req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, interface{}) (interface{}, error) {
				return nil, tc.err
			})
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 1 || lines[0] == "" {
				t.Fatalf("logged %d lines at V(2), want 1: %q", len(lines), lines)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("log line lacks %s: %s", w, lines[0])
				}
			}
		})
	}
}
