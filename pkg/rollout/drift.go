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

// String renders d for logs, events and status, for example
// `spec.replicas changed by "helm"` or `... removed (manager unknown)`. It
// holds field paths and field manager names only, never values.
func (d Drift) String() string {
	verb := "changed"
	switch {
	case d.Replaced:
		verb = "replaced"
	case d.Removed:
		verb = "removed"
	}
	if len(d.Managers) == 0 {
		return d.Field + " " + verb + " (manager unknown)"
	}
	quoted := make([]string, len(d.Managers))
	for i, m := range d.Managers {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	if d.Replaced {
		return d.Field + " replaced (set by " + strings.Join(quoted, ", ") + ")"
	}
	return d.Field + " " + verb + " by " + strings.Join(quoted, ", ")
}

// DetectDrift compares the fields the operator owns with the live Deployment
// and returns one Drift per field that does not hold the operator's value,
// attributed to the field managers (from managedFields) that set the field's
// value now. A field that is gone has no owner on record, so it is reported
// as removed with no manager named: managedFields do not say who removed a
// field, and the last writer of its parent may have changed something else.
// fieldManager, the operator's own manager, is never named, and a value it
// set itself is no drift (a pass applied another spec and its status write
// was lost). The pointer is
// the intent for spec, owner key, ConfigMap name and manifest hash, as
// DeploymentIntent builds it.
func DetectDrift(live *appsv1.Deployment, spec v1alpha1.NormalizedSpec, owner, cmName, manifestHash, fieldManager string) []Drift {
	return pointer{spec: spec, owner: owner, cmName: cmName, manifestHash: manifestHash}.drift(live, fieldManager)
}

func (p pointer) drift(live *appsv1.Deployment, fieldManager string) []Drift {
	var drift []Drift
	for _, f := range ownedFields(p) {
		if f.bookkeeping || f.holds(p, live) {
			continue
		}
		d := Drift{Field: f.name, Removed: !f.present(p, live)}
		if !d.Removed {
			setters := valueSetters(live.ManagedFields, f.path)
			d.Managers = others(setters, fieldManager)
			if len(d.Managers) == 0 && setters[fieldManager] {
				// The value is the operator's own, set by a pass whose
				// status write was lost (another spec, since changed back):
				// nobody else changed it.
				continue
			}
		}
		drift = append(drift, d)
	}
	return drift
}

// matches reports whether the live Deployment holds every value of the
// pointer (the Kopf operator's "Deployment matches" predicate, plus the
// pod-template owner annotation the operator also owns).
func (p pointer) matches(live *appsv1.Deployment) bool {
	for _, f := range ownedFields(p) {
		if !f.holds(p, live) {
			return false
		}
	}
	return true
}

// onlyBookkeeping reports whether every field the live Deployment does not
// hold is a bookkeeping label (ownedField.bookkeeping): the apply that puts
// them back changes nothing the model serves.
func (p pointer) onlyBookkeeping(live *appsv1.Deployment) bool {
	for _, f := range ownedFields(p) {
		if !f.bookkeeping && !f.holds(p, live) {
			return false
		}
	}
	return true
}

// templateChanged reports whether applying the pointer changes the pod
// template, which rolls the pods; the other owned fields do not.
func (p pointer) templateChanged(live *appsv1.Deployment) bool {
	for _, f := range ownedFields(p) {
		if f.template && !f.holds(p, live) {
			return true
		}
	}
	return false
}

// specChanged reports whether applying the pointer changes a field of the
// Deployment's spec outside the pod template (replicas, strategy, progress
// deadline): the Deployment's generation moves on without the pods rolling.
func (p pointer) specChanged(live *appsv1.Deployment) bool {
	for _, f := range ownedFields(p) {
		if f.keep && !f.holds(p, live) {
			return true
		}
	}
	return false
}

// foreignValues lists the values other field managers set that would make
// the operator's apply invalid, and that the apply therefore replaces: a
// literal value on the preload env entry (next to valueFrom), and a
// rollingUpdate block under a Recreate strategy.
func (p pointer) foreignValues(live *appsv1.Deployment, fieldManager string) []Drift {
	var out []Drift
	container := p.spec.TargetRef.ContainerName
	if e := PreloadEnv(live, container); e != nil && e.Value != "" {
		path := append(envPath(container).Copy(), fieldpath.PathElement{FieldName: ptrString("value")})
		out = append(out, Drift{
			Field:    fmt.Sprintf("spec.template.spec.containers[name=%q].env[name=%q].value", container, v1alpha1.PreloadEnvVar),
			Managers: valueOwners(live.ManagedFields, fieldManager, path),
			Replaced: true,
		})
	}
	if p.takeoverStrategy(live) {
		out = append(out, Drift{
			Field:    "spec.strategy.rollingUpdate",
			Managers: valueOwners(live.ManagedFields, fieldManager, fieldpath.MakePathOrDie("spec", "strategy", "rollingUpdate")),
			Replaced: true,
		})
	}
	return out
}

// takeoverStrategy reports whether a Recreate apply needs to take the live
// rollingUpdate block over first: server-side apply keeps a block another
// manager owns, and the API server rejects it under Recreate. Owning it at
// its live values, then applying without it, removes it.
func (p pointer) takeoverStrategy(live *appsv1.Deployment) bool {
	return p.spec.RolloutStrategy.Type == v1alpha1.RecreateRolloutStrategyType && live.Spec.Strategy.RollingUpdate != nil
}

func ptrString(s string) *string { return &s }

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
// value and no other source.
func envMatches(live *appsv1.Deployment, container, cmName string) bool {
	e := PreloadEnv(live, container)
	if e == nil {
		return false
	}
	ref := e.ValueFrom
	return e.Value == "" && ref != nil && ref.ConfigMapKeyRef != nil &&
		ref.SecretKeyRef == nil && ref.FieldRef == nil && ref.ResourceFieldRef == nil &&
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

// valueSetters are the managers whose managedFields entry sets the value at
// path: the field itself or anything below it except the key fields of a
// list item ("name" of a container or env entry) and the item's own
// presence, which a manager that only created the entry keeps owning.
func valueSetters(entries []metav1.ManagedFieldsEntry, path fieldpath.Path) map[string]bool {
	setters := map[string]bool{}
	mark := fieldMark(path)
	for _, e := range entries {
		if e.FieldsV1 == nil || (mark != nil && !bytes.Contains(e.FieldsV1.Raw, mark)) {
			// An entry that does not name the field sets nothing at it:
			// not parsed.
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			// A malformed entry cannot name a culprit; the others still can.
			continue
		}
		if setsValue(set, path) {
			setters[e.Manager] = true
		}
	}
	return setters
}

// fieldMark is how a managedFields entry's JSON names the last element of
// path when it is a field of plain characters (a label or annotation key,
// a field name): "f:<name>". Nil for anything else (a list item's key).
func fieldMark(path fieldpath.Path) []byte {
	if len(path) == 0 || path[len(path)-1].FieldName == nil {
		return nil
	}
	name := *path[len(path)-1].FieldName
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '/' || c == '-' || c == '_') {
			return nil
		}
	}
	return []byte(`"f:` + name + `"`)
}

// others names the setters but self, sorted.
func others(setters map[string]bool, self string) []string {
	names := make([]string, 0, len(setters))
	for m := range setters {
		if m != self {
			names = append(names, m)
		}
	}
	sort.Strings(names)
	return names
}

// valueOwners names the managers other than self that set the value at
// path (valueSetters), sorted.
func valueOwners(entries []metav1.ManagedFieldsEntry, self string, path fieldpath.Path) []string {
	return others(valueSetters(entries, path), self)
}

// setsValue reports whether set owns the value at path: path itself when it
// is a leaf, or a member below it other than a key field.
func setsValue(set *fieldpath.Set, path fieldpath.Path) bool {
	sub := set
	for _, pe := range path[:len(path)-1] {
		sub = sub.WithPrefix(pe)
		if sub.Empty() {
			return false
		}
	}
	last := path[len(path)-1]
	if sub.Members.Has(last) {
		// A leaf, or a map whose presence alone ("." ) is owned: only a
		// leaf counts.
		if child := sub.WithPrefix(last); child.Empty() {
			return true
		}
	}
	below := sub.WithPrefix(last)
	found := false
	below.Iterate(func(p fieldpath.Path) {
		if len(p) == 0 {
			return
		}
		if pe := p[0]; pe.FieldName != nil && *pe.FieldName == "name" && len(p) == 1 {
			return
		}
		found = true
	})
	return found
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
