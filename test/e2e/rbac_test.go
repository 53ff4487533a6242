//go:build e2e

package e2e

import (
	"fmt"
	"os"
)

// productServiceAccounts prefixes the users of the product's processes: the
// ServiceAccounts of deploy/kubernetes/base, in the namespace the harness
// applies them to.
const productServiceAccounts = "system:serviceaccount:default:"

// checkRBAC runs after every test: the product ran with the RBAC of deploy/,
// so any request the apiserver denied it is a missing rule (the product may
// have only logged it and retried). It prints what each ServiceAccount used,
// which is what the rules should grant, and returns 1 on any denial.
func checkRBAC() int {
	r, err := cluster.RBAC(productServiceAccounts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the audit log:", err)
		return 1
	}
	fmt.Printf("e2e: RBAC used by the product (apiserver audit log):\n%s", r)
	for u, d := range r.Denied {
		fmt.Fprintf(os.Stderr, "FAIL: RBAC of deploy/ denied %s: %v\n", u, d)
		return 1
	}
	return 0
}
