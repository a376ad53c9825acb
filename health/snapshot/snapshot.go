// Package snapshot reads an OpenMedModel and its target Deployment at one
// moment the way a person, Argo CD and Flux each see it: phase and
// conditions, the Argo CD health verdict and kstatus. The demo prints it and
// the end-to-end tests wait on it.
package snapshot

import (
	"fmt"
	"strings"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// ShownConditions are the condition types a Snapshot shows, in order: the
// kstatus trio, then the two that say why a model is not serving its spec.
var ShownConditions = []string{
	v1alpha1.ReadyCondition,
	v1alpha1.ReconcilingCondition,
	v1alpha1.StalledCondition,
	v1alpha1.DegradedCondition,
	v1alpha1.RolledBackCondition,
}

// Snapshot is an OpenMedModel and its target Deployment at one moment, as a
// person (phase and conditions), Argo CD (health) and Flux (kstatus) see it.
type Snapshot struct {
	// Generation and ObservedGeneration of the OpenMedModel.
	Generation, ObservedGeneration int64
	// Phase is status.phase.
	Phase v1alpha1.Phase
	// DesiredVersion is spec.version; ActiveVersion is what serves.
	DesiredVersion, ActiveVersion string
	// Conditions holds "Status/Reason" per type of ShownConditions, "-" for
	// an absent condition.
	Conditions []string
	// Health is the Argo CD health of the object.
	Health health.Result
	// KStatus is Flux's kstatus of the object.
	KStatus kstatus.Status
	// Deployment is the target's rollout state, nil when it was not read.
	Deployment *DeploymentState
}

// DeploymentState is the part of a Deployment's status a rollout is about.
type DeploymentState struct {
	Replicas, Updated, Ready, Available int32
	// Progressing is the Progressing condition as "Status/Reason".
	Progressing string
}

// Observe takes a Snapshot of m and its target d (which may be nil).
func Observe(m *v1alpha1.OpenMedModel, d *appsv1.Deployment) (Snapshot, error) {
	m = m.DeepCopy()
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return Snapshot{}, err
	}
	u := &unstructured.Unstructured{Object: content}
	ks, err := kstatus.Compute(u)
	if err != nil {
		return Snapshot{}, fmt.Errorf("kstatus of OpenMedModel %s/%s: %w", m.Namespace, m.Name, err)
	}
	s := Snapshot{
		Generation:         m.Generation,
		ObservedGeneration: m.Status.ObservedGeneration,
		Phase:              m.Status.Phase,
		DesiredVersion:     m.Spec.Version,
		ActiveVersion:      m.Status.ActiveVersion,
		Health:             health.Assess(u),
		KStatus:            ks.Status,
	}
	for _, t := range ShownConditions {
		s.Conditions = append(s.Conditions, conditionString(m, t))
	}
	if d != nil {
		st := &DeploymentState{
			Replicas:    ptr.Deref(d.Spec.Replicas, 1),
			Updated:     d.Status.UpdatedReplicas,
			Ready:       d.Status.ReadyReplicas,
			Available:   d.Status.AvailableReplicas,
			Progressing: "-",
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing {
				st.Progressing = string(c.Status) + "/" + c.Reason
			}
		}
		s.Deployment = st
	}
	return s, nil
}

func conditionString(m *v1alpha1.OpenMedModel, t string) string {
	c := apimeta.FindStatusCondition(m.Status.Conditions, t)
	if c == nil {
		return "-"
	}
	return string(c.Status) + "/" + c.Reason
}

// Condition returns the "Status/Reason" of condition type t, "-" when absent.
func (s Snapshot) Condition(t string) string {
	for i, name := range ShownConditions {
		if name == t && i < len(s.Conditions) {
			return s.Conditions[i]
		}
	}
	return "-"
}

// Observed reports whether the status describes the current generation.
func (s Snapshot) Observed() bool {
	return s.ObservedGeneration == s.Generation
}

// String is the snapshot on one line, for a terminal or a CI log.
func (s Snapshot) String() string {
	var b strings.Builder
	phase := string(s.Phase)
	if phase == "" {
		phase = "-"
	}
	fmt.Fprintf(&b, "phase=%-10s active=%s", phase, shortVersion(s.ActiveVersion))
	if !s.Observed() {
		fmt.Fprintf(&b, " (generation %d not observed yet)", s.Generation)
	}
	for i, t := range ShownConditions {
		fmt.Fprintf(&b, " %s=%s", t, s.Conditions[i])
	}
	fmt.Fprintf(&b, " | argocd=%s (%s) | kstatus=%s", s.Health.Code, s.Health.Message, s.KStatus)
	if d := s.Deployment; d != nil {
		fmt.Fprintf(&b, " | deployment updated/ready/available=%d/%d/%d of %d Progressing=%s",
			d.Updated, d.Ready, d.Available, d.Replicas, d.Progressing)
	}
	return b.String()
}

// shortVersion keeps the part of a model version after its organisation,
// which is what tells the versions of one model apart.
func shortVersion(v string) string {
	if v == "" {
		return "-"
	}
	if i := strings.LastIndex(v, "/"); i >= 0 {
		return v[i+1:]
	}
	return v
}
