// Command writer is the small workload of the e2e framework's real nodes: it
// appends a numbered line to a file every interval and logs every write to
// stdout, and every error to stderr without stopping, so that a test reads
// from the container's log whether (and until when) its writes succeeded.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	path := flag.String("path", "/data/writes.log", "file to append to")
	interval := flag.Duration("interval", time.Second, "time between two writes")
	flag.Parse()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		if err := write(*path, n); err != nil {
			fmt.Fprintf(os.Stderr, "write %d to %s failed: %v\n", n, *path, err)
		} else {
			fmt.Printf("write %d to %s ok\n", n, *path)
		}
		select {
		case s := <-stop:
			fmt.Printf("writer: %v, exiting after %d writes\n", s, n)
			return
		case <-tick.C:
		}
	}
}

// write appends one line and syncs it, so that a write reported ok has
// reached the file system (and, on a real volume, its storage).
func write(path string, n int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%d %s\n", n, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
