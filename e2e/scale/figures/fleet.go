package figures

import (
	"fmt"
	"strings"
)

// FleetJSONPath is where `make bench-fleet` writes the fleet's figures,
// from the repository's root; docs/fleet.md's block is generated from it.
const FleetJSONPath = "docs/fleet/waves.json"

// FleetRun is one engine's pass of a healthy version through the fleet's
// three rings (the end-to-end TestFleetArgoCD and TestFleetFlux).
type FleetRun struct {
	// Engine is "Argo CD" or "Flux".
	Engine string `json:"engine"`
	// BakeSeconds is the models' spec.rolloutStrategy.bakeSeconds.
	BakeSeconds int `json:"bakeSeconds"`
	// Waves are the rings in order.
	Waves []Wave `json:"waves"`
	// HeldSeconds is how long the test watched rings 2 and 3 stay as they
	// were after ring 1 failed: HeldIntervals times the engine's
	// Interval (the setting that has it look at a held ring again).
	HeldSeconds   float64 `json:"heldSeconds"`
	HeldIntervals int     `json:"heldIntervals"`
	Interval      string  `json:"interval"`
	// TestSeconds is the whole test's wall time: the second control
	// plane's start, the engine's, the first version, the healthy
	// version, the version that fails in ring 1 and its revert, the one
	// that fails in ring 2 and its revert (and, for Flux, the dependency
	// Ready at an older revision).
	TestSeconds float64 `json:"testSeconds"`
}

// Wave is one ring's passage of the healthy version, from the commit.
type Wave struct {
	Ring string `json:"ring"`
	// AppliedSeconds is from the commit until the ring's Deployment
	// carried the version; RetainedSeconds from then until the ring's
	// model retained it after its bake (rollout and bake).
	AppliedSeconds  float64 `json:"appliedSeconds"`
	RetainedSeconds float64 `json:"retainedSeconds"`
}

// FleetTable is docs/fleet.md's block: each engine's waves.
func FleetTable(f *File) (string, error) {
	if len(f.Fleet) == 0 {
		return "", fmt.Errorf("no fleet runs")
	}
	var b strings.Builder
	b.WriteString("<!-- Written by `make docs-figures` from " + FleetJSONPath + ", which `make bench-fleet` writes. Do not edit. -->\n")
	date, _, _ := strings.Cut(f.Date, "T")
	fmt.Fprintf(&b, "Measured with `make bench-fleet`, one run of each engine on %s (%d CPUs, %s); every figure below is in [`waves.json`](fleet/waves.json). The order of the waves is asserted; the times are printed, never asserted.\n\n", date, f.CPUs, f.Go)
	b.WriteString("| engine | bake | ring | commit → ring's Deployment changed | rollout and bake (→ model retained the version) | waited on the ring before (its bake's end → this ring's change) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range f.Fleet {
		for i, w := range r.Waves {
			waited := "-"
			if i > 0 {
				prev := r.Waves[i-1]
				waited = duration(w.AppliedSeconds - prev.AppliedSeconds - prev.RetainedSeconds)
			}
			fmt.Fprintf(&b, "| %s | %d s | %s | %s | %s | %s |\n", r.Engine, r.BakeSeconds, w.Ring, duration(w.AppliedSeconds), duration(w.RetainedSeconds), waited)
		}
	}
	b.WriteString("\n")
	for _, r := range f.Fleet {
		fmt.Fprintf(&b, "- %s: after ring 1 failed, rings 2 and 3 were watched unchanged for %s (%d × %s); the whole test took %s.\n",
			r.Engine, duration(r.HeldSeconds), r.HeldIntervals, r.Interval, duration(r.TestSeconds))
	}
	return b.String(), nil
}
