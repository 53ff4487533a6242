# Shared build and verify rules, included by the top-level Makefile. Modelled on
# kubernetes-csi's csi-release-tools, but self-contained: no git subtree and no
# network access beyond the Go module proxy.
#
# The including Makefile sets CMDS (the commands under cmd/ to build) and
# IMAGE_CMDS (those `make images` makes release images of).

REV := $(shell git describe --long --tags --match='v*' --dirty 2>/dev/null || git rev-list -n1 HEAD 2>/dev/null || echo unknown)
# The release stamped into every binary (pkg/version): the v* tag of the
# commit (v0.1.0), or the tag and what follows it (v0.1.0-3-g0123abc), or
# nothing before the first tag, which leaves pkg/version's Dev. Either can be
# given on the command line: make build VERSION=v0.1.0.
VERSION ?= $(shell git describe --tags --match='v*' --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VERSION_PKG := github.com/csi-fence/fence-attacher/pkg/version
LDFLAGS := $(if $(COMMIT),-X $(VERSION_PKG).commit=$(COMMIT)) $(if $(VERSION),-X $(VERSION_PKG).version=$(VERSION))
BIN_DIR ?= bin
REGISTRY_NAME ?= ghcr.io/csi-fence
IMAGE_TAGS ?= canary
GO ?= go
# Every build but the race detector's is made as the release images are
# (internal/imagebuild.GoBuild): static and -trimpath. The tests' own
# binaries, vet, the commands the e2e tests start and the real nodes' images
# then share one compiled dependency tree in the Go build cache; each other
# set of build flags compiles all of client-go and gRPC once more, minutes
# on a cold 2-core machine. Commands outside the Makefile may build as they
# like: only the cache sharing depends on it.
export CGO_ENABLED = 0
GO_FLAGS ?= -trimpath
CMDS_DIR ?= cmd
BUILD_PLATFORMS ?= linux amd64

# Static binaries with the version stamped into pkg/version (each prints it
# with --version).
build: $(CMDS:%=build-%)
build-%:
	mkdir -p $(BIN_DIR)
	CGO_ENABLED=0 GOOS=$(word 1,$(BUILD_PLATFORMS)) GOARCH=$(word 2,$(BUILD_PLATFORMS)) \
		$(GO) build -trimpath -ldflags '$(LDFLAGS) -extldflags "-static"' -o $(BIN_DIR)/$* ./$(CMDS_DIR)/$*

# Container images from release-tools/Dockerfile (static distroless base).
# Needs a container engine, which the CI machine does not have; tests never
# depend on it.
container: $(CMDS:%=container-%)
container-%: build-%
	docker build -t $*:latest -f release-tools/Dockerfile --build-arg binary=./bin/$* --label revision=$(REV) .

# csi-fence-attacher with the fence agents (release-tools/Dockerfile.power-fencing),
# tagged <name>:latest-power-fencing.
container-power-fencing: build-csi-fence-attacher
	docker build -t csi-fence-attacher:latest-power-fencing -f release-tools/Dockerfile.power-fencing --build-arg binary=./bin/csi-fence-attacher --label revision=$(REV) .

# The release images without a container engine (hack/tools/images,
# internal/imagebuild): static binaries of IMAGE_CMDS for every platform of
# IMAGE_PLATFORMS, one reproducible multi-platform OCI image index per command
# (the same sources give the same digest), tagged
# $(REGISTRY_NAME)/<cmd>:$(VERSION) (pkg/version's Dev without a tag), laid
# out as OCI layout directories $(IMAGES_DIR)/<cmd>. The same layout as
# `make container`'s: /entrypoint, user 65532. Copy one to a registry with
# e.g. `crane push $(IMAGES_DIR)/<cmd> REF` or `skopeo copy --all oci:DIR docker://REF`.
IMAGES_DIR ?= _output/images
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
images:
	$(GO) run ./hack/tools/images --version '$(VERSION)' --commit '$(COMMIT)' --registry '$(REGISTRY_NAME)' \
		--platforms '$(IMAGE_PLATFORMS)' --out '$(IMAGES_DIR)' $(IMAGE_CMDS)

# A release (internal/release, hack/tools/release; docs/releasing.md): `make
# release VERSION=vX.Y.Z` from a work tree without changes writes into
# $(DIST_DIR) the binaries of CMDS for IMAGE_PLATFORMS and kubectl-fence
# for PLUGIN_PLATFORMS too (archives, SHA256SUMS, a CycloneDX SBOM each),
# the images of IMAGE_CMDS as OCI layouts with their SBOMs attached, the
# chart packaged at the version, the kustomize manifests with the images
# pinned to it, the krew manifest and the CHANGELOG's section. It refuses
# a malformed version or a work tree with changes. VERSION must be given:
# git describe's default would name a commit after a tag.
DIST_DIR ?= dist
PLUGIN = kubectl-fence
PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64,windows/arm64
release:
	$(if $(filter command line environment,$(origin VERSION)),,$(error make release needs the version: make release VERSION=vX.Y.Z))
	$(GO) run $(GO_FLAGS) ./hack/tools/release --version '$(VERSION)' --cmds '$(CMDS)' --image-cmds '$(IMAGE_CMDS)' \
		--platforms '$(IMAGE_PLATFORMS)' --plugin '$(PLUGIN)' --plugin-platforms '$(PLUGIN_PLATFORMS)' \
		--registry '$(REGISTRY_NAME)' --out '$(DIST_DIR)'

# The plugin builds for the laptops it runs on, not only for Linux: one
# cross-build per other OS (the architectures only matter to assembly,
# which the plugin's dependencies do not have per OS; make release builds
# them all). A few minutes cold (client-go compiled once per OS), seconds
# warm.
PLUGIN_VERIFY_PLATFORMS ?= darwin/arm64 windows/amd64
test-crossbuild:
	set -e; for p in $(PLUGIN_VERIFY_PLATFORMS); do \
		echo "go build $(PLUGIN) for $$p"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build $(GO_FLAGS) -o /dev/null ./$(CMDS_DIR)/$(PLUGIN); done

push: $(CMDS:%=push-%)
push-%: container-%
	set -e; for tag in $(IMAGE_TAGS); do \
		docker tag $*:latest $(REGISTRY_NAME)/$*:$$tag; docker push $(REGISTRY_NAME)/$*:$$tag; done

# Unit tests (no network, no control plane), with the race detector. Not
# go test's default of 10 minutes a package: on a machine with an empty Go
# build cache, internal/imagebuild's TestRelease cross-compiles the mock
# driver for arm64 from scratch, which took longer than that on 2 cores.
test-go:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m ./...

# The static checks; each fails naming what it found. make test runs them
# (test-units), installing what they need itself: golangci-lint built from
# the Go module proxy into ~/.cache/fence-attacher/tools (about a minute
# cold), shellcheck with apt, controller-gen from hack/tools/codegen into
# the same cache (about 30 s cold).
verify: test-fmt test-vet test-vendor test-boilerplate test-shellcheck test-lint test-codegen test-crossbuild
test-fmt:
	./release-tools/verify-gofmt.sh
test-vet:
	$(GO) vet $(GO_FLAGS) ./...
	$(GO) vet $(GO_FLAGS) -tags e2e ./test/e2e/...
test-vendor:
	./release-tools/verify-gomod.sh
# The licence header on every Go file and shell script
# (hack/update-boilerplate.sh adds it).
test-boilerplate:
	./hack/verify-boilerplate.sh
test-shellcheck:
	./hack/verify-shellcheck.sh
# golangci-lint (.golangci.yml) over the main module, e2e tests included,
# and deploy/helm's.
test-lint:
	./hack/verify-golangci-lint.sh
# The CRDs (kustomize's and the chart's copy) and DeepCopy generated from
# pkg/apis' Go types are not stale (hack/update-codegen.sh regenerates them).
test-codegen:
	./hack/verify-codegen.sh

clean:
	rm -rf bin $(IMAGES_DIR) $(DIST_DIR)

.PHONY: build container images release test-crossbuild push test-go verify test-fmt test-vet test-vendor test-boilerplate test-shellcheck test-lint test-codegen clean
