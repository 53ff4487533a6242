# fence-attacher: `make demo` runs a node failover on a local real control
# plane; `make test` runs every test (verify, unit, sanity, end-to-end).

CMDS = csi-fence-attacher csi-fence-mock csi-fence-sanity csi-fence-prestop csi-fence-prestop-webhook kubectl-fence
# The images the shipped manifests (deploy/) run.
IMAGE_CMDS = csi-fence-attacher csi-fence-mock csi-fence-prestop csi-fence-prestop-webhook

all: build

include release-tools/build.make

# Everything CI runs, in four lanes side by side, each printed whole when it
# ends; a failed suite stops no other (-k):
#   test-units       the static checks, the unit tests (race detector), the
#                    Helm chart's and the power-fencing tests;
#   test-lane-e2e    the control plane's binaries, then the e2e tests but the
#                    slowest;
#   test-lane-slow   Cluster API's manager, then the slowest e2e tests, then
#                    fence-bench's, then the randomized trials on KWOK nodes;
#   test-lane-nodes  containerd and the kubelet, then the real-node tests and
#                    fence-bench's real-node smoke test, then the randomized
#                    trials on real nodes.
# On a cold machine the first half hour is mostly compilation on both cores,
# which the lanes share: the Go build cache (one set of build flags, see
# GO_FLAGS) and the binary caches (each build script waits for a run of
# itself that is already building, never builds twice). From then on the
# suites mostly wait out leases, grace periods and backoffs, each on a
# control plane of its own.
test:
	$(MAKE) -k -j4 --output-sync=target test-units test-lane-e2e test-lane-slow test-lane-nodes

test-units:
	$(MAKE) -k verify test-go test-powerfence
test-lane-e2e:
	./hack/install-fence-agents.sh
	./hack/e2e-binaries.sh >/dev/null
	$(E2E_COMPILE)
	$(MAKE) test-e2e-rest
test-lane-slow:
	./hack/install-fence-agents.sh
	./hack/capi-binaries.sh >/dev/null
	./hack/e2e-binaries.sh >/dev/null
	$(E2E_COMPILE)
	$(MAKE) -k test-e2e-slow test-bench-e2e test-trials-run
test-lane-nodes:
	./hack/install-node-deps.sh
	./hack/install-fence-agents.sh
	./hack/node-binaries.sh >/dev/null
	$(MAKE) -k test-realnodes-run test-trials-real-run

# Compiles the e2e test binaries without running them, once: a second lane
# arriving meanwhile waits for the first one's compilation (flock) instead of
# compiling the same packages beside it.
E2E_COMPILE = mkdir -p $(HOME)/.cache/fence-attacher && flock $(HOME)/.cache/fence-attacher/.e2e-compile.lock \
	$(GO) test $(GO_FLAGS) -tags e2e -count=1 -exec /bin/true ./test/e2e/... ./test/bench/... >/dev/null

# Power fencing on real parts: pkg/powerfence drives Debian's fence_ipmilan
# against openipmi's ipmi_sim on loopback, whose "machine" is a process that
# a power off must stop (test/bmcsim). The setup script installs both with
# apt when missing (CI runs as root); about 20 s of tests.
test-powerfence:
	./hack/install-fence-agents.sh
	$(GO) vet $(GO_FLAGS) -tags e2e ./test/bmcsim/...
	$(GO) test $(GO_FLAGS) -tags e2e -count=1 -timeout 10m ./test/bmcsim/...

# End-to-end tests against etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and KWOK built from the modules under test/e2e/tools, and
# Cluster API's core manager from hack/tools/capi (the machine backend's
# tests; about 2 minutes cold, cached like the others); then fence-bench at
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
E2E_TEST = $(GO) test $(GO_FLAGS) -tags e2e -count=1 -v
test-e2e-slow:
	$(E2E_TEST) -timeout 45m -run '$(E2E_SLOW)' ./test/e2e/
test-e2e-rest:
	$(E2E_TEST) -timeout 45m -skip '$(E2E_SLOW)' ./test/e2e/...
test-bench-e2e:
	$(E2E_TEST) -timeout 20m ./test/bench/...

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
# cleaned through the real node plugin before it is released),
# TestRealNodesManualFence (kubectl fence fence of a Ready node under a
# running writer, the writer drained and gone, the node released and the
# replacement writing there; again with the kubelet restarted before the
# drain; 35 s to 110 s each) and
# TestRealNodesPowerFencing (the driver without UNPUBLISH_FENCE: the
# partitioned writer's node powered off by fence_ipmilan, run in the
# sidecar's container, through a BMC whose machine is the node; the fence
# agents come from hack/install-fence-agents.sh), TestRealNodesPreStop
# (the termination reason in preStop hooks a real kubelet runs, the webhook
# deployed from deploy/kubernetes/prestop, also for a pod force-deleted
# while its node was cut off) and TestRealNodesFenceByDetachPowerOff and
# TestRealNodesFenceByDetachPartition (the mock as a driver whose detach
# revokes access, so declared on its CSIDriver: the writer fails over
# fenced by a plain unpublish, which cuts the partitioned writer's FUSE
# data path; 45 s to 85 s each), then fence-bench --nodes=real at its
# smallest (TestBenchRealNodesSmoke, about 2.5 min); as root.
test-realnodes: test-realnodes-deps
	$(MAKE) test-realnodes-run

test-realnodes-deps:
	./hack/install-node-deps.sh
	./hack/install-fence-agents.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/node-binaries.sh >/dev/null

test-realnodes-run:
	FENCE_E2E_REAL_NODES=1 $(GO) test $(GO_FLAGS) -tags e2e -count=1 -timeout 5m -run '^TestReclaimStale$$' ./test/e2e/framework/
	FENCE_E2E_REAL_NODES=1 $(GO) test $(GO_FLAGS) -tags e2e -count=1 -timeout 45m -v -run '^TestRealNodes(Failover|DataPath|Return|ReturnHung|ManualFence|PowerFencing|PreStop|FenceByDetachPowerOff|FenceByDetachPartition)?$$' ./test/e2e/
	FENCE_E2E_REAL_NODES=1 $(GO) test $(GO_FLAGS) -tags e2e -count=1 -timeout 10m -run '^TestBenchRealNodesSmoke$$' ./test/bench/

# Randomized failover trials (cmd/fence-trials): one trial of every fault
# schedule with fixed seeds, so that CI replays the same ones. `make chaos
# TRIALS=N` runs N trials of each schedule with seeds from the clock.
TRIAL_SEED ?= 1000
TRIALS ?= 10
test-trials:
	./hack/e2e-binaries.sh >/dev/null
	./hack/capi-binaries.sh >/dev/null
	$(MAKE) test-trials-run
test-trials-run:
	$(GO) run $(GO_FLAGS) ./cmd/fence-trials -seed $(TRIAL_SEED) -trials 1

chaos:
	./hack/e2e-binaries.sh >/dev/null
	./hack/capi-binaries.sh >/dev/null
	$(GO) run $(GO_FLAGS) ./cmd/fence-trials -trials $(TRIALS)

# The trials on real nodes (issue 41; as root): three nodes, each a kubelet
# and containerd of its own, the product deployed from
# deploy/kubernetes/mock-example, a container writing through the fence.
# test-trials-real-run replays a handful of schedules with a fixed seed and
# fails on any violation; `make chaos-real TRIALS=N` runs N trials of every
# real-node schedule (`go run ./cmd/fence-trials --nodes=real
# -schedules=list` lists them).
TRIAL_REAL_SEED ?= 4100
TRIAL_REAL_SCHEDULES ?= power-off,partition,power-off+kill-controller,partition+leader-loss,power-off+reboot-during-cleanup,power-off+node-plugin-crash-during-cleanup
test-trials-real: test-realnodes-deps
	$(MAKE) test-trials-real-run
test-trials-real-run:
	$(GO) run $(GO_FLAGS) ./cmd/fence-trials --nodes=real -seed $(TRIAL_REAL_SEED) -trials 1 -schedules $(TRIAL_REAL_SCHEDULES)
chaos-real: test-realnodes-deps
	$(GO) run $(GO_FLAGS) ./cmd/fence-trials --nodes=real -trials $(TRIALS)

# The Helm chart (deploy/helm/csi-fence): linted, rendered and compared with
# the kustomize build by Helm's own library. A Go module of its own
# (deploy/helm/go.mod: Helm's dependency tree stays out of the product's), so
# `go test ./...` at the top does not reach it: test-go runs it.
test-helm:
	cd deploy/helm && $(GO) vet $(GO_FLAGS) ./... && $(GO) test $(GO_FLAGS) -count=1 ./...
test-go: test-helm

.PHONY: all test test-units test-lane-e2e test-lane-slow test-lane-nodes test-powerfence test-e2e test-e2e-deps test-e2e-slow test-e2e-rest test-bench-e2e test-realnodes test-realnodes-deps test-realnodes-run test-trials test-trials-run test-trials-real test-trials-real-run chaos chaos-real demo demo-real-nodes bench-real-nodes test-helm

# The product's main job on an embedded default: a local real control plane,
# the mock driver, the sidecar, and a node failure that fails over.
demo:
	$(GO) run $(GO_FLAGS) ./cmd/fence-demo

# The same on two real nodes (a kubelet and containerd each, the product
# deployed from deploy/kubernetes/mock-example with images built here); as
# root. Installs and builds what real nodes need first, as test-realnodes.
demo-real-nodes:
	./hack/install-node-deps.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/node-binaries.sh >/dev/null
	$(GO) run $(GO_FLAGS) ./cmd/fence-demo --real-nodes

# fence-bench on three real nodes (as root): pod eligible -> volume attached
# elsewhere and node down -> replacement writing, p50/p95 over
# BENCH_TRIALS trials with each step's share, beside the in-tree
# out-of-service path on the same nodes in the same run (about 25 minutes
# at 10 trials on a 2-core machine). Installs and builds what real nodes
# need first, as test-realnodes.
BENCH_TRIALS ?= 10
bench-real-nodes:
	./hack/install-node-deps.sh
	./hack/e2e-binaries.sh >/dev/null
	./hack/node-binaries.sh >/dev/null
	$(GO) run $(GO_FLAGS) ./cmd/fence-bench --nodes=real --trials=$(BENCH_TRIALS)
