package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/e2e/internal/harness"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/localrun/modelserver"
	"github.com/openmed/openmed-operator/pkg/validation"
	"github.com/openmed/openmed-operator/pkg/webhook"
)

// forgetfulVersion is the version whose server answers /pii/extract
// without the patient's name.
const forgetfulVersion = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-forgets-names"

// goldenRequest is the spec.verification of the e2e tests: make run's
// (localrun.GoldenRequest), with a 2 s timeout and 2 attempts.
func goldenRequest() *v1alpha1.Verification {
	v := localrun.GoldenRequest()
	v.Request.TimeoutSeconds, v.Attempts = ptr.To[int32](2), ptr.To[int32](2)
	return v
}

// serveModels plays the OpenMed service on the pods of ns: each answers as
// behaviour says of its version (manifest hash), asked at every request.
func serveModels(t *testing.T, ns string, behaviour func(hash string) modelserver.Behaviour) *modelserver.Fleet {
	t.Helper()
	f, err := modelserver.Start(context.Background(), cluster.RESTConfig(), modelserver.Options{
		Namespace: ns, Selector: labels.Everything(), Port: modelserver.DefaultPort,
		Behaviour: func(p *corev1.Pod) modelserver.Behaviour {
			return behaviour(p.Annotations[v1alpha1.ManifestHashAnnotation])
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Log(err)
		}
	})
	return f
}

// verifiedModel creates the target and a model at version that declares
// the golden request (mutate changes it first) and waits until it is
// Ready.
func verifiedModel(t *testing.T, ns, version, operator string, mutate func(*v1alpha1.OpenMedModel)) {
	t.Helper()
	createTarget(t, ns, nil)
	m := newModel(t, ns, version, operator)
	m.Spec.Verification = goldenRequest()
	if mutate != nil {
		mutate(m)
	}
	if err := k8s.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitServing(t, ns, version)
}

// podTimes records, from a watch of the pods of ns, when each pod of a
// version was first seen with its containers ready and first seen Ready.
type podTimes struct {
	mu                     sync.Mutex
	containersReady, ready map[string]time.Time
	hash                   map[string]string
	stop                   func()
}

func watchPodTimes(t *testing.T, ns string) *podTimes {
	t.Helper()
	pt := &podTimes{containersReady: map[string]time.Time{}, ready: map[string]time.Time{}, hash: map[string]string{}}
	pt.stop = watchObjects(t, ns, &corev1.PodList{}, func(o k8sruntime.Object) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		pt.mu.Lock()
		defer pt.mu.Unlock()
		pt.hash[p.Name] = p.Annotations[v1alpha1.ManifestHashAnnotation]
		first := func(at map[string]time.Time) {
			if _, seen := at[p.Name]; !seen {
				at[p.Name] = now
			}
		}
		for _, c := range p.Status.Conditions {
			switch {
			case c.Status != corev1.ConditionTrue:
			case c.Type == corev1.ContainersReady:
				first(pt.containersReady)
			case c.Type == corev1.PodReady:
				first(pt.ready)
			}
		}
	})
	return pt
}

// watchObjects hands every object of list's kind in ns the API server
// reports from now on to seen, until the returned stop (or the test's
// end).
func watchObjects(t *testing.T, ns string, list client.ObjectList, seen func(k8sruntime.Object)) (stop func()) {
	t.Helper()
	w, err := k8s.Watch(context.Background(), list, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			seen(ev.Object)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// added is, for each pod of version hash that turned Ready, how long after
// its containers were ready: what the gate added.
func (pt *podTimes) added(hash string) []time.Duration {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var out []time.Duration
	for pod, r := range pt.ready {
		if c, ok := pt.containersReady[pod]; ok && pt.hash[pod] == hash {
			out = append(out, r.Sub(c))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// readyPods are the pods of version hash that were ever Ready.
func (pt *podTimes) readyPods(hash string) []string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var out []string
	for pod := range pt.ready {
		if pt.hash[pod] == hash {
			out = append(out, pod)
		}
	}
	return out
}

// TestVerification runs the golden request (spec.verification) on the
// real Deployment controller, kwok playing the kubelet (a readiness gate
// holds a pod unready until its condition is True) and a real HTTP server
// on each pod's loopback IP playing the OpenMed service.
func TestVerification(t *testing.T) {
	requireCluster(t)
	t.Parallel()

	// A version whose server omits the patient's name never serves: its
	// pod is never Ready and its ReplicaSet never has an available
	// replica, the old pod serves throughout, and the model fails on the
	// pod's verdict, not at the progress deadline, and is rolled back.
	t.Run("forgetful-version-never-available", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		bad := hashOf(t, forgetfulVersion)
		serveModels(t, ns, func(hash string) modelserver.Behaviour {
			if hash == bad {
				return modelserver.OmitName
			}
			return modelserver.Correct
		})
		verifiedModel(t, ns, v1, "", func(m *v1alpha1.OpenMedModel) {
			// The deadline cannot be what fails the version.
			m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](600)
		})
		pods := watchPodTimes(t, ns)
		var minAvailable atomic.Int32
		minAvailable.Store(1 << 20)
		stop := watchDeployments(t, ns, func(d *appsv1.Deployment) {
			if d.Status.AvailableReplicas < minAvailable.Load() {
				minAvailable.Store(d.Status.AvailableReplicas)
			}
		})
		badAvailable := watchReplicaSetAvailability(t, ns, bad)
		applied := time.Now()
		setVersion(t, ns, forgetfulVersion)
		s := waitState(t, ns, "rolled back to "+v1, func(s state) bool {
			// A pod of the forgetful version that turned Ready ends the
			// wait: the assertions below name it.
			return len(pods.readyPods(bad)) > 0 ||
				s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v1 && settled(s.d)
		})
		failedAfter := time.Since(applied)
		stop()
		pods.stop()

		d := apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.DegradedCondition)
		if d == nil || d.Status != metav1.ConditionTrue || d.Reason != v1alpha1.VerificationFailedReason ||
			!strings.Contains(d.Message, `e.text == "John Smith"`) || !strings.Contains(d.Message, "pod ") {
			t.Errorf("Degraded %+v: want VerificationFailed naming the pod and the missing entity", d)
		}
		if n := badAvailable(); n != 0 {
			t.Errorf("a ReplicaSet of the forgetful version had %d available replicas", n)
		}
		if got := pods.readyPods(bad); len(got) != 0 {
			t.Errorf("pods of the forgetful version were Ready: %v", got)
		}
		if n := minAvailable.Load(); n < 1 {
			t.Errorf("the Deployment had %d available replicas during the rollout: the old pod must serve throughout", n)
		}
		if c := progressing(s.d); c != nil && c.Reason == "ProgressDeadlineExceeded" {
			t.Errorf("the Deployment's progress deadline passed: %+v", c)
		}
		msgs := eventMessages(t, ns, v1alpha1.RolloutFailedReason)
		if len(msgs) != 1 || !strings.Contains(msgs[0], "John Smith") {
			t.Errorf("RolloutFailed events %q", msgs)
		}
		t.Logf("the forgetful version failed and was rolled back %s after its apply (attempts 2 × timeout 2 s)", failedAfter.Round(100*time.Millisecond))
	})

	// A correct version rolls out, each new pod held only until it
	// answered: the time that adds per pod is stated.
	t.Run("correct-version-ready", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		fleet := serveModels(t, ns, func(string) modelserver.Behaviour { return modelserver.Correct })
		verifiedModel(t, ns, v1, "", func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptr.To[int32](3) })
		pods := watchPodTimes(t, ns)
		setVersion(t, ns, v2)
		s := waitServing(t, ns, v2)
		pods.stop()
		added := pods.added(hashOf(t, v2))
		if len(added) != 3 {
			t.Fatalf("%d pods of %s turned Ready, want 3", len(added), v2)
		}
		var list corev1.PodList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.Annotations[v1alpha1.ManifestHashAnnotation] != hashOf(t, v2) || p.DeletionTimestamp != nil {
				continue
			}
			var verified *corev1.PodCondition
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == v1alpha1.VerifiedCondition {
					verified = &p.Status.Conditions[i]
				}
			}
			if verified == nil || verified.Status != corev1.ConditionTrue || verified.Reason != v1alpha1.PodVerifiedReason {
				t.Errorf("pod %s: verified condition %+v", p.Name, verified)
			}
			if reqs := fleet.Requests(p.Name); len(reqs) == 0 || reqs[0].Path != "/pii/extract" || reqs[0].Method != "POST" {
				t.Errorf("pod %s got requests %+v", p.Name, reqs)
			}
		}
		if !slices.Equal(gatesOf(s.d), []string{v1alpha1.VerifiedCondition}) {
			t.Errorf("template gates %v", gatesOf(s.d))
		}
		t.Logf("verification added per pod (containers ready → Ready): median %s, all %v", added[len(added)/2].Round(time.Millisecond), added)
	})

	// A wrong answer that starts during the bake fails the bake.
	t.Run("wrong-answer-during-bake", func(t *testing.T) {
		t.Parallel()
		ns := newNamespace(t)
		var wrong atomic.Bool
		v2Hash := hashOf(t, v2)
		serveModels(t, ns, func(hash string) modelserver.Behaviour {
			if hash == v2Hash && wrong.Load() {
				return modelserver.ServerError
			}
			return modelserver.Correct
		})
		verifiedModel(t, ns, v1, "", nil)
		// v2 bakes, and its pods are asked again every 5 s while it does.
		patch := fmt.Sprintf(`{"spec":{"version":%q,"rolloutStrategy":{"bakeSeconds":120},"verification":{"intervalSeconds":5}}}`, v2)
		if err := k8s.Patch(context.Background(), &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName}},
			client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
		waitState(t, ns, "baking "+v2, func(s state) bool {
			return apimeta.IsStatusConditionPresentAndEqual(s.m.Status.Conditions, v1alpha1.ReadyCondition, metav1.ConditionFalse) &&
				apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.ReadyCondition).Reason == v1alpha1.BakingReason
		})
		wrong.Store(true)
		s := waitState(t, ns, "rolled back to "+v1, func(s state) bool {
			return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRolledBack && s.m.Status.ActiveVersion == v1
		})
		if d := apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.DegradedCondition); d == nil || d.Reason != v1alpha1.VerificationFailedReason ||
			!strings.Contains(d.Message, "500") {
			t.Errorf("Degraded %+v, want VerificationFailed naming the 500", d)
		}
	})

	// A header whose value is a Secret's: read as the model's
	// ServiceAccount (the tenant Role of examples/tenancy grants it that
	// Secret only) when the request is sent; the verdict is written as that
	// ServiceAccount too; the value is in no status and no event.
	t.Run("secret-header-as-the-service-account", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := tenantNamespace(t)
		const token = "Bearer synthetic-verification-token-4f1c"
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "openmed-verification-token"},
			StringData: map[string]string{"authorization": token}}
		if err := k8s.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		fleet := serveModels(t, ns, func(string) modelserver.Behaviour { return modelserver.Correct })
		verifiedModel(t, ns, v1, "", func(m *v1alpha1.OpenMedModel) {
			m.Spec.ServiceAccountName = harness.TenantServiceAccount
			m.Spec.Verification.Request.Headers = []v1alpha1.VerificationHeader{{Name: "Authorization",
				ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: v1alpha1.SecretKeySelector{Name: secret.Name, Key: "authorization"}}}}
		})
		var list corev1.PodList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		asked := 0
		for _, p := range list.Items {
			for _, r := range fleet.Requests(p.Name) {
				asked++
				if got := r.Header.Get("Authorization"); got != token {
					t.Errorf("pod %s got Authorization %q, want the Secret's value", p.Name, got)
				}
			}
			for _, f := range p.ManagedFields {
				if f.Subresource == "status" && strings.Contains(string(f.FieldsV1.Raw), v1alpha1.VerifiedCondition) &&
					f.Manager != "openmed-operator" {
					t.Errorf("the verdict of pod %s was written by %q", p.Name, f.Manager)
				}
			}
		}
		if asked == 0 {
			t.Fatal("no pod was asked")
		}
		m := read(t, ns).m
		raw, err := json.Marshal(m.Status)
		if err != nil {
			t.Fatal(err)
		}
		var events corev1.EventList
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			raw = append(raw, e.Message...)
		}
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				raw = append(raw, c.Message...)
			}
		}
		if strings.Contains(string(raw), "synthetic-verification-token") {
			t.Error("the Secret's value is in the status, an event or a pod condition")
		}
	})

	// A ServiceAccount that may not read the Secret: the pod fails, the
	// verdict naming the refusal, never the value.
	t.Run("secret-header-forbidden", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := tenantNamespace(t)
		serveModels(t, ns, func(string) modelserver.Behaviour { return modelserver.Correct })
		createTarget(t, ns, nil)
		m := newModel(t, ns, v1, "")
		m.Spec.ServiceAccountName = harness.TenantServiceAccount
		m.Spec.Verification = goldenRequest()
		m.Spec.Verification.Attempts = ptr.To[int32](1)
		m.Spec.Verification.Request.Headers = []v1alpha1.VerificationHeader{{Name: "Authorization",
			ValueFrom: &v1alpha1.HeaderValueSource{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "another-teams-secret", Key: "authorization"}}}}
		if err := k8s.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		s := waitState(t, ns, "failed on the Secret", func(s state) bool {
			return apimeta.IsStatusConditionTrue(s.m.Status.Conditions, v1alpha1.DegradedCondition)
		})
		if d := apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.DegradedCondition); d.Reason != v1alpha1.VerificationFailedReason ||
			!strings.Contains(d.Message, "read Secret another-teams-secret as ServiceAccount "+harness.TenantServiceAccount+": Forbidden") {
			t.Errorf("Degraded %+v, want the refused read named", d)
		}
	})

	// A ServiceAccount without patch on pods/status: the verdict cannot
	// be written, the pod stays unready, and the model's Warning event
	// says so.
	t.Run("verdict-write-denied", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := newNamespace(t)
		harness.ApplyImpersonatorBinding(t, k8s, ns)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-status"}}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-status"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete", "patch"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-status"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "no-status"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "no-status", Namespace: ns}}}
		for _, o := range []client.Object{sa, role, binding} {
			if err := k8s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		serveModels(t, ns, func(string) modelserver.Behaviour { return modelserver.Correct })
		createTarget(t, ns, nil)
		m := newModel(t, ns, v1, "")
		m.Spec.ServiceAccountName = "no-status"
		m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](600)
		m.Spec.Verification = goldenRequest()
		if err := k8s.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		msgs := recordedEvents(t, ns, v1alpha1.VerdictWriteFailedReason, 1)
		if !strings.Contains(msgs[0], "as ServiceAccount no-status: Forbidden") || !strings.Contains(msgs[0], "pod openmed-service-") {
			t.Errorf("VerdictWriteFailed event %q", msgs[0])
		}
		if s := read(t, ns); s.m.Status.Phase == v1alpha1.PhaseReady {
			t.Errorf("Ready without a verdict: %s", s)
		}
	})

	// An operator killed while a pod waits for its answer: the next
	// process asks again and the version rolls out, with no extra roll.
	t.Run("operator-killed-mid-verification", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := newNamespace(t)
		var hang atomic.Bool
		hang.Store(true)
		v2Hash := hashOf(t, v2)
		fleet := serveModels(t, ns, func(hash string) modelserver.Behaviour {
			if hash == v2Hash && hang.Load() {
				return modelserver.Hang
			}
			return modelserver.Correct
		})
		op, err := launchOperator(ctx, "verify-1", operatorLabel+"=verify")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op.Kill() })
		verifiedModel(t, ns, v1, "verify", func(m *v1alpha1.OpenMedModel) {
			m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To[int32](600)
			m.Spec.Verification.Request.TimeoutSeconds = ptr.To[int32](30)
		})
		setVersion(t, ns, v2)
		var asked string
		eventually(t, "a request to a pod of "+v2, func() (bool, string) {
			for pod := range fleet.Serving() {
				if len(fleet.Requests(pod)) > 0 && podHash(t, ns, pod) == v2Hash {
					asked = pod
					return true, ""
				}
			}
			return false, "no request yet"
		})
		before := read(t, ns)
		replicaSets := len(podHashes(t, ns))
		if err := op.Kill(); err != nil {
			t.Fatal(err)
		}
		hang.Store(false)
		op2, err := launchOperator(ctx, "verify-2", operatorLabel+"=verify")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = op2.Kill() })
		s := waitServing(t, ns, v2)
		if s.d.Generation != before.d.Generation {
			t.Errorf("Deployment generation %d -> %d: the new process rolled the pods again", before.d.Generation, s.d.Generation)
		}
		if got := len(podHashes(t, ns)); got > replicaSets {
			t.Errorf("%d pod templates after the restart, %d before", got, replicaSets)
		}
		if n := len(fleet.Requests(asked)); n < 2 {
			t.Errorf("pod %s was asked %d times: the new process must ask it again", asked, n)
		}
	})

	// A success condition that does not compile is refused at apply time
	// by the API server, through the bundle's ValidatingWebhookConfiguration
	// served by the shared operator, with CEL's complaint (kubectl apply
	// --server-side, create and update); nothing is stored.
	t.Run("invalid-expression-refused", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		ns := newNamespace(t)
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := k8s.Get(ctx, client.ObjectKey{Name: webhook.ConfigurationName}, &vwc); err != nil {
			t.Fatal(err)
		}
		if u := vwc.Webhooks[0].ClientConfig.URL; u == nil || *u != shared.WebhookURL()+webhook.Path {
			t.Fatalf("the bundle's webhook calls %v, want the shared operator at %s", u, shared.WebhookURL())
		}
		apply := func(m *v1alpha1.OpenMedModel) error {
			obj, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(m)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: obj}
			u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
			unstructured.RemoveNestedField(u.Object, "status")
			unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
			return k8s.Patch(ctx, u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership)
		}
		refused := func(err error, m *v1alpha1.OpenMedModel) {
			t.Helper()
			d := m.DeepCopy()
			d.Default()
			want := validation.ValidateOpenMedModel(d)
			if len(want) != 1 || want[0].Field != "spec.verification.successCondition" {
				t.Fatalf("the Go validator's verdict is %v, want one complaint about the success condition", want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `admission webhook "`+webhook.Name+`" denied the request`) ||
				!strings.Contains(err.Error(), want[0].Error()) {
				t.Fatalf("err = %v, want the webhook's Invalid refusal with %q", err, want[0].Error())
			}
		}

		bad := newModel(t, ns, v1, "")
		bad.Spec.Verification = goldenRequest()
		bad.Spec.Verification.SuccessCondition = `response.json.entities.exists(e, e.label == NAME)`
		refused(apply(bad), bad)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(bad), &v1alpha1.OpenMedModel{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the refused model was stored: %v", err)
		}

		good := newModel(t, ns, v1, "")
		good.Spec.Verification = goldenRequest()
		if err := apply(good); err != nil {
			t.Fatalf("a success condition that compiles: %v", err)
		}
		bad.Spec.Verification.SuccessCondition = `response.code`
		refused(apply(bad), bad)
		var stored v1alpha1.OpenMedModel
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(good), &stored); err != nil {
			t.Fatal(err)
		}
		if got := stored.Spec.Verification.SuccessCondition; got != good.Spec.Verification.SuccessCondition {
			t.Errorf("the stored success condition is %q after a refused update", got)
		}
	})
}

// tenantNamespace is a namespace of its own for a test with the objects of
// examples/tenancy: the tenant Role's ServiceAccount, which the operator
// may impersonate there.
func tenantNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	harness.ApplyTenantRole(t, k8s, ns)
	harness.ApplyImpersonatorBinding(t, k8s, ns)
	return ns
}

// watchReplicaSetAvailability watches the ReplicaSets of ns and returns
// the most available replicas any ReplicaSet of version hash ever had.
func watchReplicaSetAvailability(t *testing.T, ns, hash string) func() int32 {
	t.Helper()
	var most atomic.Int32
	stop := watchObjects(t, ns, &appsv1.ReplicaSetList{}, func(o k8sruntime.Object) {
		if rs, ok := o.(*appsv1.ReplicaSet); ok && rs.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation] == hash &&
			rs.Status.AvailableReplicas > most.Load() {
			most.Store(rs.Status.AvailableReplicas)
		}
	})
	return func() int32 { stop(); return most.Load() }
}

// progressing is the Deployment's Progressing condition.
func progressing(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == appsv1.DeploymentProgressing {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// gatesOf are the readiness gates of d's pod template.
func gatesOf(d *appsv1.Deployment) []string {
	var out []string
	for _, g := range d.Spec.Template.Spec.ReadinessGates {
		out = append(out, string(g.ConditionType))
	}
	return out
}

// podHash is the manifest hash of pod name in ns ("" when gone).
func podHash(t *testing.T, ns, name string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		return ""
	}
	return p.Annotations[v1alpha1.ManifestHashAnnotation]
}
