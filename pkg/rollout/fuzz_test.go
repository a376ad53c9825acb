package rollout

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

var fuzzPhases = []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseRollingOut, v1alpha1.PhaseReady,
	v1alpha1.PhaseFailed, v1alpha1.PhaseRolledBack, v1alpha1.PhaseSuspended}

// FuzzDecide feeds random specs, statuses and Deployment states to Decide:
// it must never panic, must be deterministic and must leave its inputs
// alone (checked by decide), and every status it produces must pass Flux's
// status rules (checked by decide too). Seeds live in
// testdata/fuzz/FuzzDecide.
func FuzzDecide(f *testing.F) {
	f.Add("OpenMed/synthetic-pii-v2", int32(2), uint8(4), uint16(0), int64(2), int64(2), int32(2), int32(0), uint8(3), "", false)
	f.Add("bad version", int32(0), uint8(9), uint16(0xffff), int64(1), int64(0), int32(0), int32(1), uint8(5), "OpenMed/synthetic-pii-v1", true)
	f.Fuzz(func(t *testing.T, version string, replicas int32, tier uint8, flags uint16,
		depGen, obsGen int64, ready, unavailable int32, phase uint8, rollbackTo string, failed bool) {
		c := newCluster(t)
		obj := c.obj
		obj.Spec.Version = version
		obj.Spec.Replicas = &replicas
		if flags&1 != 0 {
			obj.Spec.Replicas = nil
		}
		if int(tier) < len(v1alpha1.Tiers) {
			obj.Spec.Tier = v1alpha1.Tiers[tier]
		}
		obj.Spec.Suspend = flags&2 != 0
		if flags&4 != 0 {
			obj.DeletionTimestamp = &metav1.Time{Time: clock}
		}
		if flags&8 != 0 {
			obj.Spec.RolloutStrategy.Type = v1alpha1.RecreateRolloutStrategyType
		}
		obj.Annotations = map[string]string{v1alpha1.RollbackToAnnotation: rollbackTo}
		if flags&16 != 0 {
			obj.Annotations[v1alpha1.ResetRequestAnnotation] = rollbackTo
		}
		obj.Generation = 1 + int64(flags>>12)
		st := &obj.Status
		st.Phase = fuzzPhases[int(phase)%len(fuzzPhases)]
		st.DesiredVersion = version
		st.TargetDeploymentGeneration = depGen
		if n, err := Normalize(obj); err == nil {
			if flags&32 != 0 {
				st.DesiredSpecHash = SpecHash(n)
			}
			if failed {
				st.FailedSpecHash = SpecHash(n)
			}
			if flags&64 != 0 {
				st.History = []v1alpha1.HistoryEntry{newHistoryEntry(n, metav1.NewTime(clock))}
				st.RollbackSpec = n.DeepCopy()
			}
		}
		if flags&128 != 0 {
			setConditions(st, rollingTuple, reconciling, obj.Generation, metav1.NewTime(clock))
		}
		if flags&256 != 0 {
			c.dep = nil
		} else {
			c.dep.Generation = depGen
			c.dep.Status = appsv1.DeploymentStatus{ObservedGeneration: obsGen, UpdatedReplicas: ready,
				ReadyReplicas: ready, AvailableReplicas: ready, UnavailableReplicas: unavailable}
			if flags&512 != 0 {
				c.dep.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue}}
			}
			if flags&1024 != 0 {
				c.dep.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: rollbackTo}
			}
		}
		c.pass()
		c.pass()
	})
}
