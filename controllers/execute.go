package controllers

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/target"
)

// execute makes the plan's changes in the order that keeps every pod able
// to start: manifest ConfigMaps first, then the Deployment pointer, then the
// releases, and pruning last. Each write is one request; the server's
// answer, not a read-back, tells the pass where the target stands. It
// returns the first step that failed, or nil.
func (r *OpenMedModelReconciler) execute(ctx context.Context, p *pass) *rollout.Failure {
	log := ctrl.LoggerFrom(ctx)
	fail := func(step rollout.Step, err error) *rollout.Failure {
		f := &rollout.Failure{Step: step, Kind: classify(err)}
		log.Error(err, "step failed", "step", step, "kind", f.Kind)
		return f
	}
	plan, ns := &p.plan, p.obj.Namespace
	for _, cm := range plan.EnsureConfigMaps {
		if err := target.CreateConfigMap(ctx, r.Client, r.APIReader, cm, p.obj.UID); err != nil {
			if errors.Is(err, target.ErrNameTaken) {
				return &rollout.Failure{Step: rollout.StepManifest, Kind: rollout.NameTaken}
			}
			return fail(rollout.StepManifest, err)
		}
	}
	if dep := p.observed.Deployment; dep != nil && (plan.ReleaseReplicas || plan.Takeover != nil || plan.ApplyDeployment != nil) {
		key := types.NamespacedName{Namespace: dep.Namespace, Name: dep.Name}
		rv := dep.ResourceVersion
		seen := []string{rv}
		// Claiming an unclaimed target is conditional on the version we
		// saw: of two resources racing for it, the second write fails with
		// a conflict and its next pass sees the other's claim. Later writes
		// of the pass follow the first one's answer.
		precondition := ""
		if plan.Claim {
			precondition = rv
		}
		if plan.ReleaseReplicas {
			next, err := target.DropField(ctx, r.Client, r.APIReader, dep.Namespace, dep.Name, r.FieldManager, fieldpath.MakePathOrDie("spec", "replicas"))
			if err != nil {
				return fail(rollout.StepApply, err)
			}
			if next != "" && next != rv {
				rv, precondition = next, ""
				seen = append(seen, rv)
			}
		}
		for _, intent := range []*unstructured.Unstructured{plan.Takeover, plan.ApplyDeployment} {
			if intent == nil {
				continue
			}
			answer, err := target.Apply(ctx, r.Client, intent, r.FieldManager, precondition)
			if err != nil {
				r.targetLag.wrote(key, seen[:len(seen)-1]...)
				return fail(rollout.StepApply, err)
			}
			precondition = ""
			if answer.GetResourceVersion() != rv {
				rv = answer.GetResourceVersion()
				seen = append(seen, rv)
			}
		}
		// Every version before the last answer is one the cache may still
		// show; the next pass waits for the last. Only answered writes are
		// recorded: a write whose answer was lost may not have happened.
		r.targetLag.wrote(key, seen[:len(seen)-1]...)
	}
	for _, rel := range []*rollout.Release{plan.ReleasePrevious, plan.Release} {
		if rel == nil {
			continue
		}
		if err := target.Release(ctx, r.Client, rel.Keep, r.FieldManager); err != nil {
			return fail(rollout.StepRelease, err)
		}
	}
	for _, name := range plan.PruneConfigMaps {
		if err := target.DeleteConfigMap(ctx, r.Client, ns, name); err != nil {
			return fail(rollout.StepPrune, err)
		}
	}
	return nil
}

// classify sorts a failed request: a rejection needs a person (forbidden,
// invalid, denied by an admission webhook, a bad request); everything else
// (busy, unavailable, timed out, a lost connection, a conflict, a target
// that vanished) clears by itself.
func classify(err error) rollout.FailureKind {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsUnauthorized(err):
		return rollout.Rejected
	}
	return rollout.Transient
}
