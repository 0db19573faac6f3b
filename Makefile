# plumb's build, test and demo entry points. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Tools that plumb builds for itself land here (git ignores it).
LOCALBIN := $(CURDIR)/bin
CONTROLLER_GEN := $(LOCALBIN)/controller-gen

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# Every test (unit, integration against a local control plane, e2e) runs in
# one `go test`; packages run in parallel, each with its own local cluster.
TEST_FLAGS ?= -count=1 -timeout 45m
# Every native fuzz target runs this many executions in `make test` (more: make fuzz
# FUZZTIME=2000000x). A count, not a duration: Go 1.26's fuzz coordinator can fail a
# duration-bounded run with a spurious "context deadline exceeded" (golang/go#75804).
FUZZTIME ?= 50000x
# Packages whose shared state is read from many goroutines run again under the
# race detector (not internal/source/render: the detector cannot allocate its shadow memory
# under the render sandbox's memory limit).
RACE_PACKAGES := ./internal/source/git ./informers/compact ./internal/digest ./queue ./internal/notify \
	./internal/source ./internal/source/oci ./internal/source/helmrepo ./internal/source/bucket ./webhook
# package:target[:executions] — a target whose executions are slow (a whole
# Kustomize build each) runs fewer.
FUZZ_TARGETS := ./internal/source/manifest:FuzzParse ./internal/source/tree:FuzzResolve ./internal/repourl:FuzzCanonical ./webhook:FuzzHandler \
	./internal/source/render:FuzzKustomizeResources:3000x ./internal/source/helmrepo:FuzzParseIndex:20000x

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: demo
demo: controlplane ## Run plumb on a local control plane it starts, narrated (Ctrl-C stops it; DEMO_EXIT=1 exits after the story).
	go run ./hack/demo

.PHONY: test
test: controlplane tools browser ## Run every test: unit, integration and e2e, then each fuzz target briefly.
	go test $(TEST_FLAGS) ./...
	go test -race $(TEST_FLAGS) $(RACE_PACKAGES)
	@$(MAKE) --no-print-directory fuzz

.PHONY: fuzz
fuzz: ## Run each native fuzz target for FUZZTIME executions (default 50000x).
	@for target in $(FUZZ_TARGETS); do \
		IFS=: read -r pkg name count <<< "$$target"; count="$${count:-$(FUZZTIME)}"; \
		echo "go test -run '^$$' -fuzz '^$$name\$$' -fuzztime $$count $$pkg"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime "$$count" "$$pkg" 2>&1 | grep -v '^fuzz: elapsed'; \
	done

.PHONY: bench
bench: controlplane tools bench-micro ## Measure plumb beside Flux-style, Argo-style and naive baselines (full sizes), and the micro-benchmarks.
	go run ./hack/bench --json
	go run ./hack/bench --shards

.PHONY: bench-quick
bench-quick: controlplane tools ## The performance harness at smaller sizes (a few minutes).
	go run ./hack/bench --quick --json
	go run ./hack/bench --quick --shards

.PHONY: bench-micro
bench-micro: controlplane tools ## The Go micro-benchmarks of internal/source/, internal/diff/ and internal/ui/, each beside its baseline.
	go test -run '^$$' -bench . -benchmem ./internal/source/... ./internal/diff/ ./internal/ui/

.PHONY: build
build: ## Build bin/plumb.
	go build -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/plumb ./cmd/plumb

# The container image: a static binary on an empty base (package ociimage),
# written without a container engine. Its time is the commit's, so two
# builds of one commit give one digest.
IMAGE_ARCH ?= amd64
IMAGE_REPOSITORY ?= ghcr.io/plumb-dev/plumb
IMAGE_TAR ?= $(LOCALBIN)/plumb-image.tar
IMAGE_CREATED ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
STATIC_BINARY := $(LOCALBIN)/linux-$(IMAGE_ARCH)/plumb

.PHONY: image
image: ## Build plumb's OCI image into bin/plumb-image.tar (no Docker needed) and print its reference and digest.
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "$(LDFLAGS) -s -w -buildid=" -o $(STATIC_BINARY) ./cmd/plumb
	go run ./hack/image --binary $(STATIC_BINARY) --arch $(IMAGE_ARCH) --version $(VERSION) --commit $(COMMIT) \
		--created $(IMAGE_CREATED) --repository $(IMAGE_REPOSITORY) --source https://github.com/plumb-dev/plumb --out $(IMAGE_TAR)

.PHONY: controlplane
controlplane: ## Build the local control plane's binaries into the user cache (once; ~9 minutes cold).
	bash hack/controlplane.sh

.PHONY: tools
tools: ## Build promtool, Alertmanager, the OCI registry, cosign and versitygw, which tests run, into the user cache (once; ~10 minutes cold).
	bash hack/tools.sh

.PHONY: browser
browser: ## Install Debian's Chromium, which the dashboard's tests drive, when it is missing (about a minute).
	bash hack/browser.sh

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deep-copy code and the CRD (also into the Helm chart).
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=api/v1alpha1/crd
	cp api/v1alpha1/crd/plumb.dev_apps.yaml api/v1alpha1/crd/plumb.dev_notifications.yaml charts/plumb/crds/

.PHONY: lint
lint: ## gofmt, go vet, a check that generated files are current, layers that import only downward, and commit subjects of at most 72 characters.
	@unformatted="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	bash hack/verify-generated.sh
	bash hack/verify-layers.sh
	bash hack/verify-commit-subjects.sh

$(CONTROLLER_GEN): hack/tools/codegen/go.mod
	cd hack/tools/codegen && go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen
