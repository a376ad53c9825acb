package rollout

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

func strategyValue(s v1alpha1.NormalizedRolloutStrategy) map[string]any {
	strategy := map[string]any{"type": string(s.Type)}
	// Recreate sends no rollingUpdate: the field leaves our apply
	// configuration, so SSA removes the values we set earlier.
	if s.Type == v1alpha1.RollingUpdateRolloutStrategyType {
		strategy["rollingUpdate"] = map[string]any{
			"maxUnavailable": intOrStringValue(s.MaxUnavailable),
			"maxSurge":       intOrStringValue(s.MaxSurge),
		}
	}
	return strategy
}

// liveStrategy is a live strategy in apply-configuration form.
func liveStrategy(s appsv1.DeploymentStrategy) map[string]any {
	strategy := map[string]any{"type": string(s.Type)}
	if ru := s.RollingUpdate; ru != nil {
		rolling := map[string]any{}
		if ru.MaxUnavailable != nil {
			rolling["maxUnavailable"] = intOrStringValue(*ru.MaxUnavailable)
		}
		if ru.MaxSurge != nil {
			rolling["maxSurge"] = intOrStringValue(*ru.MaxSurge)
		}
		strategy["rollingUpdate"] = rolling
	}
	return strategy
}

// takeoverStrategy is a RollingUpdate strategy whose values all differ from
// the live ones. Server-side apply shares ownership of a field applied with
// the value it already has; only a different value, forced, makes the
// operator the field's sole owner, so the next apply can remove it.
func takeoverStrategy(live appsv1.DeploymentStrategy) map[string]any {
	pick := func(live *intstr.IntOrString, a, b int64) int64 {
		if live != nil && live.Type == intstr.Int && int64(live.IntVal) == a {
			return b
		}
		return a
	}
	var mu, ms *intstr.IntOrString
	if ru := live.RollingUpdate; ru != nil {
		mu, ms = ru.MaxUnavailable, ru.MaxSurge
	}
	return map[string]any{
		"type": string(appsv1.RollingUpdateDeploymentStrategyType),
		"rollingUpdate": map[string]any{
			"maxUnavailable": pick(mu, 0, 1),
			"maxSurge":       pick(ms, 1, 2),
		},
	}
}

func intOrStringValue(v intstr.IntOrString) any {
	if v.Type == intstr.String {
		return v.StrVal
	}
	return int64(v.IntVal)
}

// setPath stores v at path in the apply configuration obj, creating maps
// on the way and, for a list element selected by key fields, the element
// with those fields.
func setPath(obj map[string]any, path fieldpath.Path, v any) {
	cur := obj
	for i, pe := range path {
		last := i == len(path)-1
		switch {
		case pe.FieldName != nil:
			name := *pe.FieldName
			if last {
				cur[name] = v
				return
			}
			if next := path[i+1]; next.Key != nil {
				// The next element selects a list item: the list lives here.
				list, _ := cur[name].([]any)
				item, list := listItem(list, *next.Key)
				cur[name] = list
				if i+1 == len(path)-1 {
					for k, x := range v.(map[string]any) {
						item[k] = x
					}
					return
				}
				cur = item
				continue
			}
			m, ok := cur[name].(map[string]any)
			if !ok {
				m = map[string]any{}
				cur[name] = m
			}
			cur = m
		case pe.Key != nil:
			// Consumed with the list field before it.
		}
	}
}

// listItem finds the element of list whose key fields equal key, or adds
// one with them.
func listItem(list []any, key value.FieldList) (map[string]any, []any) {
	for _, x := range list {
		item := x.(map[string]any)
		match := true
		for _, f := range key {
			if item[f.Name] != f.Value.AsString() {
				match = false
				break
			}
		}
		if match {
			return item, list
		}
	}
	item := map[string]any{}
	for _, f := range key {
		item[f.Name] = f.Value.AsString()
	}
	return item, append(list, item)
}
