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

package sidecar

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSyncHealth(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		leading    bool
		unsynced   []string
		after      time.Duration
		wantReady  int
		wantHealth int
		wantBody   string
	}{
		{name: "standby", wantReady: 200, wantHealth: 200, wantBody: "standby"},
		{name: "leading, synced", leading: true, wantReady: 200, wantHealth: 200},
		{name: "leading, syncing", leading: true, unsynced: []string{"*v1.Node"}, after: time.Second, wantReady: 503, wantHealth: 200, wantBody: "*v1.Node"},
		{name: "leading, never synced: the ServiceAccount may not list it", leading: true, unsynced: []string{"*v1.VolumeAttachment"},
			after: SyncGracePeriod, wantReady: 503, wantHealth: 503, wantBody: "caches not synced after 2m0s: *v1.VolumeAttachment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			h := NewSyncHealth()
			h.now = func() time.Time { return now }
			if tc.leading {
				h.Leading(func() []string { return tc.unsynced }, func() []string { return nil })
			}
			now = now.Add(tc.after)
			mux := http.NewServeMux()
			h.Install(mux)
			for path, want := range map[string]int{ReadyzPath: tc.wantReady, SyncHealthzPath: tc.wantHealth} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want || !strings.Contains(rec.Body.String(), tc.wantBody) {
					t.Errorf("%s: %d %q, want %d with %q", path, rec.Code, rec.Body.String(), want, tc.wantBody)
				}
			}
			h.Standby()
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, SyncHealthzPath, nil))
			if rec.Code != 200 {
				t.Errorf("after Standby: %d", rec.Code)
			}
		})
	}
}
