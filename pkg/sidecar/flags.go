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

package sidecar

import (
	"flag"
	"sync"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// Flags are the values behind every flag of csi-fence-attacher.
type Flags struct {
	Logging   *logsapi.LoggingConfiguration
	Options   *Options
	Node      *NodeOptions
	Registrar *RegistrarOptions
	Failover  *FailoverOptions
}

// RegisterFlags registers on fs every flag csi-fence-attacher accepts: the
// logging flags, csi-lib-utils' common sidecar flags (bound to
// standardflags.Configuration, as in every kubernetes-csi sidecar), ours, and
// --feature-gates on fg. main and NewFlagSet share it, so that a manifest
// check accepts exactly what the binary does.
func RegisterFlags(fs *flag.FlagSet, fg featuregate.MutableFeatureGate) Flags {
	f := Flags{Logging: logsapi.NewLoggingConfiguration(), Options: &Options{}, Node: &NodeOptions{}, Registrar: &RegistrarOptions{}, Failover: &FailoverOptions{}}
	logsapi.AddGoFlags(f.Logging, fs)
	standardflags.RegisterCommonFlags(fs)
	f.Options.AddFlags(fs)
	f.Node.AddFlags(fs)
	f.Registrar.AddFlags(fs)
	f.Failover.AddFlags(fs)
	AddFeatureGatesFlag(fs, fg)
	return f
}

var (
	checkOnce  sync.Once
	checkFlags *flag.FlagSet
	checkErr   error
)

// NewFlagSet returns a flag set with every flag csi-fence-attacher accepts,
// for tools that check a manifest's arguments without running the sidecar
// (kubectl fence check-manifests). The flags are registered once per
// process (csi-lib-utils binds them to its global Configuration, and
// registers --metrics-path on flag.CommandLine whatever the set) and
// copied into each new set: parsing it changes those globals and the
// process's feature gate, so never call it in the sidecar itself.
func NewFlagSet() (*flag.FlagSet, error) {
	checkOnce.Do(func() {
		fg, err := NewFeatureGate()
		if err != nil {
			checkErr = err
			return
		}
		checkFlags = flag.NewFlagSet("csi-fence-attacher", flag.ContinueOnError)
		RegisterFlags(checkFlags, fg)
		if f := flag.CommandLine.Lookup("metrics-path"); f != nil && checkFlags.Lookup("metrics-path") == nil {
			checkFlags.Var(f.Value, f.Name, f.Usage)
		}
	})
	if checkErr != nil {
		return nil, checkErr
	}
	fs := flag.NewFlagSet("csi-fence-attacher", flag.ContinueOnError)
	checkFlags.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	return fs, nil
}
