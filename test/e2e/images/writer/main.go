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

// Command writer is the small workload of the e2e framework's real nodes: it
// appends a numbered, checksummed record (package records) to a file every
// interval with ordinary syscalls (open, one write, fsync, close), and logs
// every write to stdout, an error with its errno, without stopping, so that
// a test reads from the container's log whether (and until when) its writes
// succeeded, and from the volume whether what reached it is intact.
//
// It resumes the numbering after the last record the file holds, as an
// application recovering its log does; a write that failed is tried again
// with the same number at the next interval.
//
// `writer -prestop` is its preStop hook: it writes one line to the log of
// the container it runs in (the standard output of the container's first
// process, /proc/1/fd/1), saying whether the termination reason variable is
// set and to what. A hook's own output never reaches the container's log
// (the kubelet keeps it only when the hook fails), so this is how a test
// reads, from the node's log directory, what a real kubelet's hook got.
// With -prestop-done=FILE the hook then creates FILE, and the writer, given
// the same flag, does not end on SIGTERM before FILE exists: as an
// application whose shutdown waits for the work its preStop hook started
// (a store handing its data off), it keeps the container up for its hook
// until the kubelet's SIGKILL, however little time the kubelet gave the
// hook itself.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/csi-fence/fence-attacher/test/e2e/images/writer/records"
)

func main() {
	path := flag.String("path", "/data/writes.log", "file to append to")
	block := flag.Bool("block", false, "path is a block device: record N goes in its N-th slot of records.SlotSize bytes")
	interval := flag.Duration("interval", time.Second, "time between two writes")
	node := flag.String("node", os.Getenv("NODE_NAME"), "node name written in each record (default $NODE_NAME, else the host name)")
	prestop := flag.Bool("prestop", false, "run as the container's preStop hook: log the termination reason to the container's log and exit")
	reasonEnv := flag.String("reason-env", "KUBE_POD_TERM_REASON", "with -prestop: the variable that carries the termination reason")
	done := flag.String("prestop-done", "", "with -prestop: file to create once the reason is logged; without: on SIGTERM, wait for that file before exiting")
	flag.Parse()
	if *prestop {
		if err := logPreStop(*reasonEnv, *done); err != nil {
			fmt.Fprintf(os.Stderr, "writer -prestop: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *node == "" {
		*node, _ = os.Hostname()
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	rw := fileLog
	if *block {
		rw = deviceLog
	}
	seq := resume(*path, rw)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		if err := rw.write(*path, records.Record{Seq: seq, Node: *node, Time: time.Now()}); err != nil {
			fmt.Printf("write %d to %s failed: errno=%s: %v\n", seq, *path, errnoOf(err), err)
		} else {
			fmt.Printf("write %d to %s ok\n", seq, *path)
			seq++
		}
		select {
		case s := <-stop:
			if *done != "" {
				fmt.Printf("writer: %v, waiting for the preStop hook (%s)\n", s, *done)
				waitFile(*done)
			}
			fmt.Printf("writer: %v, exiting after %d attempts\n", s, n)
			return
		case <-tick.C:
		}
	}
}

// preStopLinePrefix begins the line logPreStop writes:
//
//	preStop: KUBE_POD_TERM_REASON="Eviction" (set) uid=...
//	preStop: KUBE_POD_TERM_REASON="" (unset) uid=...
const preStopLinePrefix = "preStop: "

// waitFile returns once path exists; the kubelet's SIGKILL ends the wait
// when the hook never finishes.
func waitFile(path string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
}

// logPreStop writes the hook's line to the container's first process's
// standard output, which the runtime logs as the container's, then creates
// done (if not empty).
func logPreStop(env, done string) error {
	v, set := os.LookupEnv(env)
	state := "set"
	if !set {
		state = "unset"
	}
	f, err := os.OpenFile("/proc/1/fd/1", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s%s=%q (%s) uid=%s\n", preStopLinePrefix, env, v, state, os.Getenv("CSI_FENCE_POD_UID"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || done == "" {
		return err
	}
	return os.WriteFile(done, nil, 0o644)
}

// resume returns the number of the next record: one after the last valid
// record of the file, 1 for a new file. A file it cannot read or whose
// records are broken is said on stdout; the writer goes on after what it
// could read, and the test that checks the file will say the rest.
// recordLog is where the records go: a file's end, or a device's slots.
type recordLog struct {
	// read returns the records' bytes as records.Check reads them.
	read  func(path string) ([]byte, error)
	write func(path string, r records.Record) error
}

var (
	fileLog   = recordLog{read: os.ReadFile, write: write}
	deviceLog = recordLog{read: readSlots, write: writeSlot}
)

func resume(path string, rw recordLog) int64 {
	b, err := rw.read(path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Printf("writer: %s is new, starting at record 1\n", path)
		return 1
	}
	if err != nil {
		fmt.Printf("writer: reading %s failed: errno=%s: %v; starting at record 1\n", path, errnoOf(err), err)
		return 1
	}
	recs, err := records.Check(b)
	if err != nil {
		fmt.Printf("writer: %s: %v\n", path, err)
	}
	next := int64(len(recs)) + 1
	if len(recs) > 0 {
		last := recs[len(recs)-1]
		fmt.Printf("writer: resuming at record %d of %s (record %d by %s at %s)\n", next, path, last.Seq, last.Node, last.Time.Format(time.RFC3339Nano))
	}
	return next
}

// write appends one record in one write(2) and syncs it, so that a write
// reported ok has reached the file system (and, on a real volume, its
// storage).
// readSlots reads the records from a block device's slots.
func readSlots(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return records.FromSlots(b), nil
}

// writeSlot writes r in its slot of the block device at path, through to
// the device (O_SYNC: the error of a fenced device comes back here).
func writeSlot(path string, r records.Record) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(r.Slot(), (r.Seq-1)*records.SlotSize); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func write(path string, r records.Record) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(r.Line()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// errnoOf names the errno of err ("EIO (5)"), or says there is none.
func errnoOf(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return "none"
	}
	name := unix.ErrnoName(errno)
	if name == "" {
		name = "errno"
	}
	return fmt.Sprintf("%s (%d)", name, int(errno))
}
