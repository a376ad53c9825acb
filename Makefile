# OpenMedModel operator. `make test` and `make run` install what they need.

# The module needs Go 1.27.3; the go command fetches that toolchain from the
# module proxy once, even where the installed Go is older and GOTOOLCHAIN=local.
export GOTOOLCHAIN := go1.27.3

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN := $(CURDIR)/bin

# Pinned tool versions. A version change gives a new cache key under bin/, so
# only the changed binaries are rebuilt; everything else is reused.
KUBE_VERSION ?= v1.37.0
ETCD_VERSION ?= v3.6.16
CONTROLLER_GEN_VERSION ?= v0.23.0

# The control-plane binaries, built from Go modules (hack/tools/*), live in one
# directory per version pair; KUBEBUILDER_ASSETS points envtest at it.
TESTBIN := $(BIN)/k8s/$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
KUBE_APISERVER := $(TESTBIN)/kube-apiserver
ETCD := $(TESTBIN)/etcd
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)

export KUBEBUILDER_ASSETS := $(TESTBIN)

GO_TEST_FLAGS ?= -count=1

.PHONY: all
all: build

##@ Tools

.PHONY: testbin
testbin: $(KUBE_APISERVER) $(ETCD) ## Build kube-apiserver and etcd from Go modules into bin/ (cached).

$(KUBE_APISERVER): hack/tools/kube/go.mod
	@mkdir -p $(TESTBIN)
	@echo ">> building kube-apiserver $(KUBE_VERSION) from Go modules (first time: several minutes)"
	cd hack/tools/kube && go build -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver && mv $@.tmp $@

$(ETCD): hack/tools/etcd/go.mod
	@mkdir -p $(TESTBIN)
	@echo ">> building etcd $(ETCD_VERSION) from Go modules"
	cd hack/tools/etcd && go build -o $@.tmp go.etcd.io/etcd/server/v3 && mv $@.tmp $@

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)/.controller-gen
	GOBIN=$(BIN)/.controller-gen go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.controller-gen/controller-gen $@

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code and the CRD from kubebuilder markers.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./pkg/api/...
	$(CONTROLLER_GEN) crd paths=./pkg/api/... output:crd:artifacts:config=kustomize/crd/bases

.PHONY: verify-generated
verify-generated: generate ## Fail if generated files are not committed as generated.
	@if [ -n "$$(git status --porcelain -- pkg/api kustomize)" ]; then \
		echo "generated files are stale; run 'make generate' and commit:"; \
		git status --porcelain -- pkg/api kustomize; git --no-pager diff --stat -- pkg/api kustomize; exit 1; fi

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet and check formatting.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: build
build: ## Build every package.
	go build ./...

.PHONY: test
test: testbin verify-generated vet ## Run every test against a real kube-apiserver and etcd.
	go test $(GO_TEST_FLAGS) ./...

.PHONY: fuzz
fuzz: ## Fuzz the Go validator for FUZZTIME (default 60s).
	go test ./pkg/validation -run '^$$' -fuzz FuzzValidateJSON -fuzztime $(or $(FUZZTIME),60s)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
