package rollout

import (
	"testing"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd the state-machine tests carry
// their plans out on: server-side apply, defaulting, validation and
// managedFields come from Kubernetes itself, never from a test imitation.
// It runs no controllers; the tests play the Deployment controller by
// writing Deployment status.
var env *testenv.Environment

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}
