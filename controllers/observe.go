// observe.go: what a pass reads. observe() gathers the model's target,
// manifests, pods and nodes from the stores (and the API server where a
// store cannot answer) into one rollout.Observed.

package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers/internal/store"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// observe reads what Decide needs from the cache: the target Deployment,
// every other Deployment the status records as possibly written (a
// retarget's previous targets), and the manifest ConfigMaps the
// resource owns (through the owner index, so a pass costs the same however
// many other resources there are); a target outside the cache is read
// from the API server (targetDeployment). It reports targetWaiting when the
// cache has not caught up with the operator's last write to a target, or
// with a manifest ConfigMap the operator created for the model: the pass
// then waits for that watch event.
//
// readAround is set when a pod's ReplicaSet was read from the API server
// (targetReplicaSets).
func (r *OpenMedModelReconciler) observe(ctx context.Context, obj *v1alpha1.OpenMedModel, readAround *bool) (rollout.Observed, targetRead, error) {
	observed := rollout.Observed{Now: metav1.NewTime(r.Clock())}
	var read targetRead
	if obj.UID != "" {
		cms := r.stores.ConfigMaps.Owned(obj.Namespace, obj.UID)
		// A ConfigMap this operator created for the model and the store
		// does not show yet is waited for, before any read around the
		// cache, not created again.
		if r.manifestLag.missing(types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, obj.UID, cms) {
			return observed, targetWaiting, nil
		}
		observed.ConfigMaps = cms
		observed.WrittenConfigMaps = r.written.unrecorded(types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, obj.Status.VerifiedConfigMaps, cms)
	}
	desired, previous := rollout.TargetNames(obj)
	var err error
	observed.Deployment, read, err = r.targetDeployment(ctx, obj.Namespace, desired)
	if err != nil {
		return observed, read, err
	}
	for _, name := range previous {
		if read == targetWaiting {
			break
		}
		prev, prevRead, err := r.targetDeployment(ctx, obj.Namespace, name)
		if err != nil {
			return observed, read, err
		}
		if prevRead == targetWaiting {
			read = targetWaiting
		}
		if prev != nil {
			observed.PreviousTargets = append(observed.PreviousTargets, prev)
		}
	}
	if observed.Deployment != nil && (readsBakePods(obj) || rollout.TemplateGated(observed.Deployment)) {
		observed.Pods = r.stores.BakePods.Owned(rollout.OwnerKey(obj))
		observed.PodsHidden = r.podsHidden(observed.Deployment)
		observed.NotReadyNodes = r.notReadyNodes(ctx, observed.Pods)
	}
	if observed.Deployment != nil {
		observed.PendingPods = r.stores.PendingPods.Owned(rollout.OwnerKey(obj))
	}
	if observed.Deployment != nil {
		observed.ReplicaSets, *readAround, err = r.targetReplicaSets(ctx, client.ObjectKeyFromObject(obj), observed.Deployment, judgedPods(observed.Pods, observed.PendingPods)...)
		if err != nil {
			return observed, read, err
		}
	}
	if obj.UID != "" {
		// A claimed target in the cache says its model's ConfigMaps carry
		// the same labels; one outside it may not.
		if read == targetDirect {
			cm, err := r.unlabelledManifest(ctx, obj, observed.ConfigMaps)
			if err != nil {
				return observed, read, err
			}
			if cm != nil {
				observed.ConfigMaps = append(observed.ConfigMaps, *cm)
				observed.ConfigMapContents = append(observed.ConfigMapContents, *cm)
			}
		}
		sort.Slice(observed.ConfigMaps, func(i, j int) bool { return observed.ConfigMaps[i].Name < observed.ConfigMaps[j].Name })
	}
	return observed, read, nil
}

// readConfigMaps reads from the API server the manifest ConfigMaps the
// plan must know the content of (rollout.Plan.ReadConfigMaps), whole, into
// the observed contents. One that is gone leaves the observed ConfigMaps
// (the store has not caught up with its deletion): the pass decides
// without it.
func (r *OpenMedModelReconciler) readConfigMaps(ctx context.Context, p *pass) error {
	p.readAround = true
	for _, name := range p.plan.ReadConfigMaps {
		cm := &corev1.ConfigMap{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: p.obj.Namespace, Name: name}, cm)
		switch {
		case apierrors.IsNotFound(err):
			p.observed.ConfigMaps = slices.DeleteFunc(p.observed.ConfigMaps, func(cm corev1.ConfigMap) bool { return cm.Name == name })
		case err != nil:
			return fmt.Errorf("read the manifest ConfigMap %s/%s of OpenMedModel %s: %w", p.obj.Namespace, name, p.key, err)
		default:
			p.observed.ConfigMapContents = append(slices.DeleteFunc(p.observed.ConfigMapContents, func(c corev1.ConfigMap) bool { return c.Name == name }), *cm)
		}
	}
	return nil
}

// readBakePods reads from the API server, for the pass that ends a bake
// (rollout.Plan.ReadPods), the pods of the baking version: one list, by the
// target's own pod selector, the bake label and the pod template hashes of
// the version's ReplicaSets (rollout.BakePodSelector), kept as the pod
// store keeps them. The pass then judges these instead of the store's.
func (r *OpenMedModelReconciler) readBakePods(ctx context.Context, p *pass) error {
	var pods []corev1.Pod
	target := p.observed.Deployment
	var sel labels.Selector
	if p.observed.PodsHidden {
		// The store holds none of them: all the target's pods that bake.
		sel = rollout.TargetBakePodSelector(r.targetSelector(target))
	} else {
		sel = rollout.BakePodSelector(r.targetSelector(target), p.observed.Pods, target.Namespace, p.observed.ReplicaSets, p.plan.Status.ManifestHash)
	}
	if sel != nil {
		list := &corev1.PodList{}
		if err := r.APIReader.List(ctx, list, client.InNamespace(target.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return fmt.Errorf("read the pods of the baking version of OpenMedModel %s: %w", p.key, err)
		}
		owner := rollout.OwnerKey(p.obj)
		for i := range list.Items {
			if kept, ok := store.KeptBakePod(&list.Items[i], owner); ok {
				pods = append(pods, kept)
			}
		}
	}
	p.observed.Pods, p.observed.PodsRead = pods, true
	p.observed.NotReadyNodes = r.notReadyNodes(ctx, pods)
	rs, _, err := r.targetReplicaSets(ctx, p.key, target, judgedPods(pods, p.observed.PendingPods)...)
	if err != nil {
		return err
	}
	p.observed.ReplicaSets = rs
	return nil
}

// podsHidden reports whether the pod store cannot see the pods of the
// Deployment d (rollout.Observed.PodsHidden): in a shard, its template
// carries the bake label without the shard's labels (the model moved here,
// or its pods were made before the operator carried the labels; the next
// version's template carries them).
func (r *OpenMedModelReconciler) podsHidden(d *appsv1.Deployment) bool {
	l := d.Spec.Template.Labels
	return len(r.shardLabels) > 0 && l[v1alpha1.BakeLabel] == "true" && !r.stores.SelectsBakePod(l)
}

// targetSelector is the target's spec.selector: as read around the cache,
// or as the Deployment store keeps it (its Deployments are rebuilt
// without it). Nil when neither has it.
func (r *OpenMedModelReconciler) targetSelector(d *appsv1.Deployment) labels.Selector {
	if d.Spec.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && !sel.Empty() {
			return sel
		}
		return nil
	}
	return r.stores.Deployments.PodSelector(types.NamespacedName{Namespace: d.Namespace, Name: d.Name})
}

// unlabelledManifest reads, in a sharded operator whose pass found the
// target outside the cache (the model just moved to this shard, or the
// install was upgraded), the manifest ConfigMap the model's status names
// when the shard's cache does not hold it: one created before the shard
// labels were carried, or labelled for the shard the model moved from. The core then sees it exists (no create, no
// "removed" drift) and plans its labels. Nil when there is nothing to read,
// or it is not the model's.
func (r *OpenMedModelReconciler) unlabelledManifest(ctx context.Context, obj *v1alpha1.OpenMedModel, cached []corev1.ConfigMap) (*corev1.ConfigMap, error) {
	name := obj.Status.ManifestConfigMapName
	if len(r.shardLabels) == 0 || name == "" || slices.ContainsFunc(cached, func(cm corev1.ConfigMap) bool { return cm.Name == name }) {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", obj.Namespace, name, err)
	}
	if ref := metav1.GetControllerOfNoCopy(cm); ref == nil || ref.UID != obj.UID {
		return nil, nil
	}
	return cm, nil
}

// targetRead says where a pass found its target Deployment.
type targetRead int

const (
	// targetCached: in the cache (claimed by the operator).
	targetCached targetRead = iota
	// targetDirect: read from the API server (found or not); the cache does not hold it
	// (no model claimed it yet, or it was claimed before ClaimedLabel).
	targetDirect
	// targetWaiting: the cache has not caught up with the operator's own
	// write to it (or to a manifest ConfigMap of the model); the pass
	// waits for the watch event.
	targetWaiting
)

// notReadyNodes reads, around the cache, the nodes of the pods that are
// unready, and returns those whose Ready condition is not True (a node
// that stopped heartbeating reads Unknown) or that are gone. Nodes are not
// cached: a bake reads one only while a pod on it is unready, so a cluster
// of healthy pods costs no request. A node the operator may not read is
// taken as Ready (the pod is judged as before) and logged.
func (r *OpenMedModelReconciler) notReadyNodes(ctx context.Context, pods []corev1.Pod) []string {
	var out, seen []string
	for i := range pods {
		p := &pods[i]
		node := p.Spec.NodeName
		if !readsNode(p) || slices.Contains(seen, node) {
			continue
		}
		seen = append(seen, node)
		n := &corev1.Node{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Name: node}, n)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, node)
		case err != nil:
			ctrl.LoggerFrom(ctx).Error(err, "read the node of an unready pod; judging the pod as on a Ready node", "Node", node)
		case !nodeReady(n):
			out = append(out, node)
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// targetDeployment reads a Deployment the model targets, or targeted. The
// Deployment store holds the Deployments the operator claimed
// (ClaimedLabel, and the shard's labels); one it does not hold is read from
// the API server, once per pass: a target no model claimed yet (the first rollout's one extra
// request), a Deployment claimed before the label existed (labelled by the
// pass's apply, without a roll), or one whose label somebody removed. One
// the operator just wrote and the cache does not show yet is waited for.
func (r *OpenMedModelReconciler) targetDeployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, targetRead, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if dep := r.stores.Deployments.Get(key); dep != nil {
		if r.targetLag.behind(key, dep.UID, dep.ResourceVersion, dep.Generation) {
			return nil, targetWaiting, nil
		}
		return dep, targetCached, nil
	}
	if r.targetLag.expecting(key) {
		// Written by the operator: the watch event that brings the claim
		// (or takes a finished release out) has not arrived yet.
		return nil, targetWaiting, nil
	}
	dep := &appsv1.Deployment{}
	if err := r.APIReader.Get(ctx, key, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, targetDirect, nil
		}
		return nil, targetDirect, fmt.Errorf("read Deployment %s: %w", key, err)
	}
	return dep, targetDirect, nil
}
