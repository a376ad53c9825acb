package modelserver_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// cluster is the package's local control plane; nil in -short mode.
var cluster *minicluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	// A fresh shell finds the binaries under bin/ as make sets them.
	testenv.UseBuiltBinaries()
	if err := minicluster.Binaries(minicluster.Config{}); err != nil {
		fmt.Fprintf(os.Stderr, "control-plane binaries missing, run `make %s`: %v\n", minicluster.BuildTarget, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if cluster, err = minicluster.Start(ctx, minicluster.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the cluster:", err)
		code = 1
	}
	return code
}

// requireCluster skips a test that needs the cluster in -short mode.
func requireCluster(t *testing.T) {
	t.Helper()
	if cluster == nil {
		t.Skip("starts a control plane; skipped in -short mode")
	}
}
