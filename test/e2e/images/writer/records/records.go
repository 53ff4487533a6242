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

// Package records is the format of the e2e writer's records: one line per
// write, numbered from 1 with no gaps, naming the node that wrote it and
// carrying a checksum of itself, so that a test can tell from a volume's
// bytes alone whether every write that reached it is intact and in order,
// and which node made it.
//
//	seq=17 node=real-0 time=2026-11-25T21:00:00.123456789Z crc=1a2b3c4d
package records

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// Record is one write.
type Record struct {
	Seq  int64
	Node string
	Time time.Time
}

// Line returns the record as written: its fields and the CRC-32 (IEEE) of
// them, and a newline.
func (r Record) Line() string {
	body := r.body()
	return fmt.Sprintf("%s crc=%08x\n", body, crc32.ChecksumIEEE([]byte(body)))
}

func (r Record) body() string {
	return fmt.Sprintf("seq=%d node=%s time=%s", r.Seq, r.Node, r.Time.UTC().Format(time.RFC3339Nano))
}

// Parse reads one line (without its newline) and checks its checksum.
func Parse(line string) (Record, error) {
	body, crc, ok := strings.Cut(line, " crc=")
	if !ok {
		return Record{}, fmt.Errorf("no checksum in %q", line)
	}
	want, err := strconv.ParseUint(crc, 16, 32)
	if err != nil || len(crc) != 8 {
		return Record{}, fmt.Errorf("bad checksum field in %q", line)
	}
	if got := crc32.ChecksumIEEE([]byte(body)); uint64(got) != want {
		return Record{}, fmt.Errorf("checksum mismatch in %q: computed %08x", line, got)
	}
	var r Record
	for _, f := range strings.Fields(body) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "seq":
			r.Seq, err = strconv.ParseInt(v, 10, 64)
		case "node":
			r.Node = v
		case "time":
			r.Time, err = time.Parse(time.RFC3339Nano, v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return Record{}, fmt.Errorf("%q: %w", line, err)
		}
	}
	if r.Seq < 1 || r.Node == "" || r.Time.IsZero() {
		return Record{}, fmt.Errorf("incomplete record %q", line)
	}
	return r, nil
}

// Check reads a volume's records: every line must be a valid record, and
// their numbers 1, 2, 3, ... without a gap or a repeat; a last line without
// its newline is a torn record. It returns the records up to the first
// fault, and the fault (nil if none).
func Check(data []byte) ([]Record, error) {
	whole, tail := data, []byte(nil)
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		whole, tail = data[:i+1], data[i+1:]
	}
	var out []Record
	if len(whole) > 0 {
		for i, l := range strings.Split(strings.TrimSuffix(string(whole), "\n"), "\n") {
			r, err := Parse(l)
			if err != nil {
				return out, fmt.Errorf("line %d: %w", i+1, err)
			}
			if want := int64(len(out)) + 1; r.Seq != want {
				return out, fmt.Errorf("line %d: record %d where %d was due (written by %s at %s)", i+1, r.Seq, want, r.Node, r.Time.Format(time.RFC3339Nano))
			}
			out = append(out, r)
		}
	}
	if len(tail) > 0 {
		return out, fmt.Errorf("torn record at the end, after record %d: %q", len(out), tail)
	}
	return out, nil
}

// SlotSize is the size of a record's slot on a block device (a sector): the
// writer's -block mode writes record N, padded with zero bytes, in the
// N-th slot, since a device has no end to append at.
const SlotSize = 512

// Slot returns r as written in its slot on a block device.
func (r Record) Slot() []byte {
	b := make([]byte, SlotSize)
	copy(b, r.Line())
	return b
}

// FromSlots returns the records of a block device's slots as the lines a
// file would hold, up to the first slot that is empty (all zero), so that
// Check reads them: a slot whose line is cut short, or that holds anything
// after it, is returned as it is and fails Check.
func FromSlots(device []byte) []byte {
	var out []byte
	for off := 0; off+SlotSize <= len(device); off += SlotSize {
		slot := device[off : off+SlotSize]
		line := bytes.TrimRight(slot, "\x00")
		if len(line) == 0 {
			break
		}
		out = append(out, line...)
	}
	return out
}
