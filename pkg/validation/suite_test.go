package validation_test

import (
	"flag"
	"os"
	"testing"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// env is the real kube-apiserver and etcd shared by this package's tests.
var env *testenv.Environment

func TestMain(m *testing.M) {
	flag.Parse()
	// `go test -fuzz` runs only the fuzz target, in several worker processes;
	// none of them needs an API server.
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	testenv.Main(m, func(e *testenv.Environment) { env = e })
}
