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

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// testPlugin is the plugin run in the test: its streams, and fakes for
// the cluster.
type testPlugin struct {
	f           *factory
	out, errOut *bytes.Buffer
	// flags are the kubeconfig flags of the last verb that connected.
	flags *genericclioptions.ConfigFlags
}

// newTestPlugin connects the verbs to kube and dyn (either may be nil),
// reads stdin from stdin, and points KUBECONFIG at no file: the
// namespace is -n or "default".
func newTestPlugin(t *testing.T, kube kubernetes.Interface, dyn dynamic.Interface, stdin string) *testPlugin {
	t.Helper()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "no-kubeconfig"))
	if kube == nil {
		kube = fake.NewClientset()
	}
	if dyn == nil {
		dyn = fakeDynamic()
	}
	p := &testPlugin{out: &bytes.Buffer{}, errOut: &bytes.Buffer{}}
	p.f = &factory{
		IOStreams: genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: p.out, ErrOut: p.errOut},
		clients: func(flags *genericclioptions.ConfigFlags) (kubernetes.Interface, dynamic.Interface, error) {
			p.flags = flags
			return kube, dyn, nil
		},
		now: func() time.Time { return time.Date(2026, 11, 25, 10, 1, 0, 0, time.UTC) },
	}
	return p
}

// execute runs `kubectl fence args...` in the test.
func (p *testPlugin) execute(args ...string) error {
	root := newRootCommand(p.f)
	root.SetArgs(args)
	return root.ExecuteContext(context.Background())
}
