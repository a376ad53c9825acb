# syntax=docker/dockerfile:1
# The openmed-operator image: a static Go binary on distroless, run as the
# distroless "nonroot" user (65532), matching the Deployment's
# runAsUser/runAsGroup in kustomize/manager/deployment.yaml.
#   docker build -t ghcr.io/openmed/openmed-operator:<tag> .

ARG GO_VERSION=1.27.3

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS
ARG TARGETARCH
# What the binary reports (--version, openmed_build_info, the User-Agent);
# `make docker-build` passes them. The build context holds no .git, so the
# go command cannot stamp them itself.
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
WORKDIR /workspace
# Dependencies first, so source edits do not invalidate the module layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X github.com/openmed/openmed-operator/pkg/version.Version=${VERSION} -X github.com/openmed/openmed-operator/pkg/version.Commit=${COMMIT}" \
      -o /out/openmed-operator ./cmd/openmed-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=builder /out/openmed-operator /openmed-operator
USER 65532:65532
ENTRYPOINT ["/openmed-operator"]
