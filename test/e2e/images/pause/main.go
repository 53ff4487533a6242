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

// Command pause is the sandbox ("pause") container of the e2e framework's
// real nodes: it holds the pod's namespaces and does nothing until it is told
// to stop. It is built here as a static binary and packed into an image
// (framework.BuildImages), since no image registry is reachable.
//
// It reaps nothing: the pods of the e2e tests do not share their PID
// namespace, so no orphan is ever re-parented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s := <-sigs
	fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
}
