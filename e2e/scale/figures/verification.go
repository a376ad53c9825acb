package figures

import (
	"fmt"
	"strings"
)

// VerificationTable is docs/scale.md's block on the golden request: every
// run of f (the same N without and with it), then, for each run with it,
// what its calls hold of the verification, what the pods saw, and what a
// verification cost against the run of the same shape without it.
func VerificationTable(f *File) (string, error) {
	var verified []Run
	for _, r := range f.Runs {
		if r.Verification != nil {
			verified = append(verified, r)
		}
	}
	if len(verified) == 0 {
		return "", fmt.Errorf("no run with the golden request")
	}
	var b strings.Builder
	b.WriteString(note(VerificationJSONPath))
	fmt.Fprintf(&b, "Measured with %s; every figure below is in [`verification.json`](scale/verification.json).\n", f.provenance(VerificationJSONPath))
	b.WriteString("The API calls are the operator's requests for models, counted by the API server's audit log and asserted exactly; the requests to the pods are counted by their servers; the rest is printed, never asserted.\n\n")
	b.WriteString("| N | golden request | API calls per model: first rollout / upgrade / steady state | passes per model: rollout / upgrade | operator CPU per model: rollout / upgrade | peak RSS | create → all Ready | upgrade → all Ready | failover: every model reconciled; calls for models |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range f.Runs {
		golden := "off"
		if r.Verification != nil {
			golden = "on"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s / %s | %s / %s ms | %s MiB | %s | %s | %s; %d |\n",
			thousands(r.N), golden, r.CallsText(), fixed(r.PassesPerModel.Rollout, 2), fixed(r.PassesPerModel.Upgrade, 2),
			fixed(r.CPUMsPerModel.Rollout, 2), fixed(r.CPUMsPerModel.Upgrade, 2), fixed(r.PeakRSSMiB, 1),
			duration(r.CreateReadySeconds), duration(r.UpgradeReadySeconds), duration(r.Failover.Seconds), r.Failover.Calls)
	}
	b.WriteString("\nWith the golden request, a phase's calls beyond N times a whole number are its status writes while the rollout waits for the verdicts (how many depends on whether a pass finds the two pods waiting together or one after the other; counted from a watch of the models), and ReplicaSets read by a pass that saw a new pod before the ReplicaSet store saw its ReplicaSet, each accounted for and asserted.\n\n")
	b.WriteString("| N | per model, rollout / upgrade: verdicts written (patch pods/status); status writes of the wait | golden requests, rollout / upgrade (of them asked again) | every new pod verified after: rollout / upgrade | requests to the pods: steady state; failover | operator CPU per pod verified: rollout / upgrade | against the run without the golden request: CPU per pod verified; peak RSS |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range verified {
		v := r.Verification
		n := float64(r.N)
		verdicts := func(p Phase) float64 { return float64(p.ByKind["patch pods/status"]) / n }
		// The pods a phase verifies per model: CPU per model over them.
		pods := float64(v.PodsVerified.Rollout) / n
		against := "-"
		if plain, ok := f.without(r); ok && pods > 0 {
			against = fmt.Sprintf("%+.2f / %+.2f ms; %+.1f MiB (%+.1f KiB per pod of a phase)",
				(r.CPUMsPerModel.Rollout-plain.CPUMsPerModel.Rollout)/pods, (r.CPUMsPerModel.Upgrade-plain.CPUMsPerModel.Upgrade)/pods,
				r.PeakRSSMiB-plain.PeakRSSMiB, (r.PeakRSSMiB-plain.PeakRSSMiB)*1024/float64(v.PodsVerified.Rollout))
		}
		cpu := "-"
		if pods > 0 {
			cpu = fmt.Sprintf("%s / %s ms", fixed(r.CPUMsPerModel.Rollout/pods, 2), fixed(r.CPUMsPerModel.Upgrade/pods, 2))
		}
		fmt.Fprintf(&b, "| %s | %s / %s; %s / %s | %d (%d) / %d (%d) | %s / %s | %d; %d | %s | %s |\n",
			thousands(r.N), fixed(verdicts(r.FirstRollout), 2), fixed(verdicts(r.Upgrade), 2),
			fixed(float64(v.WaitStatuses.Rollout)/n, 2), fixed(float64(v.WaitStatuses.Upgrade)/n, 2),
			v.GoldenRequests.Rollout, v.AskedAgain.Rollout, v.GoldenRequests.Upgrade, v.AskedAgain.Upgrade,
			duration(v.VerifiedSeconds.Rollout), duration(v.VerifiedSeconds.Upgrade), v.SteadyRequests, v.FailoverRequests, cpu, against)
	}
	return b.String(), nil
}

// without is the run of f of r's shape and N without the golden request.
func (f *File) without(r Run) (Run, bool) {
	for _, p := range f.Runs {
		if p.Verification == nil && p.N == r.N && p.Pods == r.Pods && p.BakeSeconds == r.BakeSeconds && p.Unowned == r.Unowned && p.Shards == r.Shards {
			return p, true
		}
	}
	return Run{}, false
}
