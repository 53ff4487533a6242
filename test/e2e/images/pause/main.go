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
