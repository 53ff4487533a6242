//go:build tools

// Package tools records the containerd commands the e2e framework's real
// nodes run: the daemon with its CRI plugin, ctr (image import) and the runc
// shim. hack/node-binaries.sh builds them from the version pinned here.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
