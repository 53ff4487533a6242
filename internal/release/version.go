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

// Package release cuts a release of fence-attacher into a directory (`make
// release VERSION=vX.Y.Z`, hack/tools/release): the binaries of every
// command as archives with their checksums, the plugin kubectl-fence for
// every platform krew serves and its krew manifest, the release images as
// OCI layouts each with a CycloneDX SBOM per platform attached as a
// referrer, the Helm chart packaged at the version, the kustomize manifests
// with their images pinned to it, and the release notes taken from the
// CHANGELOG. Nothing in the work tree is edited: the versioned copies are
// made in the output directory.
package release

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"golang.org/x/mod/semver"
)

// CheckVersion accepts a release version as the tags are: v, then a
// semantic version MAJOR.MINOR.PATCH without leading zeros, with an
// optional pre-release (v0.1.0, v0.2.0-rc.1) and no build metadata, which
// image tags and Helm's chart versions would not keep.
func CheckVersion(v string) error {
	if v == "" {
		return fmt.Errorf("no version: give one, e.g. VERSION=v0.1.0")
	}
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH with an optional -pre-release (e.g. v0.1.0, v0.2.0-rc.1), no +build", v)
	}
	return nil
}

// ChartVersion is a release's Helm chart version: the version without its
// v (Helm's versions are bare semantic versions).
func ChartVersion(v string) string { return strings.TrimPrefix(v, "v") }

// CheckTree refuses to release from the git work tree at repo when it has
// changes, tracked or untracked (the binaries would not be those of the
// commit they name), or when the tag of version exists on another commit.
// It returns the commit HEAD is at.
func CheckTree(ctx context.Context, repo, version string) (string, error) {
	status, err := git(ctx, repo, "status", "--porcelain")
	if err != nil {
		return "", err
	}
	if status != "" {
		return "", fmt.Errorf("the work tree has changes, commit or stash them first:\n%s", status)
	}
	head, err := git(ctx, repo, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if tagged, err := git(ctx, repo, "rev-parse", "--verify", "--quiet", "refs/tags/"+version+"^{commit}"); err == nil && tagged != head {
		return "", fmt.Errorf("tag %s is on commit %s, not on HEAD %s", version, tagged, head)
	}
	return head, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
