package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// actionClock is the retry action's timestamp in the expected outputs; the
// action tests run the Lua with this clock (health/argocd), Argo CD's test
// normalizer replaces it.
const actionClock = "2026-08-20T12:00:00Z"

// conditionOf returns the condition of type typ itself (not a copy), so a
// derivation can change it.
func conditionOf(u *unstructured.Unstructured, typ string) map[string]any {
	st, _ := u.Object["status"].(map[string]any)
	conditions, _ := st["conditions"].([]any)
	for _, item := range conditions {
		if c, ok := item.(map[string]any); ok && c["type"] == typ {
			return c
		}
	}
	return nil
}

func isTrue(u *unstructured.Unstructured, typ string) bool {
	c := conditionOf(u, typ)
	return c != nil && c["status"] == "True"
}

func reasonOf(u *unstructured.Unstructured, typ string) string {
	r, _ := conditionOf(u, typ)["reason"].(string)
	return r
}

func phase(u *unstructured.Unstructured) v1alpha1.Phase {
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return v1alpha1.Phase(p)
}

func observed(u *unstructured.Unstructured) bool {
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return og == u.GetGeneration()
}

func kstatusMessage(u *unstructured.Unstructured) string {
	for _, typ := range []string{v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition} {
		if c := conditionOf(u, typ); c != nil {
			m, _ := c["message"].(string)
			return m
		}
	}
	return ""
}

func desired(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "status", "desiredVersion")
	return v
}

func readyAt(version string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		active, _, _ := unstructured.NestedString(u.Object, "status", "activeVersion")
		return observed(u) && isTrue(u, v1alpha1.ReadyCondition) && active == version
	}
}

func reconciling(reason string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		return observed(u) && isTrue(u, v1alpha1.ReconcilingCondition) && reasonOf(u, v1alpha1.ReconcilingCondition) == reason
	}
}

func stalledWith(reason string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		return observed(u) && isTrue(u, v1alpha1.StalledCondition) && reasonOf(u, v1alpha1.StalledCondition) == reason
	}
}

// summary is one line about a model's status, for progress output.
func summary(u *unstructured.Unstructured) string {
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return fmt.Sprintf("gen %d/%d phase %s Ready=%v %q", og, u.GetGeneration(), phase(u), isTrue(u, v1alpha1.ReadyCondition), kstatusMessage(u))
}

// derivation is a fixture derived from the capture source by change.
type derivation struct {
	name, source, change string
	mutate               func(u *unstructured.Unstructured) error
}

// derive adds the fixtures for statuses the operator never writes, or that
// the scenarios do not play, each a capture with one stated change, and the
// action fixtures.
func (r *rig) derive() error {
	captured := map[string]*unstructured.Unstructured{}
	for _, f := range r.fixtures {
		captured[f.name] = f.obj
	}
	from := func(name string) (*unstructured.Unstructured, error) {
		u, ok := captured[name]
		if !ok {
			return nil, fmt.Errorf("no capture %s to derive from", name)
		}
		return u.DeepCopy(), nil
	}
	add := func(dir, name, source, change string, u *unstructured.Unstructured) {
		header := fmt.Sprintf("# Derived from %s (captured from a live cluster by `go run ./health/internal/capture`):\n# %s.\n", source, change)
		r.fixtures = append(r.fixtures, fixture{dir: dir, name: name, header: header, obj: u})
	}
	setConditions := func(u *unstructured.Unstructured, conditions ...map[string]any) {
		items := make([]any, len(conditions))
		for i, c := range conditions {
			c["observedGeneration"] = u.GetGeneration()
			c["lastTransitionTime"] = conditionOf(u, v1alpha1.ReadyCondition)["lastTransitionTime"]
			items[i] = c
		}
		_ = unstructured.SetNestedSlice(u.Object, items, "status", "conditions")
	}
	cond := func(typ, status, reason, message string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": message}
	}

	derivations := []derivation{
		{"no_status.yaml", "not_observed_default.yaml", "status removed; an API server always stores the CRD's default status, so this is what a client-side object looks like", func(u *unstructured.Unstructured) error {
			unstructured.RemoveNestedField(u.Object, "status")
			return nil
		}},
		{"empty_status.yaml", "not_observed_default.yaml", "status emptied (no observedGeneration), as an object stored before the CRD defaulted it", func(u *unstructured.Unstructured) error {
			u.Object["status"] = map[string]any{}
			return nil
		}},
		{"stale_condition_generation.yaml", "ready.yaml", "the Ready condition's observedGeneration set one below the generation, a status assembled from two passes", func(u *unstructured.Unstructured) error {
			conditionOf(u, v1alpha1.ReadyCondition)["observedGeneration"] = u.GetGeneration() - 1
			return nil
		}},
		{"invalid_spec.yaml", "ready.yaml", "spec.family emptied (an object stored under a CRD without that rule) and the status rollout.Decide returns for it", func(u *unstructured.Unstructured) error {
			return decideInvalid(u)
		}},
		{"unknown_phase.yaml", "ready.yaml", "a phase and Ready reason no version of the operator writes, as a newer operator could", func(u *unstructured.Unstructured) error {
			_ = unstructured.SetNestedField(u.Object, "Hibernating", "status", "phase")
			setConditions(u, cond("Ready", "Unknown", "Hibernating", "Scaled to zero while idle"))
			return nil
		}},
		{"unknown_phase_ready.yaml", "ready.yaml", "an unknown phase with Ready=True, as a newer operator could write", func(u *unstructured.Unstructured) error {
			_ = unstructured.SetNestedField(u.Object, "Promoted", "status", "phase")
			setConditions(u, cond("Ready", "True", "Promoted", "Promoted to all replicas"))
			return nil
		}},
		{"unknown_phase_reconciling.yaml", "ready.yaml", "an unknown phase with Reconciling=True, as a newer operator could write", func(u *unstructured.Unstructured) error {
			_ = unstructured.SetNestedField(u.Object, "Promoting", "status", "phase")
			setConditions(u, cond("Reconciling", "True", "Promoting", ""), cond("Ready", "Unknown", "Promoting", "Promoting to all replicas"))
			return nil
		}},
		{"ready_phase_condition_unknown.yaml", "ready.yaml", "Ready=Unknown with phase Ready and no Reconciling, which no version writes", func(u *unstructured.Unstructured) error {
			c := conditionOf(u, v1alpha1.ReadyCondition)
			c["status"], c["reason"] = "Unknown", "Progressing"
			return nil
		}},
		{"deployment_unavailable_ready.yaml", "ready.yaml", "Degraded=True/DeploymentUnavailable next to Ready=True, without Reconciling (no version writes both)", func(u *unstructured.Unstructured) error {
			c := conditionOf(u, v1alpha1.DegradedCondition)
			c["status"], c["reason"], c["message"] = "True", v1alpha1.DeploymentUnavailableReason, rollout.MsgDeploymentUnavailable
			return nil
		}},
		{"target_paused_without_message.yaml", "target_paused.yaml", "the Reconciling condition's message emptied, as a status written by hand could have it", func(u *unstructured.Unstructured) error {
			conditionOf(u, v1alpha1.ReconcilingCondition)["message"] = ""
			return nil
		}},
		{"status_without_phase.yaml", "not_observed_default.yaml", "status set to the current observedGeneration alone: observed, nothing reported yet", func(u *unstructured.Unstructured) error {
			u.Object["status"] = map[string]any{"observedGeneration": u.GetGeneration()}
			return nil
		}},
		{"ready_without_active_version.yaml", "ready.yaml", "status.activeVersion removed (the Kopf operator's field is nullable)", func(u *unstructured.Unstructured) error {
			unstructured.RemoveNestedField(u.Object, "status", "activeVersion")
			return nil
		}},
	}
	derivations = append(derivations, verificationDerivations()...)
	for _, ref := range []struct{ name, source string }{
		{"reference_pending.yaml", "target_not_found.yaml"},
		{"reference_rolling_out.yaml", "rolling_out.yaml"},
		{"reference_failed.yaml", "failed_no_rollback.yaml"},
		{"reference_rolled_back.yaml", "rolled_back.yaml"},
		{"reference_invalid_spec.yaml", "invalid_spec.yaml"},
		{"reference_rollback_in_progress.yaml", "rollback_in_progress.yaml"},
		{"reference_manual_rollback_held.yaml", "manual_rollback_held.yaml"},
	} {
		derivations = append(derivations, derivation{ref.name, ref.source,
			"the status in the Python (Kopf) operator's format: its fields and four conditions only, no Reconciling/Stalled", referenceStatus})
	}
	for _, d := range derivations {
		// Derivations run in order, so one may start from another.
		u, err := from(d.source)
		if err != nil {
			return err
		}
		if err := d.mutate(u); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		add("testdata", d.name, d.source, d.change, u)
		captured[d.name] = u
	}

	// The action fixtures: inputs are fixtures, outputs the input with the
	// action's change.
	actions := filepath.Join("actions", "testdata")
	copyOf := func(name, source string) error {
		u, err := from(source)
		if err != nil {
			return err
		}
		add(actions, name, source, "unchanged", u)
		return nil
	}
	for name, source := range map[string]string{"new.yaml": "not_observed_default.yaml", "ready.yaml": "ready.yaml",
		"rolled_back.yaml": "rolled_back.yaml", "suspended.yaml": "suspended.yaml", "reference_failed.yaml": "reference_failed.yaml",
		"manual_rollback_held.yaml": "manual_rollback_held.yaml"} {
		if err := copyOf(name, source); err != nil {
			return err
		}
	}
	outputs := []struct{ name, source, change string }{
		{"ready_rollback.yaml", "ready.yaml", "the rollback action's result: openmed.ai/rollback-to set to the newest retained version other than spec.version"},
		{"reference_failed_rollback.yaml", "reference_failed.yaml", "the rollback action's result: openmed.ai/rollback-to set to the retained version"},
		{"rolled_back_retry.yaml", "rolled_back.yaml", "the retry action's result: requestedAt and resetAt set to the action's clock"},
		{"manual_rollback_held_retry.yaml", "manual_rollback_held.yaml", "the retry action's result: requestedAt and resetAt set to the action's clock, openmed.ai/rollback-to removed"},
		{"ready_suspend.yaml", "ready.yaml", "the suspend action's result: spec.suspend true"},
		{"suspended_resume.yaml", "suspended.yaml", "the resume action's result: spec.suspend false"},
	}
	for _, o := range outputs {
		u, err := from(o.source)
		if err != nil {
			return err
		}
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		switch {
		case strings.HasSuffix(o.name, "_rollback.yaml"):
			annotations[v1alpha1.RollbackToAnnotation] = r.v1
			u.SetAnnotations(annotations)
		case strings.HasSuffix(o.name, "_retry.yaml"):
			annotations["reconcile.fluxcd.io/requestedAt"] = actionClock
			annotations[v1alpha1.ResetRequestAnnotation] = actionClock
			delete(annotations, v1alpha1.RollbackToAnnotation)
			u.SetAnnotations(annotations)
		case strings.HasSuffix(o.name, "_suspend.yaml"):
			_ = unstructured.SetNestedField(u.Object, true, "spec", "suspend")
		case strings.HasSuffix(o.name, "_resume.yaml"):
			_ = unstructured.SetNestedField(u.Object, false, "spec", "suspend")
		}
		add(actions, o.name, o.source, o.change, u)
	}
	return nil
}

// decideInvalid empties spec.family, bumps the generation as the edit would,
// and sets the status the decision core returns.
func decideInvalid(u *unstructured.Unstructured) error {
	_ = unstructured.SetNestedField(u.Object, "", "spec", "family")
	u.SetGeneration(u.GetGeneration() + 1)
	m := &v1alpha1.OpenMedModel{}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, m); err != nil {
		return err
	}
	now := metav1.Now()
	if c := conditionOf(u, v1alpha1.ReadyCondition); c != nil {
		if ts, ok := c["lastTransitionTime"].(string); ok {
			_ = now.UnmarshalQueryParameter(ts)
		}
	}
	plan := rollout.Decide(m, rollout.Observed{Now: now}, rollout.Options{})
	st, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&plan.Status)
	if err != nil {
		return err
	}
	u.Object["status"] = st
	return nil
}

// referenceFields are the status fields the Python (Kopf) operator writes.
var referenceFields = map[string]bool{
	"observedGeneration": true, "phase": true, "desiredVersion": true, "activeVersion": true, "desiredSpecHash": true,
	"appliedSpecHash": true, "failedSpecHash": true, "manifestHash": true, "targetDeploymentGeneration": true,
	"rollbackCount": true, "rollbackRequest": true, "lastSuccessfulSpec": true, "previousSuccessfulSpec": true,
	"rollbackSpec": true, "conditions": true,
}

func referenceStatus(u *unstructured.Unstructured) error {
	st, _ := u.Object["status"].(map[string]any)
	for k := range st {
		if !referenceFields[k] {
			delete(st, k)
		}
	}
	conditions, _ := st["conditions"].([]any)
	kept := conditions[:0]
	for _, item := range conditions {
		c, _ := item.(map[string]any)
		switch c["type"] {
		case v1alpha1.ReadyCondition, v1alpha1.ProgressingCondition, v1alpha1.DegradedCondition, v1alpha1.RolledBackCondition:
			kept = append(kept, c)
		}
	}
	st["conditions"] = kept
	return nil
}

// write writes every fixture under dir.
func (r *rig) write(dir string) (int, error) {
	for _, f := range r.fixtures {
		data, err := yaml.Marshal(f.obj.Object)
		if err != nil {
			return 0, err
		}
		path := filepath.Join(dir, f.dir, f.name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(path, append([]byte(f.header), data...), 0o644); err != nil {
			return 0, err
		}
	}
	return len(r.fixtures), nil
}
