package v1alpha1

import "k8s.io/apimachinery/pkg/util/intstr"

// Default fills in the defaults the API server applies from the CRD schema, so
// a typed object built in Go reads the same as one read back from the cluster.
// It never overwrites a value that is set.
func (in *OpenMedModel) Default() {
	in.Spec.Default()
	// The CRD defaults status to {"observedGeneration": -1}; a zero status is
	// the Go spelling of "absent".
	if in.Status.ObservedGeneration == 0 && len(in.Status.Conditions) == 0 && in.Status.Phase == "" {
		in.Status.ObservedGeneration = -1
	}
}

// Default fills in the spec defaults of the CRD schema.
func (in *OpenMedModelSpec) Default() {
	if in.RevisionHistoryLimit == nil {
		limit := DefaultRevisionHistoryLimit
		in.RevisionHistoryLimit = &limit
	}
	in.RolloutStrategy.Default()
	if in.Verification != nil {
		in.Verification.Default()
	}
}

// Default fills in the verification defaults of the CRD schema.
func (in *Verification) Default() {
	if in.Attempts == nil {
		v := DefaultVerificationAttempts
		in.Attempts = &v
	}
	if in.IntervalSeconds == nil {
		v := DefaultVerificationInterval
		in.IntervalSeconds = &v
	}
	if in.Request.TimeoutSeconds == nil {
		v := DefaultVerificationTimeout
		in.Request.TimeoutSeconds = &v
	}
	if in.Request.Path == "" {
		in.Request.Path = DefaultVerificationPath
	}
	if in.Request.Method == "" {
		in.Request.Method = DefaultVerificationMethod
	}
}

// Default fills in the rollout strategy defaults of the CRD schema.
func (in *RolloutStrategy) Default() {
	if in.MaxUnavailable == nil {
		v := intstr.FromInt32(DefaultMaxUnavailable)
		in.MaxUnavailable = &v
	}
	if in.MaxSurge == nil {
		v := intstr.FromInt32(DefaultMaxSurge)
		in.MaxSurge = &v
	}
	if in.RollbackOnFailure == nil {
		v := DefaultRollbackOnFailure
		in.RollbackOnFailure = &v
	}
	if in.ProgressDeadlineSeconds == nil {
		v := DefaultProgressDeadlineSeconds
		in.ProgressDeadlineSeconds = &v
	}
}
