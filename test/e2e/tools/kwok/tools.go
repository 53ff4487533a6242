//go:build tools

// Package tools records the kwok command built for the e2e tests.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
