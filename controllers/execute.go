package controllers

import (
	"context"
	"errors"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
	"github.com/openmed/openmed-operator/pkg/target"
)

// outcome is what carrying out a plan came to.
type outcome struct {
	// failure is the first step that failed; the pass reports it.
	failure *rollout.Failure
	// stale: a write conditional on the version the pass read (the claim of
	// a target, the replicas release) met a newer one. The pass decided on
	// an old view and nothing it planned for the target happened, so it
	// reports nothing; it runs again once the cache shows the newer
	// version. Somebody else writing first is not a failure.
	stale bool
	// releaseLeft: a release met a newer version of its Deployment. What
	// the pass did before stands and is reported; the release, and the
	// pruning after it, are decided again on the newer version.
	releaseLeft bool
}

// execute makes the plan's changes in the order that keeps every pod able
// to start: manifest ConfigMaps first, then the Deployment pointer, then the
// releases, and pruning last. Each write is one request; the server's
// answer, not a read-back, tells the pass where the target stands, and the
// answers are recorded so the next pass waits for a cache that has seen
// them (cacheLag).
func (r *OpenMedModelReconciler) execute(ctx context.Context, p *pass) outcome {
	log := ctrl.LoggerFrom(ctx)
	as := rollout.WritesAs(p.obj, r.DefaultServiceAccount)
	fail := func(step rollout.Step, err error) outcome {
		f := &rollout.Failure{Step: step, Kind: classify(err)}
		switch f.Kind {
		case rollout.Rejected:
			f.Detail = rejectionDetail(err)
		case rollout.Denied:
			f.Detail = deniedDetail(err, p.obj.Namespace)
		}
		log.Error(err, "step failed", "step", step, "kind", f.Kind)
		return outcome{failure: f}
	}
	plan, ns := &p.plan, p.obj.Namespace
	// Every write below is made as the model's ServiceAccount, when it has
	// one (reads through r.Client and r.APIReader stay the operator's).
	wctx := writeAs(ctx, ns, as)
	if step, writes := firstWrite(p); writes && as != "" && r.serviceAccountMissing(ctx, ns, as) {
		return outcome{failure: &rollout.Failure{Step: step, Kind: rollout.Denied,
			Detail: rollout.MsgServiceAccountMissing}}
	}
	for _, cm := range plan.EnsureConfigMaps {
		var drop []string
		for _, k := range r.shardLabels {
			if _, ok := cm.Labels[k]; !ok {
				drop = append(drop, k)
			}
		}
		uid, err := target.CreateConfigMap(wctx, r.Writer, r.APIReader, cm, p.obj.UID, drop...)
		switch {
		case errors.Is(err, target.ErrNameTaken):
			return outcome{failure: &rollout.Failure{Step: rollout.StepManifest, Kind: rollout.NameTaken}}
		case errors.Is(err, target.ErrManifestMismatch):
			return outcome{failure: &rollout.Failure{Step: rollout.StepManifest, Kind: rollout.Mismatch, Detail: cm.Name}}
		case err != nil:
			return fail(rollout.StepManifest, err)
		}
		// What it holds is what the plan wrote (or the read of the one
		// that existed found): recorded with the next status write.
		r.written.add(p.key, v1alpha1.VerifiedConfigMap{Name: cm.Name, UID: uid, ManifestHash: rollout.ManifestConfigMapHash(cm)})
		if r.stores.SelectsConfigMap(cm.Labels) {
			// The cache will show it (the create, or a relabel of the
			// model's own ConfigMap, leaves cm's labels on the shard
			// keys): the next pass waits for it rather than creating
			// it again. One the cache does not select is never waited for.
			r.manifestLag.created(p.key, p.obj.UID, cm.Name)
		}
	}
	for _, l := range plan.LabelConfigMaps {
		err := target.LabelConfigMap(wctx, r.Writer, ns, l.Name, p.observed.ConfigMapUID(l.Name, p.obj.UID), l.Labels)
		switch {
		case errors.Is(err, target.ErrReplaced):
			// Another ConfigMap of the name since the pass read it:
			// decided again once the store shows it.
			return outcome{stale: true}
		case err != nil:
			return fail(rollout.StepManifest, err)
		}
	}
	if dep := p.observed.Deployment; dep != nil && (plan.ReleaseReplicas || plan.Takeover != nil || plan.ApplyDeployment != nil) {
		w := r.targetLag.trackSelected(keyOf(dep), dep.UID, dep.ResourceVersion, dep.Generation, dep.Labels, r.stores.SelectsDeployment)
		defer w.done()
		// Claiming an unclaimed target is conditional on the version we
		// saw: of two resources racing for it, the second write fails with
		// a conflict and its next pass sees the other's claim. Later writes
		// of the pass follow the first one's answer.
		precondition := ""
		if plan.Claim {
			precondition = dep.ResourceVersion
		}
		if plan.ReleaseReplicas {
			read, answer, err := target.DropField(wctx, r.Writer, r.APIReader, dep.Namespace, dep.Name, r.FieldManager, fieldpath.MakePathOrDie("spec", "replicas"))
			w.movedTo(read)
			switch {
			case apierrors.IsConflict(err):
				w.conflicted()
				return outcome{stale: true}
			case err != nil:
				return fail(rollout.StepApply, err)
			}
			if answer.ResourceVersion != "" {
				w.movedTo(answer)
				precondition = ""
			}
		}
		for _, intent := range []*unstructured.Unstructured{plan.Takeover, plan.ApplyDeployment} {
			if intent == nil {
				continue
			}
			answer, err := target.Apply(wctx, r.Writer, intent, r.FieldManager, precondition)
			switch {
			case precondition != "" && apierrors.IsConflict(err):
				w.conflicted()
				return outcome{stale: true}
			case err != nil:
				return fail(rollout.StepApply, err)
			}
			precondition = ""
			w.movedTo(target.Written{ResourceVersion: answer.GetResourceVersion(), Generation: answer.GetGeneration(), Labels: answer.GetLabels()})
		}
	}
	type release struct {
		release *rollout.Release
		dep     *appsv1.Deployment
	}
	var releases []release
	for _, rel := range plan.ReleasePrevious {
		for _, dep := range p.observed.PreviousTargets {
			if dep.Name == rel.DeploymentName {
				releases = append(releases, release{rel, dep})
			}
		}
	}
	releases = append(releases, release{plan.Release, p.observed.Deployment})
	for _, rel := range releases {
		if rel.release == nil || rel.dep == nil {
			continue
		}
		w := r.targetLag.trackSelected(keyOf(rel.dep), rel.dep.UID, rel.release.ResourceVersion, rel.dep.Generation, rel.dep.Labels, r.stores.SelectsDeployment)
		answers, err := target.Release(wctx, r.Writer, rel.release.Keep, r.FieldManager, rel.release.ResourceVersion, v1alpha1.ModelResourceAnnotation)
		for _, a := range answers {
			w.movedTo(a)
		}
		if apierrors.IsConflict(err) {
			w.conflicted()
			w.done()
			log.V(1).Info("release met a newer Deployment; deciding again", "Deployment", rel.dep.Namespace+"/"+rel.dep.Name)
			return outcome{releaseLeft: true}
		}
		w.done()
		if err != nil {
			return fail(rollout.StepRelease, err)
		}
	}
	for _, name := range plan.PruneConfigMaps {
		err := target.DeleteConfigMap(wctx, r.Writer, ns, name, p.observed.ConfigMapUID(name, p.obj.UID))
		switch {
		case errors.Is(err, target.ErrReplaced):
			return outcome{stale: true}
		case err != nil:
			return fail(rollout.StepPrune, err)
		}
	}
	return outcome{}
}

// firstWrite is the step of the first write the plan makes, if it makes
// any, in execute's order.
func firstWrite(p *pass) (rollout.Step, bool) {
	plan := &p.plan
	switch {
	case len(plan.EnsureConfigMaps) > 0 || len(plan.LabelConfigMaps) > 0:
		return rollout.StepManifest, true
	case p.observed.Deployment != nil && (plan.ReleaseReplicas || plan.Takeover != nil || plan.ApplyDeployment != nil):
		return rollout.StepApply, true
	case len(plan.ReleasePrevious) > 0 || plan.Release != nil && p.observed.Deployment != nil:
		return rollout.StepRelease, true
	case len(plan.PruneConfigMaps) > 0:
		return rollout.StepPrune, true
	}
	return "", false
}

func keyOf(dep *appsv1.Deployment) types.NamespacedName {
	return types.NamespacedName{Namespace: dep.Namespace, Name: dep.Name}
}

// classify sorts a failed request: a denial of the API server's
// authorization (the identity the write was made as may not make it) and a
// rejection (forbidden otherwise, invalid, denied by an admission webhook,
// a bad request) need a person; everything else
// (busy, unavailable, timed out, a lost connection, a target that vanished)
// clears by itself.
func classify(err error) rollout.FailureKind {
	switch {
	case isAccessDenied(err):
		return rollout.Denied
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsUnauthorized(err):
		return rollout.Rejected
	}
	return rollout.Transient
}

// Bounds of what a rejection puts in the status.
const (
	maxCauses      = 3
	maxCauseLength = 200
)

// rejectionDetail says what the API server found wrong with a rejected
// request: each cause as "field: message" (at most maxCauses, each cut to
// maxCauseLength), or, without causes, the answer's message after the
// object's name ("... is forbidden: ", "... is invalid: "). This is the
// server's validation of the operator's own write to a Deployment or a
// ConfigMap: field paths, the rule, and at most the value of a
// configuration field (the Deployment's spec is configuration, not user
// data). The operator reads no Secret, so none can be in it.
func rejectionDetail(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	s := status.Status()
	var parts []string
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if len(parts) == maxCauses {
				parts = append(parts, "…")
				break
			}
			text := c.Message
			if c.Field != "" {
				text = c.Field + ": " + text
			}
			parts = append(parts, rollout.Shorten(text, maxCauseLength))
		}
	}
	if len(parts) == 0 {
		msg := s.Message
		for _, sep := range []string{" is forbidden: ", " is invalid: "} {
			if _, rest, ok := strings.Cut(msg, sep); ok {
				msg = rest
				break
			}
		}
		if msg == "" {
			return ""
		}
		return rollout.Shorten(msg, rollout.MaxFailureDetail)
	}
	return strings.Join(parts, "; ")
}
