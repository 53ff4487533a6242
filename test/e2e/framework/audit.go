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

package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The apiserver writes an audit log of every request made by a
// ServiceAccount outside kube-system (the product's, not the controllers'
// of kube-controller-manager), and by the kube-system ServiceAccounts of the
// drivers whose recipes the product runs as. It is what proves the RBAC of deploy/: a
// request the RBAC denies is a 403 there even when the product only logs
// the error and retries (an informer that may not list just never syncs),
// and the requests that succeeded are the verbs the product really uses.
// Of kube-controller-manager it holds only the attach/detach controller's
// writes of Node status: one per volume it attaches or detaches, one at a
// time, they pace every failover, the product's and the in-tree one alike
// (fence-bench --mode=scale times them).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:kube-system:attachdetach-controller"]
  verbs: ["patch", "update"]
  resources:
  - group: ""
    resources: ["nodes/status"]
# The kube-system ServiceAccounts of the drivers whose recipes the e2e runs
# the product as (recipes_test.go: EBS's and Azure Disk's).
- level: Metadata
  users:
  - system:serviceaccount:kube-system:ebs-csi-controller-sa
  - system:serviceaccount:kube-system:ebs-csi-node-sa
  - system:serviceaccount:kube-system:csi-azuredisk-controller-sa
  - system:serviceaccount:kube-system:csi-azuredisk-node-sa
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
`

func (c *Cluster) auditLogPath() string { return filepath.Join(c.WorkDir, "logs", "audit.log") }

func (c *Cluster) auditFlags() ([]string, error) {
	policy := filepath.Join(c.WorkDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	// blocking mode: a request is logged before it is answered, so a test
	// that saw the answer finds the request in the log.
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.auditLogPath(),
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxbackup=0"}, nil
}

// AuditEvent is one request of a ServiceAccount, as the apiserver saw it.
type AuditEvent struct {
	User        string // system:serviceaccount:NS:NAME
	Verb        string // get, list, watch, create, update, patch, delete, ...
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Code        int       // HTTP status of the answer
	Time        time.Time // when the apiserver received it
	Answered    time.Time // when it answered (or, for a watch, began to)
}

// Permission is the RBAC rule part a request needs: "verb group/resource[/sub]".
func (e AuditEvent) Permission() string {
	r := e.Resource
	if e.Subresource != "" {
		r += "/" + e.Subresource
	}
	g := e.APIGroup
	if g == "" {
		g = "core"
	}
	return e.Verb + " " + g + "/" + r
}

type rawAuditEvent struct {
	Stage    string    `json:"stage"`
	Received time.Time `json:"requestReceivedTimestamp"`
	Answered time.Time `json:"stageTimestamp"`
	Verb     string    `json:"verb"`
	User     struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// AuditEvents returns the completed resource requests the policy logs,
// oldest first (a watch is complete when it ends or,
// for the decision, when it started: its ResponseStarted stage counts).
func (c *Cluster) AuditEvents() ([]AuditEvent, error) {
	f, err := os.Open(c.auditLogPath())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r rawAuditEvent
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", c.auditLogPath(), err)
		}
		if r.ObjectRef == nil || r.ResponseStatus == nil {
			continue // non-resource URLs (discovery, /version)
		}
		// A long-running request (watch) is logged when the answer starts
		// and again when it completes; count it once.
		if r.Verb == "watch" && r.Stage != "ResponseStarted" && r.ResponseStatus.Code == 200 {
			continue
		}
		out = append(out, AuditEvent{
			User: r.User.Username, Verb: r.Verb, APIGroup: r.ObjectRef.APIGroup, Resource: r.ObjectRef.Resource,
			Subresource: r.ObjectRef.Subresource, Namespace: r.ObjectRef.Namespace, Name: r.ObjectRef.Name,
			Code: r.ResponseStatus.Code, Time: r.Received, Answered: r.Answered,
		})
	}
	return out, sc.Err()
}

// RBACReport summarizes the audit log per ServiceAccount: which permissions
// were used (answered with anything but 403) and which were denied.
type RBACReport struct {
	Used   map[string][]string // user -> sorted permissions
	Denied map[string][]string // user -> sorted "permission namespace/name"
}

// RBAC builds the RBACReport of the ServiceAccounts whose user name has
// prefix (e.g. "system:serviceaccount:default:").
func (c *Cluster) RBAC(prefix string) (*RBACReport, error) {
	events, err := c.AuditEvents()
	if err != nil {
		return nil, err
	}
	used := map[string]map[string]bool{}
	denied := map[string]map[string]bool{}
	for _, e := range events {
		if !strings.HasPrefix(e.User, prefix) {
			continue
		}
		m := used
		key := e.Permission()
		if e.Code == 403 {
			m = denied
			key += " " + e.Namespace + "/" + e.Name
		}
		if m[e.User] == nil {
			m[e.User] = map[string]bool{}
		}
		m[e.User][key] = true
	}
	sorted := func(m map[string]map[string]bool) map[string][]string {
		out := map[string][]string{}
		for u, set := range m {
			for k := range set {
				out[u] = append(out[u], k)
			}
			sort.Strings(out[u])
		}
		return out
	}
	return &RBACReport{Used: sorted(used), Denied: sorted(denied)}, nil
}

// String lists the report for a log.
func (r *RBACReport) String() string {
	var b strings.Builder
	users := map[string]bool{}
	for u := range r.Used {
		users[u] = true
	}
	for u := range r.Denied {
		users[u] = true
	}
	var names []string
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	for _, u := range names {
		fmt.Fprintf(&b, "%s\n  used:   %s\n", u, strings.Join(r.Used[u], ", "))
		if len(r.Denied[u]) > 0 {
			fmt.Fprintf(&b, "  DENIED: %s\n", strings.Join(r.Denied[u], ", "))
		}
	}
	return b.String()
}
