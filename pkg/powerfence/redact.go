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
	"encoding/base64"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// Redacted replaces a secret in any text this package logs, returns or keeps.
const Redacted = "[redacted]"

// redactor removes secret option values from text an agent printed (or an
// error built around it) before anything else sees it (S7). An agent may echo
// a value in several spellings: as given (the Python agents' "Ignoring
// unknown option 'password=...'" warning), quoted for a shell or for JSON or
// a URL in a verbose log, or inside an HTTP basic authorization header
// (base64 of user:password); each spelling is removed.
type redactor struct {
	forms []string // longest first, so that a form containing another goes whole
}

// loginOptions name the user half of a basic-auth pair in the agents.
var loginOptions = map[string]bool{"login": true, "username": true, "user": true}

func newRedactor(opts []Option) *redactor {
	var logins []string
	for _, o := range opts {
		if loginOptions[normalizeName(o.Name)] && o.Value != "" {
			logins = append(logins, o.Value)
		}
	}
	seen := map[string]bool{}
	r := &redactor{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			r.forms = append(r.forms, s)
		}
	}
	for _, o := range opts {
		if !o.Secret || o.Value == "" {
			continue
		}
		v := o.Value
		add(v)
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		if j, err := json.Marshal(v); err == nil {
			add(strings.Trim(string(j), `"`))
		}
		add(strings.ReplaceAll(v, `'`, `'"'"'`)) // inside a POSIX shell's '...'
		add(strings.ReplaceAll(v, `\`, `\\`))    // Python repr, C strings
		add(base64.StdEncoding.EncodeToString([]byte(v)))
		for _, l := range logins {
			add(base64.StdEncoding.EncodeToString([]byte(l + ":" + v)))
		}
	}
	sort.Slice(r.forms, func(i, j int) bool { return len(r.forms[i]) > len(r.forms[j]) })
	return r
}

// redact returns s without any secret.
func (r *redactor) redact(s string) string {
	for _, f := range r.forms {
		s = strings.ReplaceAll(s, f, Redacted)
	}
	return s
}

// redactedError keeps an error's chain (errors.Is still finds
// context.DeadlineExceeded or exec.ErrNotFound) while its text is redacted.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (r *redactor) error(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: r.redact(err.Error()), err: err}
}
