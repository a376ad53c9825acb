package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// A pod changes a model's verdict (a bake, a pod the scheduler cannot
// place, the switch to replacing pods in place) only when it belongs to the
// target as Kubernetes' own controllers decide it: it is in the model's
// namespace and its controller is a ReplicaSet whose controller is the
// target Deployment, by UID (rollout.OwnedByTarget). The pod stores file
// pods by their owner annotation, which anyone who may create a pod can
// copy; the UIDs of that chain cannot be copied.
//
// The ReplicaSets of baking versions are in a store of their own, as
// metadata, selected as the baking pods are (the bake label, which the
// Deployment controller copies from the pod template onto the ReplicaSet,
// and the shard's requirements): a bake's pods are verified with no
// request. A pod whose ReplicaSet the store does not hold (a version
// without a bake whose pod waits for a node, a model that moved between
// shards, a store behind its watch) has its ReplicaSet read once, by name,
// and the verdict is kept for the model.

// replicaSetVerdicts keeps, per model, whether the ReplicaSets read from
// the API server (those the store did not hold) are its target's: by the
// ReplicaSet's UID, for the target Deployment's UID.
type replicaSetVerdicts struct{ mem *memory }

// modelReplicaSets are one model's verdicts on ReplicaSets read from the
// API server, for the target Deployment deployment; order holds their
// UIDs, least recently used first.
type modelReplicaSets struct {
	deployment types.UID
	owned      map[types.UID]bool
	order      []types.UID
}

// maxReplicaSetVerdicts bounds a model's verdicts: pods of the model's
// namespace may name any number of ReplicaSets.
const maxReplicaSetVerdicts = 16

// get returns the verdict on the ReplicaSet uid for model's target
// deployment, and whether there is one.
func (v replicaSetVerdicts) get(model types.NamespacedName, deployment, uid types.UID) (owned, ok bool) {
	v.mem.read(model, func(rec *modelRecord) {
		m := rec.replicaSets
		if m == nil || m.deployment != deployment {
			return
		}
		if owned, ok = m.owned[uid]; ok {
			m.touch(uid)
		}
	})
	return owned, ok
}

// touch makes uid the last used verdict.
func (m *modelReplicaSets) touch(uid types.UID) {
	if i := slices.Index(m.order, uid); i >= 0 {
		m.order = append(slices.Delete(m.order, i, i+1), uid)
	}
}

// put keeps the verdict on the ReplicaSet uid for model's target
// deployment.
func (v replicaSetVerdicts) put(model types.NamespacedName, deployment, uid types.UID, owned bool) {
	v.mem.update(model, func(rec *modelRecord) {
		m := rec.replicaSets
		if m == nil || m.deployment != deployment {
			m = &modelReplicaSets{deployment: deployment, owned: map[types.UID]bool{}}
			rec.replicaSets = m
		}
		if _, ok := m.owned[uid]; ok {
			m.touch(uid)
		} else {
			if len(m.order) == maxReplicaSetVerdicts {
				// The least recently used goes: the version's own
				// ReplicaSets are met in every pass and stay,
				// whatever number of forged UIDs pods of the
				// namespace name.
				delete(m.owned, m.order[0])
				m.order = slices.Delete(m.order, 0, 1)
			}
			m.order = append(m.order, uid)
		}
		m.owned[uid] = owned
	})
}

// targetReplicaSets returns the UIDs of the target Deployment's
// ReplicaSets (rollout.Observed.ReplicaSets) among the controllers of the
// pods of target's namespace in pods: from the ReplicaSet store, or read
// from the API server when the store does not hold one (read then reports
// true). A ReplicaSet of that name with another UID, or one that does not
// exist, is not the target's.
func (r *OpenMedModelReconciler) targetReplicaSets(ctx context.Context, model types.NamespacedName, target *appsv1.Deployment, pods ...[]corev1.Pod) (out []types.UID, read bool, err error) {
	decided := map[types.UID]bool{}
	for _, list := range pods {
		for i := range list {
			p := &list[i]
			name, uid := store.PodReplicaSet(p)
			if p.Namespace != target.Namespace || name == "" || uid == "" {
				continue
			}
			if _, ok := decided[uid]; ok {
				continue
			}
			owned, ok := false, false
			if kept, deployment, held := r.stores.ReplicaSets.Get(p.Namespace, name); held && kept == uid {
				owned, ok = deployment == target.UID, true
			} else {
				owned, ok = r.rsVerdicts.get(model, target.UID, uid)
			}
			if !ok {
				read = true
				if owned, err = r.readReplicaSet(ctx, p.Namespace, name, uid, target.UID); err != nil {
					return nil, read, err
				}
				r.rsVerdicts.put(model, target.UID, uid, owned)
			}
			decided[uid] = owned
			if owned {
				out = append(out, uid)
			}
		}
	}
	return out, read, nil
}

// readReplicaSet reads the ReplicaSet namespace/name from the API server,
// as metadata, and reports whether it is the one of UID uid and the
// Deployment of UID deployment controls it.
func (r *OpenMedModelReconciler) readReplicaSet(ctx context.Context, namespace, name string, uid, deployment types.UID) (bool, error) {
	rs := &metav1.PartialObjectMetadata{}
	rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rs); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read the ReplicaSet %s/%s of a pod of the target: %w", namespace, name, err)
	}
	return rs.UID == uid && store.ControllingDeployment(rs.OwnerReferences) == deployment, nil
}

// judgedPods are the pods whose ReplicaSets a pass verifies: every bake
// pod, and of the pods waiting for a node those the scheduler could not
// place (rollout.Unschedulable) or a scheduling gate holds
// (rollout.SchedulingGated), the only ones a decision reads.
func judgedPods(bake, pending []corev1.Pod) [][]corev1.Pod {
	var unplaced []corev1.Pod
	for i := range pending {
		if rollout.Unschedulable(&pending[i]) != nil || rollout.SchedulingGated(&pending[i]) != nil {
			unplaced = append(unplaced, pending[i])
		}
	}
	return [][]corev1.Pod{bake, unplaced}
}
