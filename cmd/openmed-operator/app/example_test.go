package app_test

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/openmed/openmed-operator/cmd/openmed-operator/app"
)

// A shard process: the selector picks its OpenMedModels and names its own
// Lease, so shards elect leaders independently.
func ExampleOptions_ResolveScope() {
	var opts app.Options
	fs := pflag.NewFlagSet("openmed-operator", pflag.ContinueOnError)
	opts.BindFlags(fs)
	if err := fs.Parse([]string{"--watch-label-selector=sharding.fluxcd.io/key=shard1"}); err != nil {
		panic(err)
	}
	scope, err := opts.ResolveScope("openmed-system")
	if err != nil {
		panic(err)
	}
	fmt.Println(scope.Selector, scope.LeaderElectionID, scope.LeaderElectionNamespace)
	// Output: sharding.fluxcd.io/key=shard1 openmed-operator-leader-election-73fdc1be openmed-system
}
