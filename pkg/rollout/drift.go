package rollout

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// String renders d for logs and the DriftCorrected event, for example
// `spec.replicas changed by "helm"`. It holds field paths and field manager
// names only, never values.
func (d Drift) String() string {
	if len(d.Managers) == 0 {
		return d.Field + " changed"
	}
	quoted := make([]string, len(d.Managers))
	for i, m := range d.Managers {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	return d.Field + " changed by " + strings.Join(quoted, ", ")
}

// pointer is what the operator writes to a Deployment for one spec: the
// values DeploymentIntent sends, in typed form for comparison.
type pointer struct {
	spec         v1alpha1.NormalizedSpec
	owner        string
	cmName       string
	manifestHash string
}

// ownedField is one field of the intent: its display path, its fieldpath in
// managedFields and whether the live Deployment holds the operator's value.
type ownedField struct {
	name string
	path fieldpath.Path
	// parent is where a manager that removed the field left its trace (the
	// container for the env entry, the annotation map for an annotation).
	parent fieldpath.Path
	ok     bool
}

// DetectDrift compares the fields the operator owns with the live Deployment
// and returns one Drift per field that does not hold the operator's value,
// attributed to the field managers (from managedFields) that own it now or,
// when it was removed, that touched its parent. fieldManager, the operator's
// own manager, is never named. The pointer is the intent for spec, owner key,
// ConfigMap name and manifest hash, as DeploymentIntent builds it.
func DetectDrift(live *appsv1.Deployment, spec v1alpha1.NormalizedSpec, owner, cmName, manifestHash, fieldManager string) []Drift {
	p := pointer{spec: spec, owner: owner, cmName: cmName, manifestHash: manifestHash}
	var drift []Drift
	for _, f := range p.fields(live) {
		if f.ok {
			continue
		}
		drift = append(drift, Drift{Field: f.name, Managers: attribute(live.ManagedFields, fieldManager, f)})
	}
	return drift
}

// fields lists every owned field of the pointer with its comparison result.
func (p pointer) fields(live *appsv1.Deployment) []ownedField {
	spec := p.spec
	container := spec.TargetRef.ContainerName
	containerPath := []any{"spec", "template", "spec", "containers", fieldpath.KeyByFields("name", container)}
	envPath := append(append([]any{}, containerPath...), "env", fieldpath.KeyByFields("name", v1alpha1.PreloadEnvVar))

	var fields []ownedField
	fields = append(fields, ownedField{
		name:   "metadata.annotations[" + v1alpha1.ModelResourceAnnotation + "]",
		path:   fieldpath.MakePathOrDie("metadata", "annotations", v1alpha1.ModelResourceAnnotation),
		parent: fieldpath.MakePathOrDie("metadata", "annotations"),
		ok:     live.Annotations[v1alpha1.ModelResourceAnnotation] == p.owner,
	})
	if spec.Replicas != nil {
		fields = append(fields, ownedField{
			name: "spec.replicas",
			path: fieldpath.MakePathOrDie("spec", "replicas"),
			ok:   live.Spec.Replicas != nil && *live.Spec.Replicas == *spec.Replicas,
		})
	}
	fields = append(fields,
		ownedField{
			name: "spec.progressDeadlineSeconds",
			path: fieldpath.MakePathOrDie("spec", "progressDeadlineSeconds"),
			ok: live.Spec.ProgressDeadlineSeconds != nil &&
				*live.Spec.ProgressDeadlineSeconds == spec.RolloutStrategy.ProgressDeadlineSeconds,
		},
		ownedField{
			name: "spec.strategy",
			path: fieldpath.MakePathOrDie("spec", "strategy"),
			ok:   strategyMatches(live.Spec.Strategy, spec.RolloutStrategy),
		},
		ownedField{
			name:   "spec.template.metadata.annotations[" + v1alpha1.ManifestHashAnnotation + "]",
			path:   fieldpath.MakePathOrDie("spec", "template", "metadata", "annotations", v1alpha1.ManifestHashAnnotation),
			parent: fieldpath.MakePathOrDie("spec", "template", "metadata", "annotations"),
			ok:     live.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == p.manifestHash,
		},
		ownedField{
			name:   "spec.template.metadata.annotations[" + v1alpha1.ModelResourceAnnotation + "]",
			path:   fieldpath.MakePathOrDie("spec", "template", "metadata", "annotations", v1alpha1.ModelResourceAnnotation),
			parent: fieldpath.MakePathOrDie("spec", "template", "metadata", "annotations"),
			ok:     live.Spec.Template.Annotations[v1alpha1.ModelResourceAnnotation] == p.owner,
		},
		ownedField{
			name:   fmt.Sprintf("spec.template.spec.containers[name=%q].env[name=%q]", container, v1alpha1.PreloadEnvVar),
			path:   fieldpath.MakePathOrDie(envPath...),
			parent: fieldpath.MakePathOrDie(containerPath...),
			ok:     envMatches(live, container, p.cmName),
		},
	)
	return fields
}

// matches reports whether the live Deployment holds every value of the
// pointer (the reference's "Deployment matches" predicate, plus the
// pod-template owner annotation the operator also owns).
func (p pointer) matches(live *appsv1.Deployment) bool {
	for _, f := range p.fields(live) {
		if !f.ok {
			return false
		}
	}
	return true
}

// templateChanged reports whether applying the pointer changes the pod
// template, which rolls the pods; the other owned fields do not.
func (p pointer) templateChanged(live *appsv1.Deployment) bool {
	for _, f := range p.fields(live) {
		if !f.ok && strings.HasPrefix(f.name, "spec.template.") {
			return true
		}
	}
	return false
}

func strategyMatches(live appsv1.DeploymentStrategy, want v1alpha1.NormalizedRolloutStrategy) bool {
	if string(live.Type) != string(want.Type) {
		return false
	}
	if want.Type == v1alpha1.RecreateRolloutStrategyType {
		return live.RollingUpdate == nil
	}
	ru := live.RollingUpdate
	// Values compare with their JSON type: 1 and "1" differ, as in the
	// reference.
	return ru != nil && intOrStringEqual(ru.MaxUnavailable, want.MaxUnavailable) &&
		intOrStringEqual(ru.MaxSurge, want.MaxSurge)
}

func intOrStringEqual(live *intstr.IntOrString, want intstr.IntOrString) bool {
	return live != nil && live.Type == want.Type && live.IntVal == want.IntVal && live.StrVal == want.StrVal
}

// envMatches checks the first env entry named OPENMED_SERVICE_PRELOAD_MODELS
// of the container: it must reference the ConfigMap key and hold no literal
// value.
func envMatches(live *appsv1.Deployment, container, cmName string) bool {
	e := PreloadEnv(live, container)
	if e == nil {
		return false
	}
	ref := e.ValueFrom
	return e.Value == "" && ref != nil && ref.ConfigMapKeyRef != nil &&
		ref.ConfigMapKeyRef.Name == cmName && ref.ConfigMapKeyRef.Key == v1alpha1.PreloadEnvVar
}

// PreloadEnv returns the first OPENMED_SERVICE_PRELOAD_MODELS env entry of
// the named container of d (the one the service reads), or nil.
func PreloadEnv(d *appsv1.Deployment, container string) *corev1.EnvVar {
	if d == nil {
		return nil
	}
	c := findContainer(d, container)
	if c == nil {
		return nil
	}
	for i := range c.Env {
		if c.Env[i].Name == v1alpha1.PreloadEnvVar {
			return &c.Env[i]
		}
	}
	return nil
}

func findContainer(d *appsv1.Deployment, name string) *corev1.Container {
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == name {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// pointedConfigMap is the ConfigMap the live container's preload entry
// references, or "".
func pointedConfigMap(d *appsv1.Deployment, container string) string {
	if e := PreloadEnv(d, container); e != nil && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
		return e.ValueFrom.ConfigMapKeyRef.Name
	}
	return ""
}

// attribute names the managers that changed f: those whose managedFields
// entry owns the field (or something under it, for spec.strategy), else, for
// a removed field, the Update managers that touched its parent. The
// operator's own manager is excluded; the result is sorted.
func attribute(entries []metav1.ManagedFieldsEntry, self string, f ownedField) []string {
	owners := map[string]bool{}
	touchedParent := map[string]bool{}
	for _, e := range entries {
		if e.Manager == self || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			// A malformed entry cannot name a culprit; the others still can.
			continue
		}
		if touches(set, f.path) {
			owners[e.Manager] = true
		}
		if f.parent != nil && e.Operation == metav1.ManagedFieldsOperationUpdate && touches(set, f.parent) {
			touchedParent[e.Manager] = true
		}
	}
	if len(owners) == 0 {
		owners = touchedParent
	}
	names := make([]string, 0, len(owners))
	for m := range owners {
		names = append(names, m)
	}
	sort.Strings(names)
	return names
}

// touches reports whether set holds path or anything below it.
func touches(set *fieldpath.Set, path fieldpath.Path) bool {
	if set.Has(path) {
		return true
	}
	sub := set
	for _, pe := range path {
		sub = sub.WithPrefix(pe)
		if sub.Empty() {
			return false
		}
	}
	return !sub.Empty()
}
