package preview

import (
	"bytes"
	"encoding/json"
	"sort"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// FieldChange is one field of the Deployment that the operator's apply
// changes.
type FieldChange struct {
	// Field is the path, in managedFields notation:
	// .spec.template.spec.containers[name="openmed-service"].env[name="..."].
	Field string `json:"field"`
	// From and To are the JSON values before and after; From is empty for
	// a field the apply adds, To for one it removes.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Managers are the field managers that own the field (or a part of it)
	// now, from the live managedFields.
	Managers []string `json:"managers,omitempty"`

	path fieldpath.Path
}

// Diff lists the fields of spec, metadata.labels and metadata.annotations
// that differ between live and after (the Deployment as the API server
// would store it after the operator's apply: the result of a server-side
// dry-run apply), with the managers that own each now. Lists of objects with
// a name are compared element by element, by name, as the Deployment schema
// merges them; other lists as a whole.
func Diff(live, after *unstructured.Unstructured) []FieldChange {
	var out []FieldChange
	for _, root := range [][]string{{"metadata", "labels"}, {"metadata", "annotations"}, {"spec"}} {
		a, _, _ := unstructured.NestedFieldNoCopy(live.Object, root...)
		b, _, _ := unstructured.NestedFieldNoCopy(after.Object, root...)
		walk(pathOf(root...), a, b, false, &out)
	}
	attribute(out, live.GetManagedFields())
	return out
}

// Overlay lists the fields intent sets that differ in live: the offline
// view, for a Deployment read from a file, where no API server can compute
// the result of the apply. Fields the apply would remove (a foreign
// rollingUpdate block under Recreate) are not listed; the drift in the
// Result names them.
func Overlay(live, intent *unstructured.Unstructured) []FieldChange {
	var out []FieldChange
	for _, root := range [][]string{{"metadata", "labels"}, {"metadata", "annotations"}, {"spec"}} {
		a, _, _ := unstructured.NestedFieldNoCopy(live.Object, root...)
		b, _, _ := unstructured.NestedFieldNoCopy(intent.Object, root...)
		walk(pathOf(root...), a, withoutEmpty(b), true, &out)
	}
	attribute(out, live.GetManagedFields())
	return out
}

// TemplateChanges reports whether any change is under spec.template: the
// Deployment controller then replaces the pods.
func TemplateChanges(changes []FieldChange) bool {
	prefix := pathOf("spec", "template").String()
	for _, c := range changes {
		if len(c.Field) >= len(prefix) && c.Field[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

func pathOf(names ...string) fieldpath.Path {
	p := make(fieldpath.Path, 0, len(names))
	for _, n := range names {
		p = append(p, fieldpath.PathElement{FieldName: &n})
	}
	return p
}

// walk compares a and b below path. With onlyB, fields absent from b are
// not changes (b is a partial intent).
func walk(path fieldpath.Path, a, b any, onlyB bool, out *[]FieldChange) {
	if onlyB && b == nil {
		return
	}
	// An empty object reads as an absent one: metadata.annotations: {} and
	// no annotations are the same Deployment.
	if m, ok := a.(map[string]any); ok && len(m) == 0 {
		a = nil
	}
	if m, ok := b.(map[string]any); ok && len(m) == 0 {
		b = nil
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	// An absent object compares as an empty one, field by field, so the
	// changes read the same whether or not the parent existed before.
	if (aIsMap || a == nil) && (bIsMap || b == nil) && (aIsMap || bIsMap) {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			walk(child(path, fieldpath.PathElement{FieldName: &k}), am[k], bm[k], onlyB, out)
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if (aIsList || a == nil) && (bIsList || b == nil) && (aIsList || bIsList) && named(al) && named(bl) {
		byName := func(l []any) map[string]any {
			m := map[string]any{}
			for _, item := range l {
				m[item.(map[string]any)["name"].(string)] = item
			}
			return m
		}
		an, bn := byName(al), byName(bl)
		var names []string
		seen := map[string]bool{}
		for _, l := range [][]any{al, bl} {
			for _, item := range l {
				n := item.(map[string]any)["name"].(string)
				if !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
		}
		for _, n := range names {
			key := fieldpath.PathElement{Key: &value.FieldList{{Name: "name", Value: value.NewValueInterface(n)}}}
			p := child(path, key)
			if an[n] == nil || bn[n] == nil {
				// An element added or removed (an env entry) is one
				// change, not one per field.
				if !(onlyB && bn[n] == nil) {
					*out = append(*out, FieldChange{Field: p.String(), From: encode(an[n]), To: encode(bn[n]), path: p})
				}
				continue
			}
			walk(p, an[n], bn[n], onlyB, out)
		}
		return
	}
	if apiequality.Semantic.DeepEqual(a, b) {
		return
	}
	*out = append(*out, FieldChange{Field: path.String(), From: encode(a), To: encode(b), path: path})
}

// withoutEmpty is v without empty strings in its objects: the API server
// drops an empty optional string (the intent's "value": "" that takes a
// literal value over), so the offline view must not show it as a change.
func withoutEmpty(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if s, ok := e.(string); ok && s == "" {
				continue
			}
			out[k] = withoutEmpty(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = withoutEmpty(e)
		}
		return out
	default:
		return v
	}
}

// named reports whether every element of l is an object with a string name.
func named(l []any) bool {
	for _, item := range l {
		m, ok := item.(map[string]any)
		if !ok {
			return false
		}
		if _, ok := m["name"].(string); !ok {
			return false
		}
	}
	return true
}

func encode(v any) string {
	if v == nil {
		return ""
	}
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

// attribute fills in the managers that own each changed field now: those
// whose managedFields entry holds the field or a field below it, else the
// nearest enclosing field they hold (an atomic value such as
// configMapKeyRef is recorded as one field).
func attribute(changes []FieldChange, entries []metav1.ManagedFieldsEntry) {
	type owned struct {
		manager string
		set     *fieldpath.Set
	}
	var sets []owned
	for _, e := range entries {
		if e.FieldsV1 == nil || e.Subresource != "" {
			continue
		}
		s := &fieldpath.Set{}
		if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			continue
		}
		sets = append(sets, owned{e.Manager, s})
	}
	for i := range changes {
		if changes[i].From == "" {
			// A field the apply adds has no owner yet.
			continue
		}
		p := changes[i].path
		var managers []string
		for _, o := range sets {
			if o.set.Has(p) || holdsBelow(o.set, p) {
				managers = append(managers, o.manager)
			}
		}
		for n := len(p) - 1; len(managers) == 0 && n > 0; n-- {
			for _, o := range sets {
				if o.set.Has(p[:n]) {
					managers = append(managers, o.manager)
				}
			}
		}
		sort.Strings(managers)
		changes[i].Managers = managers
	}
}

// child is path extended by pe, in a slice of its own.
func child(path fieldpath.Path, pe fieldpath.PathElement) fieldpath.Path {
	out := make(fieldpath.Path, 0, len(path)+1)
	return append(append(out, path...), pe)
}

// holdsBelow reports whether s holds any field below p.
func holdsBelow(s *fieldpath.Set, p fieldpath.Path) bool {
	for _, pe := range p {
		s = s.WithPrefix(pe)
	}
	return !s.Empty()
}
