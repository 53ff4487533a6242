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

package powerfence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// secretForms are the spellings in which an agent may print a password.
func secretForms(login, secret string) []string {
	j, _ := json.Marshal(secret)
	return []string{
		secret,
		url.QueryEscape(secret),
		strings.Trim(string(j), `"`),
		strings.ReplaceAll(secret, `'`, `'"'"'`),
		base64.StdEncoding.EncodeToString([]byte(secret)),
		base64.StdEncoding.EncodeToString([]byte(login + ":" + secret)),
	}
}

// leakyOutput is what a careless (or verbose) agent prints: its stdin echoed
// back, a shell command line, a URL, a JSON body, a basic-auth header. (A
// login whose length+1 is a multiple of 3 would hide a missing basic-auth
// form: base64 of "login:" would then be a prefix of whole base64 blocks.)
func leakyOutput(login, secret string) string {
	f := secretForms(login, secret)
	return strings.Join([]string{
		"Parse error: Ignoring unknown option 'passwd=" + f[0] + "'",
		"Executing: /usr/bin/ipmitool -U " + login + " -P '" + f[3] + "' chassis power status",
		"GET https://bmc.example/api?user=" + login + "&password=" + f[1],
		`POST {"UserName": "` + login + `", "Password": "` + f[2] + `"}`,
		"Authorization: Basic " + f[5],
		"secret in base64: " + f[4],
	}, "\n") + "\n"
}

func TestRedactorForms(t *testing.T) {
	const login, secret = "root", `s3cr'et p@ss/+=&\x`
	r := newRedactor([]Option{{Name: "username", Value: login}, {Name: "password", Value: secret, Secret: true}})
	got := r.redact(leakyOutput(login, secret))
	for _, f := range secretForms(login, secret) {
		if strings.Contains(got, f) {
			t.Errorf("%q survived redaction:\n%s", f, got)
		}
	}
	if strings.Count(got, Redacted) != 6 {
		t.Errorf("want 6 redactions:\n%s", got)
	}
	// Errors are redacted too, and keep their chain for errors.Is.
	err := r.error(fmt.Errorf("login as %s with %s: %w", login, secret, context.DeadlineExceeded))
	if strings.Contains(err.Error(), secret) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q (is deadline: %v)", err, errors.Is(err, context.DeadlineExceeded))
	}
	// Not secret: kept, so that the output still explains itself.
	if !strings.Contains(got, "-U root") || !strings.Contains(got, "chassis power status") {
		t.Errorf("redaction removed more than the secret:\n%s", got)
	}
}

// S7: whatever the agent prints, a password is in no Step, no error, no
// Result (what a caller writes into a record, an Event or a status) and no
// log line at any verbosity.
func TestFenceNeverShowsSecrets(t *testing.T) {
	const login, secret = "root", `s3cr'et p@ss/+=&\x`
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)

	leakFile := filepath.Join(t.TempDir(), "leak")
	if err := os.WriteFile(leakFile, []byte(leakyOutput(login, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := "cat " + leakFile + " >&2"
	opts := []Option{{Name: "ip", Value: "192.0.2.1"}, {Name: "username", Value: login, Secret: true}, {Name: "password", Value: secret, Secret: true}}

	var texts []string
	// A fence that works after a failed off and an unreachable status, and
	// one that fails whole (its errors carry the agent's last line).
	for _, plans := range []map[Action][]int{
		{ActionOff: {1, 0}, ActionStatus: {1, 2}},
		{ActionOff: {1}, ActionStatus: {1}},
	} {
		f := newFakeAgent(t, plans, extra)
		target := &Target{Node: "node-1", Config: "bmc", ConfirmTimeout: 2 * time.Second, StatusInterval: 10 * time.Millisecond,
			Agent: &Agent{Path: f.path, Options: opts, Retries: 1, RetryInterval: time.Millisecond}}
		res, err := target.Fence(ctx)
		if err != nil {
			texts = append(texts, err.Error())
		}
		b, _ := json.Marshal(res)
		texts = append(texts, string(b))
		if !strings.Contains(string(b), Redacted) {
			t.Errorf("the agent's output was not kept (redacted) in the result: %s", b)
		}
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, Redacted) {
		t.Errorf("the log never showed the agent's output, so this test proves nothing about it:\n%s", logs)
	}
	texts = append(texts, logs)
	for _, text := range texts {
		for _, f := range secretForms(login, secret) {
			if strings.Contains(text, f) {
				t.Errorf("secret form %q appears in:\n%s", f, text)
			}
		}
	}
}

// Output beyond the capture limit is cut before redaction; the cut must not
// leave the end of a password behind, where it would no longer match.
func TestCappedBufferNeverLeavesHalfASecret(t *testing.T) {
	const secret = "0123456789-secret"
	r := newRedactor([]Option{{Name: "password", Value: secret, Secret: true}})
	const conclusion = "Success: Powered OFF\n"
	for cut := 1; cut < len(secret); cut++ {
		// The limit keeps the conclusion and the secret's last bytes only.
		b := &cappedBuffer{limit: len(secret) - cut + 1 + len(conclusion)}
		_, _ = b.Write([]byte("Parse error: Ignoring unknown option 'password=" + secret + "\n"))
		_, _ = b.Write([]byte(conclusion))
		if !strings.Contains(b.buf.String(), secret[cut:]) {
			t.Fatalf("cut %d: the test does not cut the secret: %q", cut, b.buf.String())
		}
		got := r.redact(b.String())
		if strings.Contains(got, secret[cut:]) {
			t.Errorf("cut %d: %q keeps the end of the secret", cut, got)
		}
		if !strings.Contains(got, strings.TrimSpace(conclusion)) {
			t.Errorf("cut %d: %q lost the agent's conclusion", cut, got)
		}
	}
}
