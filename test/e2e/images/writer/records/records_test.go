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

package records

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	at := time.Date(2026, 11, 25, 21, 0, 0, 123, time.UTC)
	rec := func(seq int64, node string) string { return Record{Seq: seq, Node: node, Time: at}.Line() }
	good := rec(1, "a") + rec(2, "a") + rec(3, "b")
	flipped := strings.Replace(rec(2, "a"), "seq=2", "seq=3", 1)
	tests := []struct {
		name    string
		data    string
		n       int
		wantErr string
	}{
		{"empty", "", 0, ""},
		{"in order, two nodes", good, 3, ""},
		{"gap", rec(1, "a") + rec(3, "a"), 1, "record 3 where 2 was due"},
		{"repeat", rec(1, "a") + rec(2, "a") + rec(2, "b"), 2, "record 2 where 3 was due"},
		{"changed byte", rec(1, "a") + flipped, 1, "checksum mismatch"},
		{"torn tail", good + rec(4, "b")[:10], 3, "torn record at the end, after record 3"},
		{"no newline at all", rec(1, "a")[:20], 0, "torn record"},
		{"garbage line", rec(1, "a") + "hello\n", 1, "no checksum"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := Check([]byte(tc.data))
			if len(recs) != tc.n {
				t.Errorf("%d records, want %d", len(recs), tc.n)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	recs, _ := Check([]byte(good))
	if recs[2].Node != "b" || !recs[2].Time.Equal(at) {
		t.Errorf("parsed %+v", recs[2])
	}
}

// A block device's slots read as the file of the same records would; a
// slot cut short or with bytes after its line fails Check.
func TestFromSlots(t *testing.T) {
	at := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	slot := func(seq int64) []byte { return Record{Seq: seq, Node: "a", Time: at}.Slot() }
	device := func(slots ...[]byte) []byte {
		var b []byte
		for _, s := range slots {
			b = append(b, s...)
		}
		return append(b, make([]byte, 4*SlotSize)...) // the rest of the device
	}
	torn := slot(2)
	for i := 20; i < SlotSize; i++ {
		torn[i] = 0
	}
	trailing := slot(2)
	trailing[SlotSize-1] = 'x'
	tests := []struct {
		name    string
		device  []byte
		n       int
		wantErr string
	}{
		{"empty device", device(), 0, ""},
		{"three records", device(slot(1), slot(2), slot(3)), 3, ""},
		{"stops at the first empty slot", device(slot(1), make([]byte, SlotSize), slot(3)), 1, ""},
		{"gap", device(slot(1), slot(3)), 1, "record 3 where 2 was due"},
		{"torn slot", device(slot(1), torn), 1, "torn record"},
		{"bytes after the line", device(slot(1), trailing, slot(3)), 2, "line 3: checksum mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := Check(FromSlots(tc.device))
			if len(recs) != tc.n {
				t.Errorf("%d records, want %d", len(recs), tc.n)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
