package minicluster

import (
	"slices"
	"testing"
)

// BenchmarkStart reports what a kube-controller-manager controller adds to
// the local control plane's start-up: the manager starts its informers
// only after it has set up every controller it runs. Each sub-benchmark
// starts and stops a whole cluster; compare them in one run
// (-benchtime=3x), not across machines.
func BenchmarkStart(b *testing.B) {
	requireBinaries(b)
	without := func(names ...string) []string {
		return slices.DeleteFunc(slices.Clone(DefaultControllers), func(c string) bool { return slices.Contains(names, c) })
	}
	for _, tc := range []struct {
		name        string
		controllers []string
	}{
		{"default", DefaultControllers},
		{"without-resourcequota", without("resourcequota-controller")},
		{"without-resourceclaim", without("resourceclaim-controller")},
		{"without-both", without("resourcequota-controller", "resourceclaim-controller")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				c, err := Start(b.Context(), Config{Controllers: tc.controllers})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := c.Stop(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
