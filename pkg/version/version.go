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

// Package version is the release of fence-attacher a binary was built from.
//
// `make build` (release-tools/build.make) stamps both values with -ldflags:
//
//	-X github.com/csi-fence/fence-attacher/pkg/version.version=v0.1.0
//	-X github.com/csi-fence/fence-attacher/pkg/version.commit=<git commit>
//
// A plain `go build` or `go install` stamps nothing: the version is then
// Dev, marked as a development build, and the commit is the one the Go
// toolchain recorded in the binary (vcs.revision), when it built from a
// git checkout.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Dev is the version of a binary built without the release's -ldflags: the
// next release, as a semantic-version pre-release, so that it sorts before
// it and never passes for it. Bumped right after each release is tagged
// (CONTRIBUTING.md).
const Dev = "v0.1.0-dev"

// Set by the linker (-X); empty when it was not.
var (
	version string
	commit  string
)

// Version is the semantic version of the build, e.g. v0.1.0.
func Version() string {
	if version != "" {
		return version
	}
	return Dev
}

// Commit is the git commit the binary was built from, "unknown" when neither
// the build nor the Go toolchain recorded it.
func Commit() string {
	if commit != "" {
		return commit
	}
	return commitFrom(debug.ReadBuildInfo())
}

// commitFrom reads the commit the Go toolchain stamps into binaries built in
// a git checkout (-buildvcs, on by default for go build).
func commitFrom(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "unknown"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String is what --version prints after the program's name:
// "v0.1.0 (commit 0123abc, go1.26.0 linux/amd64)".
func String() string {
	return fmt.Sprintf("%s (commit %s, %s %s/%s)", Version(), Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
