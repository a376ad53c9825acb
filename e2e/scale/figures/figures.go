// Package figures is the record the scale benchmark (e2e/scale, `make
// bench-scale`) writes of what it measured, and the tables the docs show of
// it. The benchmark writes a File as JSON (docs/scale/results.json by
// default); hack/scaletable renders it into the docs' generated blocks
// (Splice), and hack/docscheck fails when a block differs from what the
// JSON renders to.
package figures

import (
	"encoding/json"
	"fmt"
	"os"
)

// File is one invocation of the benchmark: what it ran on, its settings,
// and every run it made.
type File struct {
	// Date is when the benchmark ended (UTC, RFC 3339).
	Date string `json:"date"`
	// Go is the Go toolchain that built the test and the operator.
	Go string `json:"go"`
	// KubeAPIServer and Etcd are the module versions the control-plane
	// binaries were built from (read from their build information).
	KubeAPIServer string `json:"kubeAPIServer"`
	Etcd          string `json:"etcd"`
	// CPUs is the number of logical CPUs of the machine.
	CPUs int `json:"cpus"`
	// Settings are the benchmark's environment variables
	// (OPENMED_SCALE_*, OPENMED_LOCKDOWN) as they were set, unset ones
	// left out.
	Settings map[string]string `json:"settings"`
	// Seconds is the wall time of the whole benchmark.
	Seconds float64 `json:"seconds"`
	Runs    []Run   `json:"runs"`
	// Fleet are the fleet's runs, one per engine (FleetJSONPath).
	Fleet []FleetRun `json:"fleet,omitempty"`
}

// Run is one run: one shape, measured from an empty cluster to the
// failover.
type Run struct {
	N    int  `json:"n"`
	Pods bool `json:"pods"`
	// BakeSeconds is every model's bakeSeconds; 0 is without the bake
	// guard.
	BakeSeconds int `json:"bakeSeconds"`
	// Unowned is how many Deployments no model targets sat beside the N.
	Unowned int `json:"unowned"`
	// Shards is how many operator processes split the models.
	Shards int `json:"shards"`

	// The operator's calls for models in each phase, counted by the API
	// server's audit log.
	FirstRollout Phase `json:"firstRollout"`
	Upgrade      Phase `json:"upgrade"`
	// Steady are the steady-state windows, SteadySeconds each.
	Steady        []Window `json:"steady"`
	SteadySeconds float64  `json:"steadySeconds"`

	// Passes per model of each phase (controller_runtime_reconcile_total).
	PassesPerModel Pair `json:"passesPerModel"`
	// CPUMsPerModel is the operators' CPU time per model in each phase.
	CPUMsPerModel Pair `json:"cpuMsPerModel"`
	// APIServerCores is the API server's and etcd's CPU over the first
	// rollout, as a share of its wall time.
	APIServerCores float64 `json:"apiServerCores"`
	// CreateReadySeconds and UpgradeReadySeconds are the wall times from
	// the first write of the phase until every model was seen Ready.
	CreateReadySeconds  float64 `json:"createReadySeconds"`
	UpgradeReadySeconds float64 `json:"upgradeReadySeconds"`
	// ReactionMs is one model's Deployment turning ready to the model
	// being seen Ready, a few models one at a time; WaveReactionMs the same
	// during the upgrade wave.
	ReactionMs     Spread `json:"reactionMs"`
	WaveReactionMs Spread `json:"waveReactionMs"`

	// Memory, in MiB: the largest process's peak RSS (VmHWM) and its peak
	// anonymous part (RssAnon, sampled); SyncedRSSMiB the peak RSS once the
	// caches synced, before any model.
	PeakRSSMiB   float64 `json:"peakRSSMiB"`
	PeakAnonMiB  float64 `json:"peakAnonMiB"`
	SyncedRSSMiB float64 `json:"syncedRSSMiB"`
	// Fixed is the first process's memory once its caches synced; Floor a
	// bare controller-runtime manager's (e2e/scale/floor) on the same API
	// server.
	Fixed Memory `json:"fixed"`
	Floor Memory `json:"floor"`
	// PerShard is each process's figures (one entry without shards).
	PerShard []Shard `json:"perShard"`
	// CrossShardCalls is the calls one shard made for another's model.
	CrossShardCalls int `json:"crossShardCalls"`

	Failover Failover `json:"failover"`

	// Baked is how many models were seen Baking; BakedBeforePods, per
	// version, how many of them before their pods were.
	Baked           int            `json:"baked"`
	BakedBeforePods map[string]int `json:"bakedBeforePods,omitempty"`
	// MetricsBytes is one scrape of /metrics at the end;
	// SamplesPerModel its samples per model; EventsDropped
	// openmed_events_dropped_total.
	MetricsBytes    int     `json:"metricsBytes"`
	SamplesPerModel float64 `json:"samplesPerModel"`
	EventsDropped   float64 `json:"eventsDropped"`

	// Verification is the golden request's figures, for a run whose
	// models declare one (spec.verification); nil for the others.
	Verification *Verification `json:"verification,omitempty"`
}

// Verification is what the pods of a run saw of the golden request, and
// what the phases' calls hold of it.
type Verification struct {
	// PodsVerified is how many pods were verified in each phase (two per
	// model).
	PodsVerified Counts `json:"podsVerified"`
	// GoldenRequests are the golden requests the pods received in each
	// phase; AskedAgain those beyond one per pod (a pass that read a pod
	// before its verdict reached the operator's pod store asked it
	// again), each with its verdict written again.
	GoldenRequests Counts `json:"goldenRequests"`
	AskedAgain     Counts `json:"askedAgain"`
	// WaitStatuses are the status writes of each phase's wait for the
	// verdicts (part of its patch openmedmodels/status), counted from
	// what a watch of the models saw.
	WaitStatuses Counts `json:"waitStatuses"`
	// VerifiedSeconds is, for each phase, from its first write until
	// every new pod was verified.
	VerifiedSeconds Pair `json:"verifiedSeconds"`
	// SteadyRequests are the requests of any kind the pods received in
	// the steady windows, FailoverRequests during the failover.
	SteadyRequests   int `json:"steadyRequests"`
	FailoverRequests int `json:"failoverRequests"`
}

// Counts is a count of the first rollout and of the upgrade.
type Counts struct {
	Rollout int `json:"rollout"`
	Upgrade int `json:"upgrade"`
}

// Phase is a phase's calls for models: by "verb resource[/subresource]",
// in total (not per model), and those the API server answered 409 Conflict
// apart (written again by the next pass; not in ByKind).
type Phase struct {
	ByKind    map[string]int `json:"byKind"`
	Conflicts map[string]int `json:"conflicts,omitempty"`
}

// Total is the phase's calls, 409s left out.
func (p Phase) Total() int {
	n := 0
	for _, c := range p.ByKind {
		n += c
	}
	return n
}

// Window is a steady-state window: calls for models, and list, watch and
// lease requests.
type Window struct {
	Calls     int `json:"calls"`
	ListWatch int `json:"listWatch"`
}

// Pair is a figure of the first rollout and of the upgrade.
type Pair struct {
	Rollout float64 `json:"rollout"`
	Upgrade float64 `json:"upgrade"`
}

// Spread is a median and a 95th percentile over Count samples.
type Spread struct {
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
	Count  int     `json:"count"`
}

// Memory is a process's resident set in MiB: RSS its peak, File and Anon
// its file-backed (the binary's pages) and anonymous parts.
type Memory struct {
	RSS  float64 `json:"rssMiB"`
	File float64 `json:"fileMiB"`
	Anon float64 `json:"anonMiB"`
}

// Shard is one operator process of a run.
type Shard struct {
	PeakRSSMiB  float64 `json:"peakRSSMiB"`
	PeakAnonMiB float64 `json:"peakAnonMiB"`
	Calls       int     `json:"calls"`
}

// Failover is the new processes' start until every model was reconciled:
// its time, their calls for models (and 5 s more), their peak RSS.
type Failover struct {
	Seconds    float64 `json:"seconds"`
	Calls      int     `json:"calls"`
	PeakRSSMiB float64 `json:"peakRSSMiB"`
}

// Read reads a File.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// Write writes f to path, indented, with a final newline.
func (f *File) Write(path string) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
