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

package csiclient

import (
	"errors"
	"slices"
	"testing"
)

func TestEachNodeID(t *testing.T) {
	fail := errors.New("refused")
	tests := []struct {
		name             string
		previous, nodeID string
		failOn           string
		wantCalls        []string
		wantErr          bool
	}{
		{name: "no previous ID", nodeID: "n2", wantCalls: []string{"n2"}},
		{name: "previous ID first", previous: "n1", nodeID: "n2", wantCalls: []string{"n1", "n2"}},
		{name: "previous ID is the current one", previous: "n2", nodeID: "n2", wantCalls: []string{"n2"}},
		{name: "previous ID fails: the current one waits", previous: "n1", nodeID: "n2", failOn: "n1", wantCalls: []string{"n1"}, wantErr: true},
		{name: "current ID fails", previous: "n1", nodeID: "n2", failOn: "n2", wantCalls: []string{"n1", "n2"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			err := EachNodeID(tc.previous, tc.nodeID, func(id string) error {
				calls = append(calls, id)
				if id == tc.failOn {
					return fail
				}
				return nil
			})
			if !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("calls = %v, want %v", calls, tc.wantCalls)
			}
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, fail)) {
				t.Errorf("err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
