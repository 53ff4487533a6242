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

// Command release cuts a release of fence-attacher (`make release
// VERSION=vX.Y.Z`, internal/release): it refuses a malformed version or a
// work tree with changes, then writes the binaries, archives, SBOMs,
// images, chart, manifests, krew manifest and release notes of the version
// into one directory, and prints what it wrote.
//
// It lives in hack/tools, not cmd/, because it is a build tool of this
// repository rather than a binary the project ships.
//
//	go run ./hack/tools/release --version v0.1.0 --out dist \
//		--cmds 'csi-fence-attacher kubectl-fence' --image-cmds csi-fence-attacher
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

	"github.com/csi-fence/fence-attacher/internal/release"
)

func main() {
	var opts release.Options
	var cmds, imageCmds, platforms, pluginPlatforms string
	var allowDirty bool
	flag.StringVar(&opts.Version, "version", "", "the release, vMAJOR.MINOR.PATCH[-pre-release]")
	flag.StringVar(&cmds, "cmds", "", "space-separated commands of cmd/ to release as binaries")
	flag.StringVar(&imageCmds, "image-cmds", "", "space-separated commands (among --cmds) to release as images too")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch of every binary and image")
	flag.StringVar(&opts.Plugin, "plugin", "kubectl-fence", "the kubectl plugin (among --cmds), released with a krew manifest")
	flag.StringVar(&pluginPlatforms, "plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64,windows/arm64", "comma-separated os/arch of the plugin")
	flag.StringVar(&opts.Registry, "registry", "ghcr.io/csi-fence", "the images' registry and path")
	flag.StringVar(&opts.DownloadURL, "download-url", "", "where the archives are published, the krew manifest's base URI (default the version's GitHub release)")
	flag.StringVar(&opts.OutDir, "out", "dist", "the release's directory, replaced if it holds an earlier release")
	flag.StringVar(&opts.RepoRoot, "repo", ".", "the repository's root")
	flag.BoolVar(&allowDirty, "allow-dirty", false, "release from a work tree with changes (never for a published release)")
	flag.Parse()
	opts.Cmds = strings.Fields(cmds)
	opts.ImageCmds = strings.Fields(imageCmds)
	opts.Platforms = strings.Split(platforms, ",")
	if pluginPlatforms != "" {
		opts.PluginPlatforms = strings.Split(pluginPlatforms, ",")
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail(fmt.Errorf("SOURCE_DATE_EPOCH: %w", err))
		}
		opts.Created = time.Unix(sec, 0).UTC()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := release.CheckVersion(opts.Version); err != nil {
		fail(err)
	}
	commit, err := release.CheckTree(ctx, opts.RepoRoot, opts.Version)
	if err != nil && !allowDirty {
		fail(err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release: warning:", err)
		commit = ""
	}
	opts.Commit = commit
	res, err := release.Run(ctx, opts)
	if err != nil {
		fail(err)
	}
	for _, b := range res.Images {
		fmt.Printf("%s@%s %s\n", b.Ref, b.Digest, b.Dir)
	}
	for _, f := range res.Files {
		fmt.Println(opts.OutDir + "/" + f)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
