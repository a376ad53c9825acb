package snapshot

import (
	"strings"
	"testing"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

func TestObserve(t *testing.T) {
	cond := func(typ, status, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: reason, ObservedGeneration: 3}
	}
	for _, tc := range []struct {
		name        string
		og          int64
		phase       v1alpha1.Phase
		conds       []metav1.Condition
		wantHealth  health.Code
		wantKStatus kstatus.Status
		wantLine    []string
	}{{
		name:        "not observed",
		og:          2,
		wantHealth:  health.Progressing,
		wantKStatus: kstatus.InProgressStatus,
		wantLine:    []string{"phase=-", "(generation 3 not observed yet)", "Ready=-"},
	}, {
		name:        "ready",
		og:          3,
		phase:       v1alpha1.PhaseReady,
		conds:       []metav1.Condition{cond("Ready", "True", "RolloutSucceeded"), cond("Degraded", "False", "Healthy")},
		wantHealth:  health.Healthy,
		wantKStatus: kstatus.CurrentStatus,
		wantLine:    []string{"phase=Ready", "Ready=True/RolloutSucceeded", "Reconciling=-", "Degraded=False/Healthy", "argocd=Healthy", "kstatus=Current"},
	}, {
		name:  "rolled back",
		og:    3,
		phase: v1alpha1.PhaseRolledBack,
		conds: []metav1.Condition{cond("Ready", "False", "RolledBack"), cond("Stalled", "True", "RolledBack"),
			cond("Degraded", "True", "DesiredVersionFailed"), cond("RolledBack", "True", "RollbackSucceeded")},
		wantHealth:  health.Degraded,
		wantKStatus: kstatus.FailedStatus,
		wantLine:    []string{"phase=RolledBack", "Stalled=True/RolledBack", "RolledBack=True/RollbackSucceeded", "argocd=Degraded", "kstatus=Failed"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := &v1alpha1.OpenMedModel{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Generation: 3},
				Spec:       v1alpha1.OpenMedModelSpec{Version: "OpenMed/pii-v2"},
				Status: v1alpha1.OpenMedModelStatus{
					ObservedGeneration: tc.og, Phase: tc.phase, ActiveVersion: "OpenMed/pii-v1", Conditions: tc.conds,
				},
			}
			d := &appsv1.Deployment{
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
				Status: appsv1.DeploymentStatus{UpdatedReplicas: 1, ReadyReplicas: 3, AvailableReplicas: 2, Conditions: []appsv1.DeploymentCondition{
					{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"},
				}},
			}
			s, err := Observe(m, d)
			if err != nil {
				t.Fatal(err)
			}
			if s.Health.Code != tc.wantHealth || s.KStatus != tc.wantKStatus {
				t.Errorf("health %s kstatus %s, want %s %s", s.Health.Code, s.KStatus, tc.wantHealth, tc.wantKStatus)
			}
			line := s.String()
			for _, want := range append(tc.wantLine, "active=pii-v1", "updated/ready/available=1/3/2 of 2 Progressing=False/ProgressDeadlineExceeded") {
				if !strings.Contains(line, want) {
					t.Errorf("line lacks %q:\n%s", want, line)
				}
			}
		})
	}
}
