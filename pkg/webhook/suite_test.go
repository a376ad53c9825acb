package webhook_test

import (
	"testing"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd shared by this package's tests.
var env *testenv.Environment

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}
