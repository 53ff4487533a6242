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
	"fmt"
	"regexp"
	"strings"
)

// Action is an action of the fence agent API.
type Action string

// The actions this package runs. "reboot" exists in the API but is not used
// here: it is not verifiable (an IPMI reset has no moment at which the node is
// observably off), and a fence must be confirmed.
const (
	ActionOff     Action = "off"
	ActionOn      Action = "on"
	ActionStatus  Action = "status"
	ActionMonitor Action = "monitor"
)

// Exit codes of the fence agent API.
const (
	exitSuccess = 0 // off/on done; status: on; monitor: device works
	exitFailed  = 1 // not done, or the device could not be reached
	exitOff     = 2 // status (and monitor of a single-port device): off
)

// Option is one agent option, a name=value line on the agent's stdin.
type Option struct {
	Name  string
	Value string
	// Secret marks a value read from a Secret: it is redacted from the
	// agent's output and never logged.
	Secret bool
}

// optionName is what the API allows in a name: no spaces, no '=', nothing an
// XML attribute name could not hold; the agents' own names are lower case
// words joined by '_' or '-'.
var optionName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// reservedOptions are set by this package, never by a configuration: the
// action is the caller's decision, not the config's ("option" is its
// deprecated alias).
var reservedOptions = map[string]bool{"action": true, "option": true}

// validateOption checks what the agent can parse unambiguously. Error
// messages name the option, never its value, which may be a password.
func validateOption(o Option) error {
	if !optionName.MatchString(o.Name) {
		return fmt.Errorf("invalid agent option name %q", o.Name)
	}
	if reservedOptions[normalizeName(o.Name)] {
		return fmt.Errorf("agent option %q is set by the fence itself, not by configuration", o.Name)
	}
	if strings.ContainsAny(o.Value, "\n\r\x00") {
		return fmt.Errorf("value of agent option %q contains a line break or NUL: the agent would read it as several options", o.Name)
	}
	// The Python agents strip each line and then one pair of surrounding
	// double quotes: such a value would arrive changed, and a wrong password
	// fails as an unexplained login error at the worst moment.
	if v := o.Value; v != strings.TrimSpace(v) || (len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"') {
		return fmt.Errorf("value of agent option %q starts or ends with white space or is in double quotes: the agent would not read it as given", o.Name)
	}
	return nil
}

// normalizeName folds the two spellings the agents accept (ipport, ip-port
// vs ip_port) so that duplicates and reserved names are recognised.
func normalizeName(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "-", "_"))
}

// credentialLike matches option names that hold secrets in the agents
// (password, passwd, secret_key, token, ...). Such a name must come from a
// Secret: a FenceAgentConfig is readable by anyone who may read the cluster's
// configuration, and its values appear in logs and errors. passwd_script and
// password_script name a program, not a secret.
var credentialLike = regexp.MustCompile(`pass|secret|token|credential|private`)

func looksLikeCredential(name string) bool {
	n := normalizeName(name)
	if strings.HasSuffix(n, "_script") {
		return false
	}
	return credentialLike.MatchString(n)
}

// encodeStdin renders the options and the action as the agent reads them.
// The action comes last: if a configuration slipped one in anyway, the
// API's "last value wins" keeps ours.
func encodeStdin(opts []Option, action Action) (string, error) {
	var b strings.Builder
	for _, o := range opts {
		if err := validateOption(o); err != nil {
			return "", err
		}
		b.WriteString(o.Name)
		b.WriteByte('=')
		b.WriteString(o.Value)
		b.WriteByte('\n')
	}
	b.WriteString("action=")
	b.WriteString(string(action))
	b.WriteByte('\n')
	return b.String(), nil
}

// optionNames lists the names, for logs: values are never logged.
func optionNames(opts []Option) []string {
	names := make([]string, 0, len(opts))
	for _, o := range opts {
		names = append(names, o.Name)
	}
	return names
}
