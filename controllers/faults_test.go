package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// denyPointer installs a ValidatingAdmissionPolicy that rejects every write
// of a Deployment in ns whose pod template carries manifestHash, and waits
// until the API server enforces it. It returns a function that removes the
// binding.
func denyPointer(t *testing.T, ns, deployment, manifestHash string) func() {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-deny"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf(`!has(object.spec.template.metadata.annotations) || !('%s' in object.spec.template.metadata.annotations) || object.spec.template.metadata.annotations['%s'] != '%s'`,
					v1alpha1.ManifestHashAnnotation, v1alpha1.ManifestHashAnnotation, manifestHash),
				Message: "this model version is not allowed here",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-deny"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The admission plugin picks the binding up asynchronously: probe with a
	// dry-run write until it is denied.
	probe := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"%s":"%s"}}}}}`, v1alpha1.ManifestHashAnnotation, manifestHash)
	eventually(t, "the admission policy is enforced", func() (bool, string) {
		d := getDeployment(t, ns, deployment)
		err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(probe)), client.DryRunAll)
		return err != nil, fmt.Sprint(err)
	})
	return func() {
		if err := env.Client.Delete(ctx, binding); err != nil {
			t.Fatal(err)
		}
	}
}

func manifestHashOf(t *testing.T, m *v1alpha1.OpenMedModel, version string) string {
	t.Helper()
	m = m.DeepCopy()
	m.Spec.Version = version
	n, err := rollout.Normalize(m)
	if err != nil {
		t.Fatal(err)
	}
	return rollout.ManifestHash(n)
}

// TestApplyRejectedIsReportedAndRecovers: an admission policy rejects the
// pointer of one version. The pass reports it at once (Ready=False and
// Stalled=True with ApplyRejected, one Warning event, the error metric),
// keeps retrying with the capped backoff, and rolls out by itself once the
// policy is gone.
func TestApplyRejectedIsReportedAndRecovers(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	remove := denyPointer(t, ns, "svc", manifestHashOf(t, getModel(t, ns, "svc"), "OpenMed/pii-v2"))

	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.ApplyRejectedReason)
	if s := condition(m, v1alpha1.StalledCondition); s == nil || s.Reason != v1alpha1.ApplyRejectedReason {
		t.Errorf("Stalled = %+v", s)
	}
	// What the API server said is what a person has to fix: the policy's
	// denial is in the message.
	for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.StalledCondition} {
		if msg := condition(m, typ).Message; !strings.Contains(msg, "denied request: this model version is not allowed here") {
			t.Errorf("%s does not say why the API server rejected the apply: %q", typ, msg)
		}
	}
	if got := kstatusOf(t, m); got != "Failed" {
		t.Errorf("kstatus %s, want Failed", got)
	}
	time.Sleep(3 * time.Second) // several retries
	if n := countReason(t, ns, "svc", v1alpha1.ApplyRejectedReason); n != 1 {
		t.Errorf("%d ApplyRejected events, want 1", n)
	}
	if n := op.metric(t, controllers.MetricReconcileErrors, map[string]string{"reason": v1alpha1.ApplyRejectedReason}); n < 2 {
		t.Errorf("%s{reason=ApplyRejected} = %v, want the retries counted", controllers.MetricReconcileErrors, n)
	}

	remove()
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	if m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason); m.Status.ActiveVersion != "OpenMed/pii-v2" {
		t.Fatalf("active %s", m.Status.ActiveVersion)
	}
}

// TestLostStatusWriteAfterApply: the status write that follows a
// successful apply of a new version is lost. The next pass must not report
// the version Ready before the Deployment has rolled it out.
func TestLostStatusWriteAfterApply(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	drop := &fault{status: http.StatusServiceUnavailable, times: 1, match: func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/openmedmodels/svc/status") && strings.Contains(body, "pii-v2")
	}}
	op.writes.inject(drop)
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	eventually(t, "the status write was dropped", func() (bool, string) { return drop.hits.Load() == 1, "" })

	// Until the Deployment controller reports the new template rolled out,
	// no pass may say v2 is Ready.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		m := getModel(t, ns, "svc")
		if m.Status.ActiveVersion == "OpenMed/pii-v2" || (m.Status.DesiredVersion == "OpenMed/pii-v2" && m.Status.Phase == v1alpha1.PhaseReady) {
			t.Fatalf("v2 reported Ready before it rolled out: %s %v", m.Status.Phase, m.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	if m := waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason); m.Status.ActiveVersion != "OpenMed/pii-v2" {
		t.Fatalf("active %s", m.Status.ActiveVersion)
	}
}

// TestOneStatusRequestPerPass: each pass that changes the status writes it
// in one request carrying the conditions and every other field together.
func TestOneStatusRequestPerPass(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	writes := op.writes.requests(http.MethodPatch, "/namespaces/"+ns+"/openmedmodels/svc/status")
	if len(writes) != 3 {
		t.Fatalf("%d status requests for a first rollout, want 3 (the target recorded, RollingOut, Ready): %q", len(writes), writes)
	}
	// The first is the write-ahead record of the target, before any write
	// to it; it carries nothing else.
	if want := `"status":{"claimedTargets":["svc"]}}`; !strings.HasSuffix(writes[0], want) {
		t.Errorf("the first status request is not the record of the target: %s", writes[0])
	}
	for i, body := range writes[1:] {
		for _, field := range []string{`"conditions"`, `"phase"`, `"observedGeneration"`, `"resourceVersion"`} {
			if !strings.Contains(body, field) {
				t.Errorf("status request %d lacks %s: %s", i, field, body)
			}
		}
	}
}

// TestBackoffRecoversWithinCap: every write to the target fails for a
// minute. The model reports the failure, retries with a backoff capped at
// controllers.RetryMaxDelay, acts on a spec change at once although it is
// backed off, and rolls out within the cap once the API server answers
// again.
func TestBackoffRecoversWithinCap(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	outage := &fault{status: http.StatusServiceUnavailable, times: -1, match: func(method, path, _ string) bool {
		return method == http.MethodPatch && strings.Contains(path, "/namespaces/"+ns+"/deployments/")
	}}
	clear := op.writes.inject(outage)
	createDeployment(t, chartDeployment(ns, "svc", 2))
	createModel(t, newModel(ns, "svc", "OpenMed/pii-v1"))
	// A transient failure leaves the generation unobserved: kstatus waits.
	eventually(t, "ApplyFailed reported", func() (bool, string) {
		m := getModel(t, ns, "svc")
		c := condition(m, v1alpha1.ReconcilingCondition)
		return c != nil && c.Reason == v1alpha1.ApplyFailedReason && m.Status.ObservedGeneration != m.Generation, fmt.Sprint(m.Status.Conditions)
	})

	time.Sleep(40 * time.Second)
	// Backed off at the cap by now: a spec change is still tried at once.
	before := outage.hits.Load()
	changed := time.Now()
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	eventually(t, "a pass for the new spec", func() (bool, string) { return outage.hits.Load() > before, "" })
	t.Logf("a pass for the spec change %v after it, %d failed writes before", time.Since(changed).Round(time.Millisecond), before)
	if d := time.Since(changed); d > controllers.RetryMaxDelay/2 {
		t.Errorf("the spec change waited %v for a pass, the backoff cap is %v", d, controllers.RetryMaxDelay)
	}
	time.Sleep(20 * time.Second)

	clear()
	recovered := time.Now()
	eventually(t, "rollout after the outage", func() (bool, string) {
		m := getModel(t, ns, "svc")
		return m.Status.Phase == v1alpha1.PhaseRollingOut, string(m.Status.Phase)
	})
	t.Logf("rolled out %v after the outage ended", time.Since(recovered).Round(time.Millisecond))
	if d := time.Since(recovered); d > controllers.RetryMaxDelay+5*time.Second {
		t.Errorf("recovered after %v, the backoff cap is %v", d, controllers.RetryMaxDelay)
	}
	if p := preload(getDeployment(t, ns, "svc")); p == nil || !strings.Contains(p.ValueFrom.ConfigMapKeyRef.Name, "svc-model-manifest-") {
		t.Fatalf("pointer after recovery: %+v", p)
	}
	if cm := pointerConfigMap(t, getDeployment(t, ns, "svc")); cm.Data[v1alpha1.PreloadEnvVar] != "OpenMed/pii-v2" {
		t.Fatalf("the rollout after the outage points at %s", cm.Data[v1alpha1.PreloadEnvVar])
	}
}

// TestEventsSurviveTransientRejections: the API server answers the first
// event writes with 503; the event is retried and written.
func TestEventsSurviveTransientRejections(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	busy := &fault{status: http.StatusServiceUnavailable, times: 2, match: func(method, path, _ string) bool {
		return method == http.MethodPost && strings.HasSuffix(path, "/namespaces/"+ns+"/events")
	}}
	op.writes.inject(busy)
	readyModel(t, ns, "svc")
	eventually(t, "RolloutStarted written after two rejections", func() (bool, string) {
		return countReason(t, ns, "svc", v1alpha1.RolloutStartedReason) == 1, fmt.Sprint(eventReasons(t, ns, "svc"))
	})
	if busy.hits.Load() != 2 {
		t.Errorf("%d rejections injected, want 2", busy.hits.Load())
	}
	if n := op.metric(t, controllers.MetricEventsDropped, nil); n != 0 {
		t.Errorf("%v events dropped", n)
	}
}

func countReason(t *testing.T, ns, name, reason string) int {
	n := 0
	for _, r := range eventReasons(t, ns, name) {
		if r == reason {
			n++
		}
	}
	return n
}
