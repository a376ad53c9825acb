package kustomize_test

import (
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd the bundles are applied to.
var env *testenv.Environment

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}
