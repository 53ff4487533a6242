//go:build tools

// Package tools records the etcd server built for the e2e tests.
package tools

import _ "go.etcd.io/etcd/server/v3"
