//go:build tools

package hack

import (
	_ "github.com/argoproj/argo-cd/gitops-engine/v3/pkg/health"
	_ "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	_ "github.com/fluxcd/pkg/runtime/cel"
	_ "github.com/fluxcd/pkg/runtime/conditions"
	_ "github.com/fluxcd/pkg/runtime/controller"
	_ "github.com/fluxcd/pkg/runtime/events"
	_ "github.com/fluxcd/pkg/runtime/patch"
	_ "github.com/fluxcd/pkg/runtime/conditions/check"
	_ "github.com/fluxcd/pkg/runtime/predicates"
	_ "github.com/fluxcd/pkg/runtime/client"
	_ "github.com/fluxcd/pkg/runtime/logger"
	_ "github.com/fluxcd/pkg/runtime/leaderelection"
	_ "github.com/fluxcd/pkg/runtime/probes"
	_ "github.com/fluxcd/pkg/ssa"
	_ "github.com/yuin/gopher-lua"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "k8s.io/client-go/kubernetes"
)
