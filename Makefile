# fence-attacher: `make demo` runs a node failover on a local real control
# plane; `make test` runs every test (verify, unit, sanity, end-to-end).

CMDS = csi-fence-attacher csi-fence-mock csi-fence-sanity csi-fence-prestop csi-fence-prestop-webhook kubectl-fence
# The images the shipped manifests (deploy/) run.
IMAGE_CMDS = csi-fence-attacher csi-fence-mock csi-fence-prestop csi-fence-prestop-webhook

all: build

include release-tools/build.make

# Everything CI runs: static checks, unit tests, then the end-to-end suites on
# real control planes (which build the pinned Kubernetes binaries on first
# use into ~/.cache/fence-attacher, ~11 minutes cold, seconds warm). The
# suites run side by side, three at a time, each on a control plane of its
# own: most of their time is spent waiting out leases, grace periods and
# backoffs, not on the CPU. Everything they install or build comes first,
# once; each suite's output is printed whole when it ends, and a failed
# suite stops none of the others (-k).
test: verify test-go test-powerfence
	$(MAKE) test-deps
	$(MAKE) -k -j3 --output-sync=target test-e2e-slow test-e2e-rest test-trials-run test-realnodes-run test-bench-e2e

test-deps: test-e2e-deps test-realnodes-deps
	$(GO) build -o /dev/null ./cmd/fence-trials
	$(GO) test -tags e2e -count=1 -exec /bin/true ./test/e2e/... ./cmd/fence-bench/ >/dev/null

# Power fencing on real parts: pkg/powerfence drives Debian's fence_ipmilan
# against openipmi's ipmi_sim on loopback, whose "machine" is a process that
# a power off must stop (test/bmcsim). The setup script installs both with
# apt when missing (CI runs as root); about 20 s of tests.
test-powerfence:
	./hack/install-fence-agents.sh
	$(GO) vet -tags e2e ./test/bmcsim/...
	$(GO) test -tags e2e -count=1 -timeout 10m ./test/bmcsim/...

# End-to-end tests against etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and KWOK built from the modules under test/e2e/tools, and
# Cluster API's core manager from hack/tools/capi (the machine backend's
# tests; about 9 minutes cold, cached like the others); then fence-bench at
# its smallest (--trials=1, and interrupted), which must leave nothing
# running and say nothing of a control plane after its teardown.
test-e2e: test-e2e-deps
	$(MAKE) -k -j2 --output-sync=target test-e2e-slow test-e2e-rest
	$(MAKE) test-bench-e2e

test-e2e-deps:
	./hack/install-fence-agents.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/capi-binaries.sh >/dev/null

# The end-to-end tests that wait longest (MachineHealthCheck's timeouts, the
# termination reasons' grace periods, an informer resync, a deleted Node's
# record) run in a test process of their own beside the others.
E2E_SLOW = ^Test(Machine|TerminationReason|HealthReflectsInformerSync$$|DeletedDeadNodeFailsOver$$)
E2E_TEST = $(GO) test -tags e2e -count=1 -v
test-e2e-slow:
	$(E2E_TEST) -timeout 45m -run '$(E2E_SLOW)' ./test/e2e/
test-e2e-rest:
	$(E2E_TEST) -timeout 45m -skip '$(E2E_SLOW)' ./test/e2e/...
test-bench-e2e:
	$(E2E_TEST) -timeout 20m ./cmd/fence-bench/

# Real nodes: a real kubelet and containerd
# per node in its own network namespace and cgroup, joined to the local
# control plane (test/e2e/framework, StartRealNodes). Installs runc and the
# CNI plugins with apt when missing, builds the kubelet and containerd once
# into ~/.cache/fence-attacher/node-bin, then runs TestRealNodes,
# TestRealNodesFailover (the product deployed from deploy/kubernetes on two
# real nodes, a writer failing over on a power off), TestRealNodesDataPath
# (the same writer on the mock's FUSE data path, its node partitioned: the
# fence turns its writes into EIO), TestRealNodesReturn and
# TestRealNodesReturnHung (the node comes back, rebooted or resumed, and is
# cleaned through the real node plugin before it is released) and
# TestRealNodesPowerFencing (the driver without UNPUBLISH_FENCE: the
# partitioned writer's node powered off by fence_ipmilan, run in the
# sidecar's container, through a BMC whose machine is the node; the fence
# agents come from hack/install-fence-agents.sh) and TestRealNodesPreStop
# (the termination reason in preStop hooks a real kubelet runs, the webhook
# deployed from deploy/kubernetes/prestop, also for a pod force-deleted
# while its node was cut off); as root.
test-realnodes: test-realnodes-deps
	$(MAKE) test-realnodes-run

test-realnodes-deps:
	./hack/install-node-deps.sh
	./hack/install-fence-agents.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/node-binaries.sh >/dev/null

test-realnodes-run:
	FENCE_E2E_REAL_NODES=1 $(GO) test -tags e2e -count=1 -timeout 5m -run '^TestReclaimStale$$' ./test/e2e/framework/
	FENCE_E2E_REAL_NODES=1 $(GO) test -tags e2e -count=1 -timeout 45m -v -run '^TestRealNodes(Failover|DataPath|Return|ReturnHung|PowerFencing|PreStop)?$$' ./test/e2e/

# Randomized failover trials (cmd/fence-trials): one trial of every fault
# schedule with fixed seeds, so that CI replays the same ones. `make chaos
# TRIALS=N` runs N trials of each schedule with seeds from the clock.
TRIAL_SEED ?= 1000
TRIALS ?= 10
test-trials:
	./hack/e2e-binaries.sh >/dev/null
	$(MAKE) test-trials-run
test-trials-run:
	$(GO) run ./cmd/fence-trials -seed $(TRIAL_SEED) -trials 1

chaos:
	./hack/e2e-binaries.sh >/dev/null
	$(GO) run ./cmd/fence-trials -trials $(TRIALS)

# The Helm chart (deploy/helm/csi-fence): linted, rendered and compared with
# the kustomize build by Helm's own library. A Go module of its own
# (deploy/helm/go.mod: Helm needs newer k8s.io modules than go.mod pins), so
# `go test ./...` at the top does not reach it: test-go runs it.
test-helm:
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 ./...
test-go: test-helm

.PHONY: all test test-deps test-powerfence test-e2e test-e2e-deps test-e2e-slow test-e2e-rest test-bench-e2e test-realnodes test-realnodes-deps test-realnodes-run test-trials test-trials-run chaos demo demo-real-nodes test-helm

# The product's main job on an embedded default: a local real control plane,
# the mock driver, the sidecar, and a node failure that fails over.
demo:
	$(GO) run ./cmd/fence-demo

# The same on two real nodes (a kubelet and containerd each, the product
# deployed from deploy/kubernetes/mock-example with images built here); as
# root. Installs and builds what real nodes need first, as test-realnodes.
demo-real-nodes:
	./hack/install-node-deps.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/node-binaries.sh >/dev/null
	$(GO) run ./cmd/fence-demo --real-nodes
