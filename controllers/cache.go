package controllers

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// CacheByObject returns the cache settings the reconciler is built for; a
// manager that runs it should pass them in ctrl.Options.Cache.ByObject
// (models selects the OpenMedModels of a shard; nil means all). Every pass
// reads from the cache, so what the cache holds is the operator's memory:
//
//   - Deployments are pruned to what a decision reads (the operator's
//     annotations, replicas, strategy, deadline, paused, the preload env
//     entry of each container, status) and keep their managedFields, which
//     drift attribution reads; image, probes, resources, labels and other
//     annotations (a client-side apply's last-applied-configuration can be
//     the size of the object) are dropped.
//   - ConfigMaps are only the ones the operator created (its managed-by
//     label), without managedFields.
//   - OpenMedModels are kept whole but for managedFields.
//
// The reconciler works on unpruned objects too; the pruning only saves
// memory.
func CacheByObject(models labels.Selector) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&v1alpha1.OpenMedModel{}: {Label: models, Transform: toolscache.TransformFunc(cache.TransformStripManagedFields())},
		&corev1.ConfigMap{}: {
			Label:     labels.SelectorFromSet(labels.Set{v1alpha1.ManagedByLabel: v1alpha1.ManagedByValue}),
			Transform: toolscache.TransformFunc(cache.TransformStripManagedFields()),
		},
		&appsv1.Deployment{}: {Transform: PruneDeployment},
	}
}

// PruneDeployment is the cache transform for Deployments (see
// CacheByObject). It keeps the object's identity, resourceVersion,
// generation, managedFields and the fields the decision core reads.
func PruneDeployment(obj any) (any, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return obj, nil
	}
	out := &appsv1.Deployment{TypeMeta: d.TypeMeta}
	out.Namespace, out.Name, out.UID = d.Namespace, d.Name, d.UID
	out.ResourceVersion, out.Generation = d.ResourceVersion, d.Generation
	out.CreationTimestamp, out.DeletionTimestamp = d.CreationTimestamp, d.DeletionTimestamp
	out.Annotations = ourAnnotations(d.Annotations)
	out.ManagedFields = d.ManagedFields
	out.Spec.Replicas = d.Spec.Replicas
	out.Spec.Paused = d.Spec.Paused
	out.Spec.ProgressDeadlineSeconds = d.Spec.ProgressDeadlineSeconds
	out.Spec.Strategy = d.Spec.Strategy
	out.Spec.Template.Annotations = ourAnnotations(d.Spec.Template.Annotations)
	if n := len(d.Spec.Template.Spec.Containers); n > 0 {
		out.Spec.Template.Spec.Containers = make([]corev1.Container, n)
		for i, c := range d.Spec.Template.Spec.Containers {
			out.Spec.Template.Spec.Containers[i].Name = c.Name
			for _, e := range c.Env {
				if e.Name == v1alpha1.PreloadEnvVar {
					out.Spec.Template.Spec.Containers[i].Env = append(out.Spec.Template.Spec.Containers[i].Env, e)
				}
			}
		}
	}
	out.Status = d.Status
	return out, nil
}

// ourAnnotations keeps the openmed.ai annotations.
func ourAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, "openmed.ai/") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
