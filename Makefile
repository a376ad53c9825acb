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
# The oldest Kubernetes minor the operator supports (its latest patch the
# module proxy serves): `make test-compat` runs the CRD install and the core
# end-to-end tests against it (README, "Supported Kubernetes versions").
KUBE_COMPAT_VERSION ?= v1.34.4
ETCD_VERSION ?= v3.6.16
CONTROLLER_GEN_VERSION ?= v0.23.0
CRD_REF_DOCS_VERSION ?= v0.3.0
KWOK_VERSION ?= v0.8.0
# Flux: kustomize-controller, the flux CLI and the source-controller release
# whose GitRepository CRD they read (the CLI's own dependency).
KUSTOMIZE_CONTROLLER_VERSION ?= v1.9.6
FLUX_VERSION ?= v2.9.5
SOURCE_CONTROLLER_VERSION ?= v1.9.5
# notification-controller, which delivers Alerts (hack/tools/flux-notification).
NOTIFICATION_CONTROLLER_VERSION ?= v1.9.3
# Argo CD, whose own util/lua tests `make argocd-upstream` runs on our folder.
ARGOCD_VERSION ?= v3.6.1
# promtool (Prometheus' Go module), which checks and tests examples/monitoring.
PROMETHEUS_VERSION ?= v0.316.0

# The control-plane binaries, built from Go modules (hack/tools/*), live in one
# directory per version pair; KUBEBUILDER_ASSETS points envtest at it.
TESTBIN := $(BIN)/k8s/$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
KUBE_APISERVER := $(TESTBIN)/kube-apiserver
ETCD := $(TESTBIN)/etcd
KUBE_CONTROLLER_MANAGER := $(TESTBIN)/kube-controller-manager
KUBE_SCHEDULER := $(TESTBIN)/kube-scheduler
# The same control plane at KUBE_COMPAT_VERSION (hack/tools/kube-compat),
# with the same etcd.
COMPAT_TESTBIN := $(BIN)/k8s/$(KUBE_COMPAT_VERSION)-etcd-$(ETCD_VERSION)
COMPAT_KUBE_BINARIES := $(addprefix $(COMPAT_TESTBIN)/,kube-apiserver kube-controller-manager kube-scheduler)
KWOK := $(BIN)/kwok-$(KWOK_VERSION)/kwok
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
CRD_REF_DOCS := $(BIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
FLUXBIN := $(BIN)/flux-$(FLUX_VERSION)-kc-$(KUSTOMIZE_CONTROLLER_VERSION)
KUSTOMIZE_CONTROLLER := $(FLUXBIN)/kustomize-controller
FLUX := $(FLUXBIN)/flux
FLUX_CRDS := $(FLUXBIN)/crds/.done-all-sources
NOTIFICATION_DIR := $(FLUXBIN)/notification-controller-$(NOTIFICATION_CONTROLLER_VERSION)
NOTIFICATION_CONTROLLER := $(NOTIFICATION_DIR)/notification-controller
NOTIFICATION_CRDS := $(NOTIFICATION_DIR)/crds/.done
PROMTOOL := $(BIN)/promtool-$(PROMETHEUS_VERSION)/promtool

export KUBEBUILDER_ASSETS := $(TESTBIN)
# pkg/minicluster finds kwok through OPENMED_KWOK.
export OPENMED_KWOK := $(KWOK)
# The end-to-end suite finds kustomize-controller, flux and their CRDs here.
export OPENMED_FLUX_DIR := $(FLUXBIN)
# ... and notification-controller with its CRDs (crds/) here.
export OPENMED_FLUX_NOTIFICATION_DIR := $(NOTIFICATION_DIR)

# The e2e package runs longer than go test's default 10 minutes on the
# 2-core CI machine.
GO_TEST_FLAGS ?= -count=1 -timeout 45m

.PHONY: all
all: build

# `make run ONCE=1` ends the demo after its summary; RUN_FLAGS passes more flags.
ONCE ?=
RUN_FLAGS ?=

.PHONY: run
run: clusterbin ## Start a local cluster and the operator and show the OpenMedModel lifecycle live (ONCE=1 ends after the summary).
	go run ./cmd/openmed-demo $(if $(ONCE),--once) $(RUN_FLAGS)

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

.PHONY: clusterbin
clusterbin: testbin $(KUBE_CONTROLLER_MANAGER) $(KUBE_SCHEDULER) $(KWOK) ## Build the rest of the local control plane (controller-manager, scheduler, kwok) into bin/ (cached).

$(KUBE_CONTROLLER_MANAGER): hack/tools/kube/go.mod
	@mkdir -p $(TESTBIN)
	@echo ">> building kube-controller-manager $(KUBE_VERSION) from Go modules"
	cd hack/tools/kube && go build -o $@.tmp k8s.io/kubernetes/cmd/kube-controller-manager && mv $@.tmp $@

$(KUBE_SCHEDULER): hack/tools/kube/go.mod
	@mkdir -p $(TESTBIN)
	@echo ">> building kube-scheduler $(KUBE_VERSION) from Go modules"
	cd hack/tools/kube && go build -o $@.tmp k8s.io/kubernetes/cmd/kube-scheduler && mv $@.tmp $@

$(KWOK): hack/tools/kwok/go.mod
	@mkdir -p $(dir $@)
	@echo ">> building kwok $(KWOK_VERSION) from Go modules"
	cd hack/tools/kwok && go build -o $@.tmp sigs.k8s.io/kwok/cmd/kwok && mv $@.tmp $@

.PHONY: compatbin
compatbin: $(COMPAT_KUBE_BINARIES) $(COMPAT_TESTBIN)/etcd ## Build kube-apiserver, kube-controller-manager and kube-scheduler at KUBE_COMPAT_VERSION from Go modules into bin/ (cached).

$(COMPAT_KUBE_BINARIES): hack/tools/kube-compat/go.mod
	@mkdir -p $(@D)
	@echo ">> building $(@F) $(KUBE_COMPAT_VERSION) from Go modules (first time: several minutes)"
	cd hack/tools/kube-compat && go build -o $@.tmp k8s.io/kubernetes/cmd/$(@F) && mv $@.tmp $@

# The etcd of TESTBIN (the same ETCD_VERSION, part of both directories'
# names), built first when missing: a hard link, or a copy.
$(COMPAT_TESTBIN)/etcd:
	@mkdir -p $(@D)
	@[ -x $(ETCD) ] || $(MAKE) --no-print-directory $(ETCD)
	ln -f $(ETCD) $@ 2>/dev/null || cp $(ETCD) $@

.PHONY: fluxbin
fluxbin: $(KUSTOMIZE_CONTROLLER) $(FLUX) $(FLUX_CRDS) $(NOTIFICATION_CONTROLLER) $(NOTIFICATION_CRDS) ## Build Flux's kustomize-controller, notification-controller and flux CLI from Go modules into bin/ (cached), with their CRDs.

$(KUSTOMIZE_CONTROLLER): hack/tools/flux/go.mod
	@mkdir -p $(@D)
	@echo ">> building kustomize-controller $(KUSTOMIZE_CONTROLLER_VERSION) from Go modules"
	cd hack/tools/flux && go build -trimpath -ldflags=-s -o $@.tmp github.com/fluxcd/kustomize-controller && mv $@.tmp $@

$(NOTIFICATION_CONTROLLER): hack/tools/flux-notification/go.mod
	@mkdir -p $(@D)
	@echo ">> building notification-controller $(NOTIFICATION_CONTROLLER_VERSION) from Go modules"
	cd hack/tools/flux-notification && go build -trimpath -ldflags=-s -o $@.tmp github.com/fluxcd/notification-controller && mv $@.tmp $@

# The Alert, Provider and Receiver CRDs as notification-controller ships them;
# TestFlux installs them itself (it shows the Alert CRD before and after the
# patch examples/flux/alert-crd-patch.yaml).
$(NOTIFICATION_CRDS):
	@mkdir -p $(@D)
	nc="$$(go mod download -json github.com/fluxcd/notification-controller@$(NOTIFICATION_CONTROLLER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	cp "$$nc"/config/crd/bases/notification.toolkit.fluxcd.io_*.yaml $(@D)/; \
	chmod u+w $(@D)/*.yaml; touch $@

# The flux CLI's module embeds install manifests its release build generates;
# the CLI is built from a copy of the module with a placeholder instead
# (`flux install` and `flux bootstrap` are not used here).
$(FLUX):
	@mkdir -p $(@D)
	@echo ">> building the flux CLI $(FLUX_VERSION) from Go modules"
	src="$$(go mod download -json github.com/fluxcd/flux2/v2@$(FLUX_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	rm -rf $(FLUXBIN)/src && cp -r "$$src" $(FLUXBIN)/src && chmod -R u+w $(FLUXBIN)/src; \
	mkdir -p $(FLUXBIN)/src/cmd/flux/manifests; \
	echo '# placeholder: this build carries no install manifests' > $(FLUXBIN)/src/cmd/flux/manifests/placeholder.yaml; \
	cd $(FLUXBIN)/src && go build -trimpath -ldflags="-s -X main.VERSION=$(FLUX_VERSION:v%=%)" -o $@.tmp ./cmd/flux
	mv $@.tmp $@ && rm -rf $(FLUXBIN)/src

# kustomize-controller watches all three source kinds and starts no worker
# until each CRD serves.
$(FLUX_CRDS):
	@mkdir -p $(@D)
	kc="$$(go mod download -json github.com/fluxcd/kustomize-controller@$(KUSTOMIZE_CONTROLLER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	sc="$$(go mod download -json github.com/fluxcd/source-controller@$(SOURCE_CONTROLLER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	cp "$$kc"/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml \
	   "$$sc"/config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml \
	   "$$sc"/config/crd/bases/source.toolkit.fluxcd.io_ocirepositories.yaml \
	   "$$sc"/config/crd/bases/source.toolkit.fluxcd.io_buckets.yaml $(@D)/; \
	chmod u+w $(@D)/*.yaml; touch $@

.PHONY: promtool
promtool: $(PROMTOOL) ## Build promtool from Prometheus' Go module into bin/ (cached).

$(PROMTOOL): hack/tools/promtool/go.mod
	@mkdir -p $(@D)
	@echo ">> building promtool $(PROMETHEUS_VERSION) from Go modules"
	cd hack/tools/promtool && go build -trimpath -ldflags=-s -o $@.tmp github.com/prometheus/prometheus/cmd/promtool && mv $@.tmp $@

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)/.controller-gen
	GOBIN=$(BIN)/.controller-gen go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/.controller-gen/controller-gen $@

$(CRD_REF_DOCS):
	@mkdir -p $(BIN)/.crd-ref-docs
	GOBIN=$(BIN)/.crd-ref-docs go install github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION)
	mv $(BIN)/.crd-ref-docs/crd-ref-docs $@

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) $(CRD_REF_DOCS) ## Generate deepcopy code, the CRD, the RBAC, the ValidatingWebhookConfiguration and the API reference (docs/api) from kubebuilder markers and the Go types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./pkg/api/...
	$(CONTROLLER_GEN) crd paths=./pkg/api/... output:crd:artifacts:config=kustomize/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=openmed-operator paths="./controllers/...;./cmd/openmed-operator/app/..." output:rbac:artifacts:config=kustomize/rbac
	$(CONTROLLER_GEN) webhook paths=./pkg/webhook/... output:webhook:artifacts:config=kustomize/webhook
	go run ./health/internal/gen
	@# The API reference, rendered by hack/api-docs/templates (crd-ref-docs'
	@# markdown templates, changed to show the CEL rules and to escape for GitHub).
	$(CRD_REF_DOCS) --source-path=./pkg/api/v1alpha1 --config=hack/api-docs.yaml --renderer=markdown --templates-dir=hack/api-docs/templates --output-path=docs/api/v1alpha1.md --log-level=WARN

# Files written by `make generate`. verify-generated hashes them before and
# after regenerating, so it catches stale output whether or not the tree has
# uncommitted changes.
GENERATED = pkg/api/v1alpha1/zz_generated.deepcopy.go kustomize/crd/bases/*.yaml kustomize/rbac/role.yaml kustomize/webhook/manifests.yaml \
	health/argocd/resource_customizations/openmed.ai/OpenMedModel/health_test.yaml \
	examples/argocd/*.yaml examples/flux/*.yaml docs/api/v1alpha1.md

.PHONY: verify-generated
verify-generated: ## Fail if generated files are stale (regenerates them).
	@before="$$(cat $(GENERATED) | sha256sum)"; \
	$(MAKE) --no-print-directory generate >/dev/null; \
	after="$$(cat $(GENERATED) | sha256sum)"; \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files were stale; 'make generate' has rewritten them, review and commit:"; \
		git --no-pager diff --stat -- $(GENERATED); exit 1; fi

.PHONY: health-fixtures
health-fixtures: clusterbin ## Recapture the health fixtures from a live local cluster (then `go test ./health/...`).
	go run ./health/internal/capture

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

# The version and commit the operator and the plugin report (--version,
# openmed_build_info, the User-Agent), set with the linker symbols of
# pkg/version: the nearest v* tag (v0.0.0-dev without one), a semantic
# version as a release needs.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/openmed/openmed-operator/pkg/version
VERSION_LDFLAGS = -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT)

.PHONY: operator
operator: ## Build the operator binary into bin/ (VERSION, COMMIT: what it reports).
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $(VERSION_LDFLAGS)" -o $(BIN)/openmed-operator ./cmd/openmed-operator

.PHONY: plugin
plugin: ## Build the kubectl plugin into bin/kubectl-openmed (put bin/ on PATH for `kubectl openmed`; VERSION, COMMIT: what it reports).
	CGO_ENABLED=0 go build -trimpath -ldflags="$(VERSION_LDFLAGS)" -o $(BIN)/kubectl-openmed ./cmd/kubectl-openmed

##@ Release

# A release is VERSION at COMMIT; the commit's time is stamped on every file
# of the image, so the same commit builds the same digest. IMAGE is the
# repository its image is pushed to and its manifests pull from.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
REGISTRY ?= ghcr.io/openmed
IMAGE ?= $(REGISTRY)/openmed-operator
DIST ?= dist
RELEASE_FLAGS = --out $(DIST) --version $(VERSION) --commit $(COMMIT) --image $(IMAGE)

.PHONY: image
image: ## Build the operator image without Docker (linux/amd64, linux/arm64) as an OCI layout in dist/oci, with its digest (dist/image.digest) and SPDX SBOM.
	go run ./hack/release image $(RELEASE_FLAGS) --source-date-epoch $(SOURCE_DATE_EPOCH)

.PHONY: image-push
image-push: image ## Push the image to $(IMAGE):$(VERSION), e.g. make image-push REGISTRY=registry.example.com/team VERSION=v0.2.0 (credentials: ~/.docker/config.json).
	go run ./hack/release push $(RELEASE_FLAGS)

.PHONY: release
release: image ## Write dist/install.yaml, install-lockdown.yaml and crds.yaml pinned to the image's digest, the kubectl plugins (linux, darwin; amd64, arm64) and checksums.txt.
	go run ./hack/release release $(RELEASE_FLAGS)

.PHONY: test
test: clusterbin fluxbin argocdbin verify-generated vet argocd-upstream monitoring ## Run every test: real kube-apiserver and etcd, the local control plane, Flux, Argo CD's own Lua tests, promtool; check that every test docs/claims.md names passed; then the fast mutants.
	OPENMED_SCALE_STEADY=5s OPENMED_SCALE_SHARDS=2 go run ./hack/testrun -claims docs/claims.md -- $(GO_TEST_FLAGS) ./...
	cd examples/library && go build -o /dev/null . && go vet ./...
	hack/mutants/run.sh --fast

.PHONY: e2e
e2e: clusterbin fluxbin argocdbin ## Run only the end-to-end tests (local control plane, Flux, Argo CD, operator binary).
	go test $(GO_TEST_FLAGS) -v ./e2e/

# What test-compat runs against KUBE_COMPAT_VERSION: the CRD's install (served
# as generated, its defaults, the verdicts of its OpenAPI schema and CEL
# rules against the Go validator's, every kustomize bundle applied) and the
# core end-to-end tests (rollout, automatic rollback, bake, deletion).
COMPAT_TESTS ?= ^(TestCRDServedAsGenerated|TestExampleDefaults|TestDifferentialValidation|TestOverlaysApply|TestRollout|TestAutomaticRollback|TestBake|TestDeletion)$$

.PHONY: test-compat
test-compat: compatbin $(KWOK) ## Run the CRD install and the core end-to-end tests (rollout, automatic rollback, bake, deletion) against the oldest supported Kubernetes, KUBE_COMPAT_VERSION.
	KUBEBUILDER_ASSETS=$(COMPAT_TESTBIN) go test $(GO_TEST_FLAGS) -v -run '$(COMPAT_TESTS)' ./pkg/validation/ ./kustomize/ ./e2e/ \
		| grep -E -v '^=== (RUN|PAUSE|CONT)'

.PHONY: fuzz
fuzz: ## Fuzz the validator and the decision core for FUZZTIME each (default 60s).
	go test ./pkg/validation -run '^$$' -fuzz FuzzValidateJSON -fuzztime $(or $(FUZZTIME),60s)
	go test ./pkg/rollout -run '^$$' -fuzz FuzzDecideSequences -fuzztime $(or $(FUZZTIME),60s)

# N is the list of sizes `make bench-scale` runs, e.g. N=100,1000,10000.
# PODS=off runs without pods (and without the bake guard); BAKE=off|on|both
# picks the bake variants; VERIFY=on runs each N once more with models that
# declare a golden request (spec.verification), each pod served over HTTP
# on its own loopback IP (VERIFY=only: that run alone); UNOWNED=k runs each
# N again with k×N Deployments no model targets; SHARDS=s runs each N again
# on s operator processes.
N ?= 100,1000
PODS ?= on
BAKE ?= both
VERIFY ?= off
UNOWNED ?= 0
SHARDS ?= 1
# The benchmark writes its figures to BENCH_JSON (only when every assertion
# held). The docs' tables are generated from two files: the default one
# (docs/scale.md's table, README.md's row) and the golden request's, which
# `make bench-scale N=100 BAKE=off VERIFY=on BENCH_JSON=docs/scale/verification.json`
# writes (docs/scale.md's table of the golden request). After a run that
# wrote one of them, bench-scale runs `make docs-figures`.
BENCH_JSON_DEFAULT := docs/scale/results.json
BENCH_JSON_VERIFICATION := docs/scale/verification.json
BENCH_JSON ?= $(BENCH_JSON_DEFAULT)

.PHONY: bench-scale
bench-scale: testbin ## The scale benchmark: the operator process against a real API server with N models; calls per model, times, CPU, memory (written to BENCH_JSON, then the docs' tables).
	@mkdir -p $(dir $(BENCH_JSON))
	OPENMED_SCALE_N=$(N) OPENMED_SCALE_PODS=$(PODS) OPENMED_SCALE_BAKE=$(BAKE) OPENMED_SCALE_VERIFY=$(VERIFY) OPENMED_SCALE_UNOWNED=$(UNOWNED) OPENMED_SCALE_SHARDS=$(SHARDS) \
		OPENMED_SCALE_JSON=$(abspath $(BENCH_JSON)) \
		go test -count=1 -timeout 300m -v -run TestScale ./e2e/scale | grep -v '^=== RUN'
	@case "$(abspath $(BENCH_JSON))" in "$(abspath $(BENCH_JSON_DEFAULT))"|"$(abspath $(BENCH_JSON_VERIFICATION))") $(MAKE) --no-print-directory docs-figures;; esac

.PHONY: docs-figures
docs-figures: ## Regenerate the scale tables of docs/scale.md and README.md from docs/scale/results.json and docs/scale/verification.json, and the waves of docs/fleet.md from docs/fleet/waves.json.
	go run ./hack/scaletable docs/scale.md README.md docs/fleet.md

# The fleet tests (TestFleetArgoCD, TestFleetFlux: three rings on two local
# control planes) are part of `make test`; bench-fleet runs them alone and
# writes their figures.
FLEET_JSON := docs/fleet/waves.json

.PHONY: bench-fleet
bench-fleet: clusterbin fluxbin argocdbin ## Run the fleet tests (Argo CD's progressive syncs and Flux's dependsOn over three rings on two control planes) and write their time per wave to docs/fleet/waves.json, then docs/fleet.md's table.
	@mkdir -p $(dir $(FLEET_JSON))
	OPENMED_FLEET_JSON=$(abspath $(FLEET_JSON)) go test -count=1 -timeout 30m -v -run '^TestFleet' ./e2e/ | grep -v '^=== RUN'
	$(MAKE) --no-print-directory docs-figures

# MUTANTS="name ..." runs some of hack/mutants/mutants.tsv.
MUTANTS ?=

.PHONY: mutants
mutants: clusterbin fluxbin argocdbin ## Break each claimed behaviour on purpose (hack/mutants) and check that its test fails.
	hack/mutants/run.sh $(MUTANTS)

.PHONY: chaos
chaos: testbin ## The fault suite in full: 12 models under API faults (3 seeds), 10 SIGKILLs, a leader handover.
	OPENMED_CHAOS=full go test -count=1 -timeout 90m -v -run TestChaos ./e2e/chaos | grep -v '^=== RUN'

# Argo CD's own tests on our resource customization, as an upstream PR would
# run them: argo-cd's module (without docs and manifests) at ARGOCD_VERSION
# with its nested gitops-engine module, our folder copied into
# resource_customizations/, the test-normalizer case of
# health/argocd/upstream/test-normalizer.patch applied, the generated actions
# list checked against health/argocd/UPSTREAM.md, then util/lua's
# TestLuaHealthScript and TestLuaResourceActionsScript.
ARGOCD_SRC := $(BIN)/argo-cd-$(ARGOCD_VERSION)
ARGOCD_COPY := $(ARGOCD_SRC)/.done-with-ui

# The copy of argo-cd's module both the upstream tests and the Argo CD build
# use (building inside it keeps argo-cd's own replace directives).
$(ARGOCD_COPY):
	@echo ">> copying argo-cd $(ARGOCD_VERSION) from the module cache"
	src="$$(go mod download -json github.com/argoproj/argo-cd/v3@$(ARGOCD_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	eng="$$(go mod download -json github.com/argoproj/argo-cd/gitops-engine/v3@$(ARGOCD_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	rm -rf $(ARGOCD_SRC) && mkdir -p $(ARGOCD_SRC)/docs/operator-manual; \
	tar -C "$$src" --exclude=./docs --exclude=./manifests -cf - . | tar -C $(ARGOCD_SRC) -xf -; \
	cp "$$src"/docs/operator-manual/resource_actions_builtin.md $(ARGOCD_SRC)/docs/operator-manual/; \
	mkdir -p $(ARGOCD_SRC)/crds && cp "$$src"/manifests/crds/application-crd.yaml "$$src"/manifests/crds/appproject-crd.yaml $(ARGOCD_SRC)/crds/; \
	cp -r "$$eng" $(ARGOCD_SRC)/gitops-engine; \
	chmod -R u+w $(ARGOCD_SRC); \
	cp $(ARGOCD_SRC)/util/lua/custom_actions_test.go $(ARGOCD_SRC)/.custom_actions_test.go.orig; \
	cp $(ARGOCD_SRC)/docs/operator-manual/resource_actions_builtin.md $(ARGOCD_SRC)/.actions-before.md
	touch $@

# Argo CD itself: the multi-call `argocd` binary (run as
# argocd-application-controller, argocd-repo-server, argocd-server and the
# CLI), its Application and AppProject CRDs as the module ships them, and
# the git-verify-wrapper.sh its repo server runs. Built inside the copy.
ARGOCD_DIR := $(BIN)/argocd-$(ARGOCD_VERSION)
ARGOCD := $(ARGOCD_DIR)/argocd
export OPENMED_ARGOCD_DIR := $(ARGOCD_DIR)

.PHONY: argocdbin
argocdbin: $(ARGOCD) $(ARGOCD_DIR)/notifications-catalog.yaml $(ARGOCD_DIR)/crds/applicationset-crd.yaml redis ## Build Argo CD from its Go module into bin/ (cached) and make sure redis-server is installed.

# Argo CD's notification catalog as the module ships it (users install it
# with kubectl apply); the suite's argocd-notifications-cm starts from it.
$(ARGOCD_DIR)/notifications-catalog.yaml: $(ARGOCD_COPY)
	@mkdir -p $(@D)
	cp $(ARGOCD_SRC)/notifications_catalog/install.yaml $@

# The ApplicationSet CRD as the module ships it (the fleet's progressive
# syncs).
$(ARGOCD_DIR)/crds/applicationset-crd.yaml:
	@mkdir -p $(@D)
	src="$$(go mod download -json github.com/argoproj/argo-cd/v3@$(ARGOCD_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')"; \
	cp "$$src"/manifests/crds/applicationset-crd.yaml $@.tmp && chmod u+w $@.tmp && mv $@.tmp $@

$(ARGOCD): $(ARGOCD_COPY)
	@mkdir -p $(@D)/crds
	@echo ">> building Argo CD $(ARGOCD_VERSION) from its Go module (first time: several minutes)"
	cd $(ARGOCD_SRC) && go build -trimpath -ldflags="-s -X github.com/argoproj/argo-cd/v3/common.version=$(ARGOCD_VERSION:v%=%)" -o $@.tmp ./cmd
	cp $(ARGOCD_SRC)/crds/*.yaml $(@D)/crds/
	cp $(ARGOCD_SRC)/hack/git-verify-wrapper.sh $(@D)/ && chmod +x $(@D)/git-verify-wrapper.sh
	mv $@.tmp $@

# Redis, which Argo CD's controller and API server need: the real server
# from Debian's package (installed when missing; CI runs as root).
.PHONY: redis
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo ">> installing Debian's redis-server"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@# The package starts a system redis on port 6379; the tests run their own.
	@if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then systemctl stop redis-server; fi
	@if pgrep -x redis-server >/dev/null && [ -f /etc/init.d/redis-server ]; then /etc/init.d/redis-server stop >/dev/null 2>&1 || true; fi

.PHONY: argocd-upstream
argocd-upstream: $(ARGOCD_COPY) ## Run Argo CD's own Lua health and action tests with our folder in resource_customizations/.
	rm -rf $(ARGOCD_SRC)/resource_customizations/openmed.ai
	cp -r health/argocd/resource_customizations/openmed.ai $(ARGOCD_SRC)/resource_customizations/
	cp $(ARGOCD_SRC)/.custom_actions_test.go.orig $(ARGOCD_SRC)/util/lua/custom_actions_test.go
	cd $(ARGOCD_SRC) && patch -p1 --quiet < $(CURDIR)/health/argocd/upstream/test-normalizer.patch
	cd $(ARGOCD_SRC) && bash hack/generate-actions-list.sh
	@diff $(ARGOCD_SRC)/.actions-before.md $(ARGOCD_SRC)/docs/operator-manual/resource_actions_builtin.md | sed -n 's/^> //p' > $(ARGOCD_SRC)/.actions-added.md || true
	@grep '^- \[openmed.ai/' health/argocd/UPSTREAM.md | diff - $(ARGOCD_SRC)/.actions-added.md \
		|| { echo "health/argocd/UPSTREAM.md does not list the actions hack/generate-actions-list.sh adds (above)"; exit 1; }
	@cd $(ARGOCD_SRC) && { go test -count=1 ./util/lua -run 'TestLuaHealthScript|TestLuaResourceActionsScript' -v > .test.log 2>&1; rc=$$?; \
		grep -E '^(ok|FAIL|PASS)|^--- |^    --- .*openmed.ai' .test.log; \
		if [ $$rc -ne 0 ]; then grep -A14 'Error Trace' .test.log | head -120; exit $$rc; fi; }

.PHONY: monitoring
monitoring: $(PROMTOOL) ## Check and unit-test the Prometheus alerts in examples/monitoring with promtool.
	cd examples/monitoring && $(PROMTOOL) check rules rules.yaml && $(PROMTOOL) test rules rules_test.yaml

.PHONY: bench
bench: ## Run the benchmarks and print their figures.
	go test ./pkg/rollout ./health/... -run '^$$' -bench . -benchmem

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
