// record.go: what a pass leaves behind besides status: metrics, the Flux
// reconcile annotations and the per-model memory forgotten on deletion.

package controllers

import (
	"context"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// record emits the plan's events and updates the metrics after the status
// that carries them was written.
func (r *OpenMedModelReconciler) record(p *pass) {
	obj, plan := p.obj, &p.plan
	now := r.Clock()
	for _, e := range plan.Events {
		if r.EventRecorder != nil {
			r.EventRecorder.Eventf(obj, nil, e.Type, e.Reason, e.Reason, "%s", e.Message)
		}
		switch e.Reason {
		case v1alpha1.RolloutStartedReason:
			r.rolloutStarted(p.key, now)
		case v1alpha1.RollbackStartedReason:
			trigger := rollbackAutomatic
			if strings.HasPrefix(plan.Status.RollbackRequest, rollout.ManualRollbackPrefix) {
				trigger = rollbackManual
			}
			r.ModelMetrics.countRollback(obj.Namespace, trigger)
		case v1alpha1.RolloutSucceededReason:
			r.ModelMetrics.rolloutEnded(obj.Namespace, rolloutSucceeded, r.rolloutDuration(p.key, now))
		case v1alpha1.RolloutFailedReason:
			r.ModelMetrics.rolloutEnded(obj.Namespace, rolloutFailed, r.rolloutDuration(p.key, now))
		case v1alpha1.ManifestMismatchReason:
			if p.observed.Failure == nil {
				// Found by the decision, not a failed step (report
				// counts those): a replaced ConfigMap is an error a
				// person should look into, though the pass mends it.
				r.ModelMetrics.countError(v1alpha1.ManifestMismatchReason)
			}
		}
	}
	for _, d := range plan.Drift {
		managers := d.Managers
		if len(managers) == 0 {
			managers = []string{""}
		}
		for _, m := range managers {
			r.ModelMetrics.countDrift(m)
		}
	}
	for _, c := range plan.Conflicts {
		r.ModelMetrics.countConflict(c.Manager, c.Field)
	}
	if plan.BakeFailure != "" {
		r.ModelMetrics.countBakeFailure(obj.Namespace, plan.BakeFailure)
	}
	if plan.RemoveFinalizer {
		r.ModelMetrics.deleteModel(obj.Namespace, obj.Name)
		return
	}
	ready := apimeta.FindStatusCondition(plan.Status.Conditions, v1alpha1.ReadyCondition)
	s := modelState{version: plan.Status.ActiveVersion, phase: string(plan.Status.Phase), ready: string(metav1.ConditionUnknown),
		stalled: apimeta.IsStatusConditionTrue(plan.Status.Conditions, v1alpha1.StalledCondition)}
	if ready != nil {
		s.ready, s.reason = string(ready.Status), ready.Reason
	}
	r.ModelMetrics.setModelInfo(obj.Namespace, obj.Name, s)
}

// recordGotk records Flux's per-object gauges (Ready and suspend, four
// series per model); once the finalizer is gone it deletes them.
func (r *OpenMedModelReconciler) recordGotk(ctx context.Context, obj *v1alpha1.OpenMedModel) {
	if r.Metrics != nil {
		r.Metrics.RecordSuspend(ctx, obj, obj.Spec.Suspend)
		r.Metrics.RecordReadiness(ctx, obj)
	}
}

// rolloutStarted and rolloutDuration time a model rollout from the pass
// that started it, in memory: the duration metric is an observation, not a
// record, so a restart mid-rollout only loses one sample.
func (r *OpenMedModelReconciler) rolloutStarted(key types.NamespacedName, now time.Time) {
	r.memory.update(key, func(m *modelRecord) { m.rolloutFrom = now })
}

func (r *OpenMedModelReconciler) rolloutDuration(key types.NamespacedName, now time.Time) time.Duration {
	d := time.Duration(-1)
	r.memory.read(key, func(m *modelRecord) {
		if !m.rolloutFrom.IsZero() {
			d = now.Sub(m.rolloutFrom)
			m.rolloutFrom = time.Time{}
		}
	})
	return d
}

// forget drops what the reconciler remembers of a resource that is gone.
func (r *OpenMedModelReconciler) forget(key types.NamespacedName) {
	r.ModelMetrics.deleteModel(key.Namespace, key.Name)
	r.memory.forget(key)
}

func klogRef(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }
