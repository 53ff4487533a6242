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

// Command images builds fence-attacher's release images without a container
// engine (`make images`): static binaries for every platform, one
// reproducible multi-platform OCI image index per command, written as OCI
// layout directories (internal/imagebuild.Release). It prints one line per
// image: its reference, the index's digest and its directory.
//
// It lives in hack/tools, not cmd/, because it is a build tool of this
// repository rather than a binary the project ships (cmd/ is what `make
// build` builds and the images contain).
//
//	go run ./hack/tools/images --version v0.1.0 --commit $(git rev-parse HEAD) \
//		--platforms linux/amd64,linux/arm64 --out _output/images csi-fence-attacher csi-fence-mock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/csi-fence/fence-attacher/internal/imagebuild"
	"github.com/csi-fence/fence-attacher/pkg/version"
)

func main() {
	var opts imagebuild.ReleaseOptions
	var platforms string
	flag.StringVar(&opts.Version, "version", "", "the release, stamped into pkg/version and the images' tag (default pkg/version's Dev, "+version.Dev+")")
	flag.StringVar(&opts.Commit, "commit", "", "the git commit, stamped into pkg/version and the revision label")
	flag.StringVar(&opts.Registry, "registry", "ghcr.io/csi-fence", "the images' registry and path")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch of the images")
	flag.StringVar(&opts.OutDir, "out", "_output/images", "directory of the binaries and OCI layouts")
	flag.StringVar(&opts.RepoRoot, "repo", ".", "the module's root")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] CMD... (commands of cmd/)\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	opts.Cmds = flag.Args()
	opts.Platforms = strings.Split(platforms, ",")
	if opts.Version == "" {
		opts.Version = version.Dev
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org) moves the images' fixed
	// timestamp; the Unix epoch otherwise.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "SOURCE_DATE_EPOCH:", err)
			os.Exit(2)
		}
		opts.Created = time.Unix(sec, 0).UTC()
	}
	if len(opts.Cmds) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	built, err := imagebuild.Release(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, b := range built {
		fmt.Printf("%s@%s %s\n", b.Ref, b.Digest, b.Dir)
	}
}
