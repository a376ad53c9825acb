package rollout

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/target"
)

// FuzzDecideSequences drives Decide through sequences of real events: spec
// edits, suspend, reset and rollback requests, the Deployment controller
// reporting progress, failure or lost pods, other field managers changing
// the target, failed steps, lost status writes and deletion. The target is
// merged by the Kubernetes server-side apply implementation itself
// (structured-merge-diff through managedfieldstest, with client-go's
// embedded Deployment schema), so no merge is imitated. After every pass:
// Decide is deterministic and leaves its inputs alone, the status passes
// Flux's rules, and the safety invariants hold (see checkInvariants).
func FuzzDecideSequences(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 6, 0, 2, 0, 7, 0, 0, 6, 0},       // rollout, upgrade fails, rollback, held
		{0, 6, 0, 2, 1, 7, 0, 1, 0, 0, 6},    // lost status writes around a failure
		{0, 6, 0, 3, 2, 0, 3, 0},             // suspend together with an edit
		{0, 7, 0, 4, 0, 13, 0, 6, 0},         // reset after Failed with nothing retained
		{0, 6, 0, 10, 8, 0, 7, 0, 6, 0},      // another manager's rollout and failure
		{0, 6, 0, 11, 0, 11, 0, 11, 0, 0},    // a manager keeps reverting replicas
		{0, 6, 0, 12, 0, 6, 0, 16, 0, 15, 0}, // env removed, replicas released, delete
		{0, 14, 0, 14, 0, 5, 0, 6, 0, 9, 0},  // failed steps, manual rollback, outage
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		s := newSim(t)
		for i, op := range ops {
			s.step(op, i)
		}
	})
}

var simVersions = []string{v1, v2, v3}

// sim is a resource and its target with the Deployment merged by the real
// server-side apply implementation.
type sim struct {
	t       *testing.T
	obj     *v1alpha1.OpenMedModel
	fm      managedfieldstest.TestFieldManager
	gen     int64
	status  appsv1.DeploymentStatus
	cms     map[string]corev1.ConfigMap
	now     time.Time
	resetN  int
	deleted bool
}

var simConverter = applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)

func newSim(t *testing.T) *sim {
	s := &sim{t: t, fm: managedfieldstest.NewTestFieldManager(simConverter, appsv1.SchemeGroupVersion.WithKind("Deployment")),
		cms: map[string]corev1.ConfigMap{}, now: clock}
	s.obj = fixtureModel(t)
	s.obj.UID = "00000000-0000-4000-8000-000000000830"
	s.obj.Generation = 1
	dep := &appsv1.Deployment{}
	readYAML(t, "deployment.yaml", dep)
	dep.Namespace = s.obj.Namespace
	s.update(dep, "helm")
	s.status = readyStatus(1, 1)
	return s
}

func readyStatus(gen int64, n int32) appsv1.DeploymentStatus {
	return appsv1.DeploymentStatus{ObservedGeneration: gen, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		}}
}

// live is the target as a typed Deployment with the generation and status
// the API server and the Deployment controller would give it.
func (s *sim) live() *appsv1.Deployment {
	d := &appsv1.Deployment{}
	u := s.fm.Live().(*unstructured.Unstructured)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		s.t.Fatal(err)
	}
	d.Generation = s.gen
	d.Status = s.status
	return d
}

// write merges obj into the target and bumps the generation when the spec
// changed, as the API server does for Deployments.
func (s *sim) write(apply func() error) error {
	before := s.live().Spec
	if err := apply(); err != nil {
		return err
	}
	if s.gen == 0 || !apiequality.Semantic.DeepEqual(before, s.live().Spec) {
		s.gen++
	}
	return nil
}

func (s *sim) update(d *appsv1.Deployment, manager string) {
	d = d.DeepCopy()
	d.Status = appsv1.DeploymentStatus{}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		s.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	if err := s.write(func() error { return s.fm.Update(u, manager) }); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sim) apply(intent *unstructured.Unstructured) {
	if err := s.write(func() error { return s.fm.Apply(intent.DeepCopy(), DefaultFieldManager, true) }); err != nil {
		s.t.Fatalf("apply: %v", err)
	}
}

func (s *sim) observed(failure *Failure) Observed {
	obs := Observed{Now: metav1.NewTime(s.now), Deployment: s.live(), Failure: failure}
	for _, n := range sortedKeys(s.cms) {
		obs.ConfigMaps = append(obs.ConfigMaps, s.cms[n])
	}
	return obs
}

func sortedKeys(m map[string]corev1.ConfigMap) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// pass decides and, unless failure is set, carries the plan out; a status
// write is lost when keepStatus is false.
func (s *sim) pass(failure *Failure, keepStatus bool) {
	obs := s.observed(failure)
	plan := decide(s.t, s.obj, obs)
	if len(plan.ReadConfigMaps) > 0 {
		// As the reconciler does: read the ConfigMaps (the simulator's
		// hold their data) and decide again.
		obs.ConfigMapContents = obs.ConfigMaps
		plan = decide(s.t, s.obj, obs)
	}
	s.checkInvariants(obs, plan)
	if failure == nil {
		for _, cm := range plan.EnsureConfigMaps {
			if _, ok := s.cms[cm.Name]; !ok {
				s.cms[cm.Name] = *cm.DeepCopy()
			}
		}
		if plan.ReleaseReplicas {
			// The managedFields edit the reconciler sends (target.DropField).
			u := s.fm.Live().(*unstructured.Unstructured)
			entries, _, err := target.WithoutField(u.GetManagedFields(), DefaultFieldManager, fieldpath.MakePathOrDie("spec", "replicas"))
			if err != nil {
				s.t.Fatal(err)
			}
			u.SetManagedFields(entries)
			if err := s.write(func() error { return s.fm.Update(u, DefaultFieldManager) }); err != nil {
				s.t.Fatal(err)
			}
		}
		for _, intent := range []*unstructured.Unstructured{plan.Takeover, plan.ApplyDeployment} {
			if intent != nil {
				s.apply(intent)
			}
		}
		if plan.Release != nil {
			s.apply(plan.Release.Keep)
		}
		for _, name := range plan.PruneConfigMaps {
			delete(s.cms, name)
		}
	}
	if keepStatus {
		s.obj.Status = plan.Status
	}
	if plan.RemoveFinalizer && failure == nil && keepStatus {
		s.deleted = true
	}
}

// checkInvariants are the properties no sequence may break.
func (s *sim) checkInvariants(obs Observed, plan Plan) {
	s.t.Helper()
	st := plan.Status
	if s.obj.DeletionTimestamp != nil {
		return
	}
	// A failed desired spec is never applied again without a reset.
	if n, err := Normalize(s.obj); err == nil && plan.ApplyDeployment != nil &&
		s.obj.Status.FailedSpecHash == SpecHash(n) && s.obj.Annotations[v1alpha1.ResetRequestAnnotation] == s.obj.Status.LastHandledResetAt {
		applied := plan.ApplyDeployment.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
		if applied[v1alpha1.ManifestHashAnnotation] == ManifestHash(n) && s.obj.Status.RollbackSpec != nil &&
			ManifestHash(*s.obj.Status.RollbackSpec) != ManifestHash(n) {
			s.t.Fatalf("the failed desired spec was applied again: %v", condSummary(st))
		}
	}
	ready := findCondition(st, v1alpha1.ReadyCondition)
	if ready != nil && ready.Status == metav1.ConditionTrue {
		if st.Phase != v1alpha1.PhaseReady && st.Phase != v1alpha1.PhaseSuspended {
			s.t.Fatalf("Ready=True with phase %s", st.Phase)
		}
		n, err := Normalize(s.obj)
		if st.Phase == v1alpha1.PhaseReady && err == nil && st.ObservedGeneration == s.obj.Generation {
			dep := obs.Deployment
			if !newPointer(n, OwnerKey(s.obj)).matches(dep) && plan.ApplyDeployment == nil {
				s.t.Fatalf("Ready=True while the target does not carry the desired pointer")
			}
		}
	}
	if st.Phase == v1alpha1.PhaseRollingOut && !conditionIs(&st, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, "") && obs.Failure == nil {
		s.t.Fatalf("RollingOut without Reconciling: %v", condSummary(st))
	}
}

// step plays one event.
func (s *sim) step(op byte, i int) {
	if s.deleted {
		return
	}
	edit := func(mutate func(*v1alpha1.OpenMedModel)) {
		if s.obj.DeletionTimestamp != nil {
			return
		}
		before := s.obj.Spec.DeepCopy()
		mutate(s.obj)
		if !apiequality.Semantic.DeepEqual(*before, s.obj.Spec) {
			s.obj.Generation++
		}
	}
	annotate := func(k, v string) {
		if s.obj.Annotations == nil {
			s.obj.Annotations = map[string]string{}
		}
		if v == "" {
			delete(s.obj.Annotations, k)
		} else {
			s.obj.Annotations[k] = v
		}
	}
	dep := s.live()
	replicas := ptr.Deref(dep.Spec.Replicas, 1)
	switch op % 17 {
	case 0:
		s.pass(nil, true)
	case 1:
		s.pass(nil, false)
	case 2:
		edit(func(m *v1alpha1.OpenMedModel) { m.Spec.Version = simVersions[i%len(simVersions)] })
	case 3:
		edit(func(m *v1alpha1.OpenMedModel) {
			m.Spec.Suspend = !m.Spec.Suspend
			if i%2 == 0 {
				m.Spec.Version = simVersions[(i+1)%len(simVersions)]
			}
		})
	case 4:
		s.resetN++
		annotate(v1alpha1.ResetRequestAnnotation, fmt.Sprint("reset-", s.resetN))
	case 5:
		annotate(v1alpha1.RollbackToAnnotation, []string{"", v1, v2}[i%3])
	case 6:
		s.status = readyStatus(s.gen, replicas)
	case 7:
		s.status = readyStatus(s.gen, replicas)
		s.status.UpdatedReplicas, s.status.Replicas = 1, replicas+1
		s.status.Conditions[1] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: "ProgressDeadlineExceeded", LastUpdateTime: metav1.NewTime(s.now)}
	case 8:
		s.status = readyStatus(s.gen, replicas)
		s.status.UpdatedReplicas, s.status.Replicas = 1, replicas+1
	case 9:
		s.status = readyStatus(s.gen, replicas)
		s.status.AvailableReplicas, s.status.ReadyReplicas = 0, 0
		s.status.Conditions[0].Status = corev1.ConditionFalse
	case 10:
		dep.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("openmed:2.%d", i)
		s.update(dep, "helm")
	case 11:
		dep.Spec.Replicas = ptr.To(int32(1 + i%3))
		s.update(dep, "kustomize-controller")
	case 12:
		removeEnv(&dep.Spec.Template.Spec.Containers[0])
		s.update(dep, "kubectl-edit")
	case 13:
		s.now = s.now.Add(10 * time.Minute)
	case 14:
		steps := []Step{StepManifest, StepApply, StepRelease, StepPrune, StepInternal}
		kinds := []FailureKind{Transient, Rejected, NameTaken}
		s.pass(&Failure{Step: steps[i%len(steps)], Kind: kinds[i%len(kinds)]}, true)
	case 15:
		if s.obj.DeletionTimestamp == nil {
			s.obj.DeletionTimestamp = &metav1.Time{Time: s.now}
		}
	case 16:
		edit(func(m *v1alpha1.OpenMedModel) {
			if m.Spec.Replicas == nil {
				m.Spec.Replicas = ptr.To[int32](2)
			} else {
				m.Spec.Replicas = nil
			}
		})
	}
}
