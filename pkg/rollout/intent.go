package rollout

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// DefaultFieldManager is the server-side apply field manager of the operator.
const DefaultFieldManager = "openmed-operator"

// DeploymentIntent is the partial Deployment the operator server-side applies
// to point the target at a manifest: exactly the fields it owns (docs/spec)
// and nothing else, so image, probes, resources and selectors stay with their
// owners. owner is the OwnerKey ("<namespace>/<name>"); the Deployment lives
// in that namespace. cmName is the content-addressed manifest ConfigMap and
// manifestHash the manifest it holds. spec.replicas is only sent when set, so
// an unset value leaves replicas to the Deployment's owner or an HPA.
func DeploymentIntent(spec v1alpha1.NormalizedSpec, owner, cmName, manifestHash string) *unstructured.Unstructured {
	return pointer{spec: spec, owner: owner, cmName: cmName, manifestHash: manifestHash}.intent(nil)
}

// intent is the apply configuration of p. override, when set, replaces the
// value of the named fields (a takeover sends a live value instead of ours).
func (p pointer) intent(override map[string]any) *unstructured.Unstructured {
	namespace, _, _ := strings.Cut(p.owner, "/")
	obj := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": p.spec.TargetRef.Name, "namespace": namespace},
	}
	for _, f := range ownedFields(p) {
		v, sent := f.value(p)
		if o, ok := override[f.name]; ok {
			v, sent = o, true
		}
		if sent {
			setPath(obj, f.path, v)
		}
	}
	return &unstructured.Unstructured{Object: obj}
}

// ManifestConfigMap is the immutable, content-addressed manifest ConfigMap of
// spec for obj: named ManifestConfigMapName(spec base, manifest hash), with the
// manifest and the preload pointer, the owner annotation, the managed-by and
// family labels, and a controller ownerReference so garbage collection
// removes it with obj.
func ManifestConfigMap(obj *v1alpha1.OpenMedModel, spec v1alpha1.NormalizedSpec) *corev1.ConfigMap {
	return manifestConfigMap(obj, spec, ManifestConfigMapName(spec.ManifestConfigMapName, ManifestHash(spec)))
}

// manifestConfigMap is ManifestConfigMap under the name name (a legacy
// name the target already points at, see LegacyManifestConfigMapName).
func manifestConfigMap(obj *v1alpha1.OpenMedModel, spec v1alpha1.NormalizedSpec, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespaceOf(obj),
			Labels: map[string]string{
				v1alpha1.ManagedByLabel:   v1alpha1.ManagedByValue,
				v1alpha1.ModelFamilyLabel: spec.Family,
			},
			Annotations:     map[string]string{v1alpha1.ModelResourceAnnotation: OwnerKey(obj)},
			OwnerReferences: []metav1.OwnerReference{ownerReference(obj)},
		},
		Immutable: ptr.To(true),
		Data: map[string]string{
			v1alpha1.ManifestKey:   string(ManifestJSON(spec)) + "\n",
			v1alpha1.PreloadEnvVar: spec.Version,
		},
	}
}

func ownerReference(obj *v1alpha1.OpenMedModel) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.GroupVersion.String(),
		Kind:               "OpenMedModel",
		Name:               obj.Name,
		UID:                obj.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

func namespaceOf(obj *v1alpha1.OpenMedModel) string {
	ns, _, _ := strings.Cut(OwnerKey(obj), "/")
	return ns
}

// ownedBy reports whether cm carries a controller ownerReference to obj. The
// UID is what counts: a ConfigMap left by an earlier resource of the same name
// is not ours, and garbage collection removes it.
func ownedBy(cm *corev1.ConfigMap, obj *v1alpha1.OpenMedModel) bool {
	ref := metav1.GetControllerOfNoCopy(cm)
	return ref != nil && ref.UID == obj.UID && obj.UID != ""
}

// content is what a pass knows of what a manifest ConfigMap holds.
type content int

const (
	// contentUnknown: neither recorded nor read; the pass reads it
	// (Plan.ReadConfigMaps) before the target may point at it.
	contentUnknown content = iota
	// contentWanted: the manifest the operator writes, immutable.
	contentWanted
	// contentOther: anything else (other data, or a ConfigMap whose data
	// may change).
	contentOther
	// contentTaken: read in the pass, the ConfigMap of the name is no
	// longer the model's (replaced since the store saw it).
	contentTaken
)

// ManifestConfigMapHash is the manifest hash of what a manifest ConfigMap
// holds: the digest of its manifest.json as ManifestConfigMap writes it (the
// manifest's canonical JSON and a newline), "" for a ConfigMap without one.
// It is the hash a VerifiedConfigMap records for a ConfigMap the operator
// wrote.
func ManifestConfigMapHash(cm *corev1.ConfigMap) string {
	m, ok := cm.Data[v1alpha1.ManifestKey]
	if !ok {
		return ""
	}
	return Digest([]byte(strings.TrimSuffix(m, "\n")))
}

// sameData reports whether cm holds exactly want's data and is immutable:
// a mutable ConfigMap's data may change under the same UID.
func sameData(cm, want *corev1.ConfigMap) bool {
	return ptr.Deref(cm.Immutable, false) && maps.Equal(cm.Data, want.Data)
}
