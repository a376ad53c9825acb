package localrun_test

import (
	"path/filepath"
	"strings"
	"testing"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/health"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
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
			s, err := localrun.Observe(m, d)
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

func TestWriteImpersonatingKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "admin.kubeconfig")
	admin := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://127.0.0.1:6443"}, "other": {Server: "https://127.0.0.1:7443"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {Token: "t"}, "other": {Token: "o"}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "admin"}, "other": {Cluster: "other", AuthInfo: "other"}},
		CurrentContext: "c",
	}
	if err := clientcmd.WriteToFile(admin, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(src, dst, "openmed-system", "openmed-operator"); err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.LoadFromFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Contexts) != 1 || got.Clusters["c"] == nil || got.Clusters["c"].Server != "https://127.0.0.1:6443" {
		t.Fatalf("want only the current context, got %+v", got.Contexts)
	}
	auth := got.AuthInfos["admin"]
	if auth == nil || auth.Impersonate != "system:serviceaccount:openmed-system:openmed-operator" || auth.Token != "t" {
		t.Fatalf("auth = %+v", auth)
	}
	if want := []string{"system:serviceaccounts", "system:serviceaccounts:openmed-system"}; strings.Join(auth.ImpersonateGroups, ",") != strings.Join(want, ",") {
		t.Errorf("groups = %v, want %v", auth.ImpersonateGroups, want)
	}
}

func TestManifestHashOfSelectsVersion(t *testing.T) {
	m, err := localrun.ReadModel(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil {
		t.Fatal(err)
	}
	a, err := localrun.ManifestHashOf(m, "OpenMed/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := localrun.ManifestHashOf(m, "OpenMed/b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("hashes %s and %s", a, b)
	}
	if _, err := localrun.ManifestHashOf(m, "/not a version"); err == nil {
		t.Error("an invalid version gave a hash")
	}
}
