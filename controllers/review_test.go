package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

// The findings of the line-by-line review of the pass whose cause is the
// API server (issue "Scaling is not failing", items 2 to 4); the pure ones
// are in pkg/rollout (TestReviewFindings). Each failed before its fix.

// TestRejectedApplySaysWhatToFix: a chart with minReadySeconds 12 and a
// model with progressDeadlineSeconds 8. The API server rejects the pointer
// and says which field and why; the status and the event say the same.
func TestRejectedApplySaysWhatToFix(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t)
	d := chartDeployment(ns, "svc", 2)
	d.Spec.MinReadySeconds = 12
	createDeployment(t, d)
	m := newModel(ns, "svc", "OpenMed/pii-v1")
	m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](8)
	createModel(t, m)
	got := waitFor(t, ns, "svc", v1alpha1.PhasePending, v1alpha1.ApplyRejectedReason)
	const cause = "spec.progressDeadlineSeconds: Invalid value: 8: must be greater than minReadySeconds"
	for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.StalledCondition} {
		if c := condition(got, typ); c == nil || !strings.Contains(c.Message, cause) {
			t.Errorf("%s does not say what to fix: %+v", typ, c)
		}
	}
	if got := kstatusOf(t, got); got != "Failed" {
		t.Errorf("kstatus %s, want Failed", got)
	}
	eventually(t, "the event says what to fix", func() (bool, string) {
		msgs := eventMessages(t, ns, "svc", v1alpha1.ApplyRejectedReason)
		return len(msgs) == 1 && strings.Contains(msgs[0], cause), fmt.Sprint(msgs)
	})
}

// TestHPAAgainstReplicasIsAnOwnershipConflict: a model with replicas 2 and
// an HPA writing the scale subresource as kube-controller-manager. Every
// correction names the HPA's manager and is counted in the status before
// the HPA writes again; the first two are drift, the third is an ownership
// conflict with the fix for an HPA, one event and the metric.
func TestHPAAgainstReplicasIsAnOwnershipConflict(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	readyModel(t, ns, "svc")
	const manager = "kube-controller-manager"
	for i := 1; i <= rollout.ConflictThreshold; i++ {
		if err := scale(ns, "svc", manager, 4); err != nil {
			t.Fatal(err)
		}
		var m *v1alpha1.OpenMedModel
		eventually(t, fmt.Sprintf("correction %d counted", i), func() (bool, string) {
			m = getModel(t, ns, "svc")
			n := int32(0)
			for _, c := range m.Status.Corrections {
				if c.Field == "spec.replicas" && c.Manager == manager {
					n = c.Count
				}
			}
			return n == int32(i) && ptr.Deref(getDeployment(t, ns, "svc").Spec.Replicas, 0) == 2, fmt.Sprintf("corrections %+v", m.Status.Corrections)
		})
		if c := condition(m, v1alpha1.OwnershipConflictCondition); i < rollout.ConflictThreshold && c != nil && c.Status == "True" {
			t.Errorf("an ownership conflict after %d corrections: %+v", i, c)
		}
	}
	msgs := recordedEvents(t, ns, "svc", v1alpha1.DriftCorrectedReason, rollout.ConflictThreshold)
	if len(msgs) != rollout.ConflictThreshold {
		t.Errorf("%d DriftCorrected events, want %d: %v", len(msgs), rollout.ConflictThreshold, msgs)
	}
	for _, msg := range msgs {
		if !strings.Contains(msg, `spec.replicas changed by "`+manager+`"`) {
			t.Errorf("a correction does not name the HPA's manager: %s", msg)
		}
	}
	m := getModel(t, ns, "svc")
	want := rollout.ConflictMessage("spec.replicas", manager)
	if !strings.Contains(want, "HorizontalPodAutoscaler owns the replicas: leave spec.replicas out of the OpenMedModel") {
		t.Fatalf("the conflict text does not give the fix for an HPA: %s", want)
	}
	c := condition(m, v1alpha1.OwnershipConflictCondition)
	if c == nil || c.Status != "True" || !strings.Contains(c.Message, want) {
		t.Fatalf("OwnershipConflict = %+v, want a message with %q", c, want)
	}
	if s := condition(m, v1alpha1.StalledCondition); s == nil || s.Reason != v1alpha1.OwnershipConflictReason {
		t.Errorf("Stalled = %+v; conditions %+v", s, m.Status.Conditions)
	}
	eventually(t, "the OwnershipConflict event", func() (bool, string) {
		return countReason(t, ns, "svc", v1alpha1.OwnershipConflictReason) >= 1, fmt.Sprint(eventReasons(t, ns, "svc"))
	})
	// One event, not one a pass: a pass that comes later (the model woken
	// by the status write, a resync) adds none.
	annotate(t, ns, "svc", "reconcile.fluxcd.io/requestedAt", "after-the-conflict")
	eventually(t, "the requested pass handled", func() (bool, string) {
		m := getModel(t, ns, "svc")
		return m.Status.LastHandledReconcileAt == "after-the-conflict", m.Status.LastHandledReconcileAt
	})
	if n := countReason(t, ns, "svc", v1alpha1.OwnershipConflictReason); n != 1 {
		t.Errorf("%d OwnershipConflict events, want 1: %v", n, eventMessages(t, ns, "svc", v1alpha1.OwnershipConflictReason))
	}
	for _, msg := range eventMessages(t, ns, "svc", v1alpha1.OwnershipConflictReason) {
		if !strings.Contains(msg, want) {
			t.Errorf("the OwnershipConflict event does not say the fix: %s", msg)
		}
	}
	if n := op.metric(t, controllers.MetricOwnershipConflicts, map[string]string{"manager": manager, "field": "spec.replicas"}); n != 1 {
		t.Errorf("%s = %v, want 1", controllers.MetricOwnershipConflicts, n)
	}
}

// TestForeignWriteBeforeTheApplyIsNotDrift: another writer's update lands
// between the version the pass read and the operator's unconditional
// apply, and the cache brings the two events half a second apart. The pass
// after the apply must wait for the cache to show it: the foreign version
// is older than the apply by generation, whatever its resourceVersion. A
// pass on it would see the pointer missing and call it drift.
func TestForeignWriteBeforeTheApplyIsNotDrift(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t)
	readyModel(t, ns, "svc")
	v2 := changeBehindAForeignWrite(t, op, ns, "OpenMed/pii-v2")
	// The rollout's completion comes after the foreign write and the apply
	// in the watch stream: once the model is Ready, the cache has brought
	// both, and every pass on the foreign version has run.
	updateDeploymentStatus(t, ns, "svc", rolloutComplete)
	waitFor(t, ns, "svc", v1alpha1.PhaseReady, v1alpha1.RolloutSucceededReason)
	op.writes.watchDelay.Store(0)
	if msgs := eventMessages(t, ns, "svc", v1alpha1.DriftCorrectedReason); len(msgs) != 0 {
		t.Errorf("the operator's own apply, not yet in the cache, was called drift: %v", msgs)
	}
	if n := applies(op, ns, "svc", v2); n != 1 {
		t.Errorf("%d applies of the v2 pointer, want 1", n)
	}
}

// TestQuickRevertOnALaggingCacheIsNotReady: A -> B -> A. The model at v1
// is changed to v2; a status-only write of the Deployment (its controller's
// kind) lands between the version the pass read and the v2 apply, and the
// cache brings the two events 700 ms apart; the model is reverted to v1
// right after the apply. A pass on the foreign version sees the v1 pointer
// and would call the revert Ready while the Deployment carries v2 (the
// cache-lag record knew only the version the apply moved on from): the
// generation of the apply's answer is the watermark, and the pass waits for
// the cache to show the apply. When the revert also wins the race for the
// model, the pass that applied v2 cannot record it (409): the next pass
// finds the operator's own v2 values on the Deployment, which are a change
// of spec, not another manager's drift. Either way v1 rolls out again once,
// and the revert is Ready only once the Deployment reports that rollout.
func TestQuickRevertOnALaggingCacheIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		name        string
		revertFirst bool
	}{{"the v2 status recorded first", false}, {"the revert wins the race for the model", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			op := startOperator(t)
			readyModel(t, ns, "svc")
			v1 := manifestHashOf(t, getModel(t, ns, "svc"), "OpenMed/pii-v1")
			statuses := watchStatuses(t, ns, "svc")
			reverted := make(chan error, 1)
			if tc.revertFirst {
				op.writes.inject(&fault{times: 1, before: func() { reverted <- setModelVersion(ns, "svc", "OpenMed/pii-v1") },
					match: func(method, path, body string) bool {
						return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/openmedmodels/svc/status")
					}})
			}
			changeBehindAForeignWrite(t, op, ns, "OpenMed/pii-v2")
			appliesBefore := applies(op, ns, "svc", v1)
			if !tc.revertFirst {
				waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
				reverted <- setModelVersion(ns, "svc", "OpenMed/pii-v1")
			}
			if err := <-reverted; err != nil {
				t.Fatal(err)
			}
			revert := getModel(t, ns, "svc").Generation
			eventually(t, "v1 applied again over v2", func() (bool, string) {
				h := templateHash(getDeployment(t, ns, "svc"))
				return h == v1, h
			})
			op.writes.watchDelay.Store(0)
			if tc.revertFirst && op.writes.answered(http.MethodPatch, "/namespaces/"+ns+"/openmedmodels/svc/status", http.StatusConflict) == 0 {
				t.Errorf("the v2 pass's status write was not answered 409: the race was not exercised")
			}
			// The Deployment controller has not reported the v1 rollout
			// yet: no status of the revert may say Ready.
			for _, st := range statuses() {
				if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition); st.ObservedGeneration == revert && c != nil && c.Status == "True" {
					t.Errorf("the revert read Ready before the Deployment carried v1 again: %s %s/%s", st.Phase, c.Reason, c.Message)
				}
			}
			updateDeploymentStatus(t, ns, "svc", rolloutComplete)
			waitFor(t, ns, "svc", v1alpha1.PhaseReady)
			if n := applies(op, ns, "svc", v1) - appliesBefore; n != 1 {
				t.Errorf("%d applies of the v1 pointer after the revert, want 1", n)
			}
			if msgs := eventMessages(t, ns, "svc", v1alpha1.DriftCorrectedReason); len(msgs) != 0 {
				t.Errorf("the operator's own apply was called drift: %v", msgs)
			}
		})
	}
}

// setModelVersion sets the version of the model name in ns, as a commit
// would (a merge patch, without t: fault hooks run on the operator's
// goroutines).
func setModelVersion(ns, name, version string) error {
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return env.Client.Patch(context.Background(), m, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"version":"`+version+`"}}`)))
}

// TestFirstPassOnALaggingCacheIsNotAFailure: the Deployment created with
// the model changes (its controller writes its status) between the version
// the model's first pass read and the claim, which is conditional on that
// version, so the API server answers 409. Somebody else writing first is not
// a failure: no ApplyFailed in any status, event or metric; the pass decides
// again once the cache shows the newer version, and claims the Deployment.
func TestFirstPassOnALaggingCacheIsNotAFailure(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	createDeployment(t, chartDeployment(ns, "svc", 2))
	foreign := make(chan error, 1)
	claim := &fault{times: 1, before: func() {
		foreign <- setStatus(ns, "svc", func(d *appsv1.Deployment) {
			d.Status.ObservedGeneration, d.Status.Replicas = d.Generation, 2
		})
	}, match: func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/deployments/svc")
	}}
	op.writes.inject(claim)
	statuses := watchStatuses(t, ns, "svc")
	createModel(t, newModel(ns, "svc", "OpenMed/pii-v1"))
	if err := <-foreign; err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	if n := op.writes.answered(http.MethodPatch, "/namespaces/"+ns+"/deployments/svc", http.StatusConflict); n != 1 {
		t.Fatalf("the API server answered %d claims with 409, want 1", n)
	}
	if owner := getDeployment(t, ns, "svc").Annotations[v1alpha1.ModelResourceAnnotation]; owner != ns+"/svc" {
		t.Errorf("owner annotation %q after the second claim", owner)
	}
	op.stop() // drains the events the passes queued
	for _, st := range statuses() {
		for _, c := range st.Conditions {
			if c.Reason == v1alpha1.ApplyFailedReason {
				t.Errorf("a status says %s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
	}
	if n := countReason(t, ns, "svc", v1alpha1.ApplyFailedReason); n != 0 {
		t.Errorf("%d ApplyFailed events", n)
	}
	// The operator of this test watches its namespace only: every count
	// is this model's (under load another test's model may fail an apply).
	if n := op.metric(t, controllers.MetricReconcileErrors, map[string]string{"reason": v1alpha1.ApplyFailedReason}); n != 0 {
		t.Errorf("%s{reason=ApplyFailed} = %v, want 0", controllers.MetricReconcileErrors, n)
	}
}

// changeBehindAForeignWrite changes the model svc of ns to version, and
// lets a status-only write of its Deployment (the Deployment controller's
// kind: the generation stays) land between the version the pass read and
// its unconditional apply; from then on the operator's cache receives the
// Deployment's events 700 ms apart. It returns once the apply has landed,
// with the version's manifest hash.
func changeBehindAForeignWrite(t *testing.T, op *operator, ns, version string) string {
	t.Helper()
	hash := manifestHashOf(t, getModel(t, ns, "svc"), version)
	foreign := make(chan error, 1)
	op.writes.inject(&fault{times: 1, before: func() {
		op.writes.watchDelay.Store(int64(700 * time.Millisecond))
		foreign <- setStatus(ns, "svc", func(d *appsv1.Deployment) { d.Status.CollisionCount = ptr.To[int32](1) })
	}, match: func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/deployments/svc") && strings.Contains(body, hash)
	}})
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = version })
	if err := <-foreign; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the apply of "+version+" landed", func() (bool, string) {
		h := templateHash(getDeployment(t, ns, "svc"))
		return h == hash, h
	})
	return hash
}

// templateHash is the manifest hash on the Deployment's pod template.
func templateHash(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
}

// applies counts the operator's writes to the Deployment that carry hash.
func applies(op *operator, ns, name, hash string) int {
	n := 0
	for _, body := range op.writes.requests(http.MethodPatch, "/namespaces/"+ns+"/deployments/"+name) {
		if strings.Contains(body, hash) {
			n++
		}
	}
	return n
}

// watchStatuses keeps every status of the model the API server stores
// from now on (the model need not exist yet); the function returns them,
// oldest first.
func watchStatuses(t *testing.T, ns, name string) func() []v1alpha1.OpenMedModelStatus {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &v1alpha1.OpenMedModelList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []v1alpha1.OpenMedModelStatus
	versions := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if m, ok := ev.Object.(*v1alpha1.OpenMedModel); ok && m.Name == name {
				mu.Lock()
				seen = append(seen, m.Status)
				versions[m.ResourceVersion] = true
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []v1alpha1.OpenMedModelStatus {
		t.Helper()
		// Every status stored so far has been delivered once the model's
		// current version has.
		eventually(t, "the status watch caught up", func() (bool, string) {
			rv := getModel(t, ns, name).ResourceVersion
			mu.Lock()
			defer mu.Unlock()
			return versions[rv], "resourceVersion " + rv
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]v1alpha1.OpenMedModelStatus(nil), seen...)
	}
}

// TestLostStatusAnswerStillEmitsEvents: the status write that records an
// automatic rollback takes effect, but its answer is lost. The events and
// the metric of that pass are recorded by the pass that reads the status
// it wrote.
func TestLostStatusAnswerStillEmitsEvents(t *testing.T) {
	ns := newNamespace(t)
	op := startOperatorIn(t, ns)
	readyModel(t, ns, "svc")
	lost := &fault{status: http.StatusServiceUnavailable, after: true, times: 1, match: func(method, path, body string) bool {
		return method == http.MethodPatch && strings.HasSuffix(path, "/namespaces/"+ns+"/openmedmodels/svc/status") &&
			strings.Contains(body, rollout.AutomaticRollbackPrefix)
	}}
	op.writes.inject(lost)
	patchModel(t, ns, "svc", func(m *v1alpha1.OpenMedModel) { m.Spec.Version = "OpenMed/pii-v2" })
	waitFor(t, ns, "svc", v1alpha1.PhaseRollingOut)
	updateDeploymentStatus(t, ns, "svc", rolloutStuck)
	waitFor(t, ns, "svc", v1alpha1.PhaseRolledBack)
	if lost.hits.Load() != 1 {
		t.Fatalf("the answer was lost %d times, want 1", lost.hits.Load())
	}
	eventually(t, "the rollback's events", func() (bool, string) {
		return countReason(t, ns, "svc", v1alpha1.RolloutFailedReason) == 1 && countReason(t, ns, "svc", v1alpha1.RollbackStartedReason) == 1,
			fmt.Sprint(eventReasons(t, ns, "svc"))
	})
	if n := op.metric(t, controllers.MetricRollbacks, map[string]string{"trigger": "automatic"}); n != 1 {
		t.Errorf("%s{trigger=automatic} = %v, want 1", controllers.MetricRollbacks, n)
	}
}

// setStatus writes the Deployment's status as its controller does.
func setStatus(ns, name string, mutate func(*appsv1.Deployment)) error {
	ctx := context.Background()
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return err
	}
	mutate(d)
	return env.Client.Status().Update(ctx, d)
}
