package rollout

import (
	"sort"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// expect is everything one pass must produce: the phase, the whole
// condition set, the kstatus verdict and the intended changes.
type expect struct {
	phase     v1alpha1.Phase
	conds     []string
	kstatus   status.Status
	apply     bool
	claim     bool
	ensure    int
	prune     int
	release   bool
	events    []string
	requeue   bool
	finalizer bool
	// unchanged: the plan's status equals the input status.
	unchanged bool
}

// Condition spellings used by the table.
const (
	rdyF   = "Ready=False/"
	progT  = "Progressing=True/"
	progF  = "Progressing=False/"
	degT   = "Degraded=True/"
	degF   = "Degraded=False/"
	rbF    = "RolledBack=False/"
	recT   = "Reconciling=True/"
	stlT   = "Stalled=True/"
	notReq = "RolledBack=False/NotRequested"
	hlthy  = "Degraded=False/Healthy"
)

// TestDecideTable covers every condition tuple of reference §3–4 (as changed
// by the contract) and every row of contract §3. Each case drives the fake
// cluster to a state and checks the next pass completely.
func TestDecideTable(t *testing.T) {
	cases := []struct {
		name  string
		row   string // contract §3 row
		setup func(c *cluster)
		want  expect
	}{{
		name: "first pass starts the rollout (SpecChanged)", row: "rolling out",
		setup: func(c *cluster) {},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "SpecChanged", rdyF + "RolloutStarted", recT + "RolloutStarted", notReq},
			apply: true, claim: true, ensure: 1, events: []string{"RolloutStarted"}, requeue: true},
	}, {
		name: "target appears after TargetNotFound (InitialRollout)", row: "rolling out",
		setup: func(c *cluster) {
			dep := c.dep
			c.dep = nil
			c.pass()
			c.dep = dep
		},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "InitialRollout", rdyF + "RolloutStarted", recT + "RolloutStarted", notReq},
			apply: true, claim: true, ensure: 1, events: []string{"RolloutStarted"}, requeue: true},
	}, {
		name: "env entry removed by another manager (DriftCorrected)", row: "rolling out",
		setup: func(c *cluster) {
			c.readyAt(v1)
			removeEnv(findContainer(c.dep, "openmed-service"))
			setManager(c.dep, "kubectl-edit", metav1.ManagedFieldsOperationUpdate,
				`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"openmed-service\"}":{"f:image":{}}}}}}}`)
		},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "DriftCorrected", rdyF + "RolloutStarted", recT + "RolloutStarted", notReq},
			apply: true, events: []string{"DriftCorrected"}, requeue: true},
	}, {
		name: "replicas changed by helm while Ready: corrected, still Ready", row: "desired version serving",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.dep.Spec.Replicas = ptrTo(int32(5))
			setManager(c.dep, "helm", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:replicas":{}}}`)
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus,
			conds: []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq},
			apply: true, events: []string{"DriftCorrected"}, unchanged: true},
	}, {
		name: "rollout in progress", row: "rolling out",
		setup: func(c *cluster) { c.pass() },
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus,
			conds:   []string{hlthy, progT + "DeploymentProgressing", rdyF + "RolloutInProgress", recT + "RolloutInProgress", notReq},
			requeue: true},
	}, {
		name: "rollout reaches Ready", row: "desired version serving",
		setup: func(c *cluster) {
			c.pass()
			markReady(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus,
			conds:  []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq},
			events: []string{"RolloutSucceeded"}},
	}, {
		name: "steady state", row: "desired version serving",
		setup: func(c *cluster) { c.readyAt(v1) },
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus,
			conds:     []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq},
			unchanged: true},
	}, {
		name: "target not found", row: "waiting for target",
		setup: func(c *cluster) { c.dep = nil },
		want: expect{phase: v1alpha1.PhasePending, kstatus: status.InProgressStatus,
			conds:  []string{degT + "TargetNotFound", progF + "Blocked", rdyF + "TargetNotFound", recT + "TargetNotFound", notReq},
			events: []string{"TargetNotFound"}, requeue: true},
	}, {
		name: "container not found", row: "blocked (Failed, recoverable)",
		setup: func(c *cluster) { c.dep.Spec.Template.Spec.Containers[0].Name = "other" },
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "ContainerNotFound", progF + "Blocked", rdyF + "ContainerNotFound", stlT + "ContainerNotFound", notReq},
			events: []string{"ContainerNotFound"}},
	}, {
		name: "target owned by another resource", row: "blocked (Failed, recoverable)",
		setup: func(c *cluster) {
			c.dep.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: "synthetic/other"}
		},
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "TargetConflict", progF + "Blocked", rdyF + "TargetConflict", stlT + "TargetConflict", notReq},
			events: []string{"TargetConflict"}},
	}, {
		name: "ConfigMap name taken by a foreign object", row: "waiting for target",
		setup: func(c *cluster) {
			cm := ManifestConfigMap(c.obj, normalize(c.t.(*testing.T), c.obj))
			cm.OwnerReferences = nil
			c.cms[cm.Name] = *cm
		},
		want: expect{phase: v1alpha1.PhasePending, kstatus: status.InProgressStatus,
			conds:   []string{degT + "ManifestConflict", progF + "Blocked", rdyF + "ManifestConflict", recT + "ManifestConflict", notReq},
			requeue: true},
	}, {
		name: "invalid spec", row: "invalid spec",
		setup: func(c *cluster) { c.obj.Spec.Tier = "Huge" },
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds: []string{degT + "InvalidSpec", progF + "Blocked", rdyF + "InvalidSpec", "RolledBack=Unknown/InvalidSpec", stlT + "InvalidSpec"}},
	}, {
		name: "failed rollout starts the automatic rollback", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.setVersion(v2)
			c.pass()
			markFailed(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds: []string{degT + "RolloutFailed", progT + "RollbackInProgress", rdyF + "RolledBack", recT + "RolledBack", rbF + "RollbackInProgress"},
			apply: true, events: []string{"RolloutFailed", "RollbackStarted"}, requeue: true},
	}, {
		name: "failed rollout with rollback disabled", row: "desired spec failed, nothing to roll back to",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.obj.Spec.RolloutStrategy.RollbackOnFailure = ptrTo(false)
			c.setVersion(v2)
			c.pass()
			markFailed(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RolloutFailed", progF + "ProgressDeadlineExceeded", rdyF + "RolloutFailed", stlT + "RolloutFailed", rbF + "RollbackDisabled"},
			events: []string{"RolloutFailed"}},
	}, {
		name: "failed first rollout, nothing retained", row: "desired spec failed, nothing to roll back to",
		setup: func(c *cluster) {
			c.pass()
			markFailed(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RolloutFailed", progF + "ProgressDeadlineExceeded", rdyF + "RolloutFailed", stlT + "RolloutFailed", rbF + "RollbackDisabled"},
			events: []string{"RolloutFailed"}},
	}, {
		name: "automatic rollback in progress", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
		},
		want: expect{phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds:   []string{degT + "DesiredVersionFailed", progT + "RollbackInProgress", rdyF + "RolledBack", recT + "RolledBack", rbF + "RollbackInProgress"},
			requeue: true},
	}, {
		name: "automatic rollback succeeded", row: "desired spec failed, held at a retained version",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
			markReady(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseRolledBack, kstatus: status.FailedStatus,
			conds:  []string{degT + "DesiredVersionFailed", progF + "RollbackComplete", rdyF + "RolledBack", stlT + "RolledBack", "RolledBack=True/RollbackSucceeded"},
			events: []string{"RollbackSucceeded"}},
	}, {
		name: "automatic rollback failed", row: "rollback failed",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
			markFailed(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RollbackFailed", progF + "ProgressDeadlineExceeded", rdyF + "RollbackFailed", stlT + "RollbackFailed", rbF + "RollbackFailed"},
			events: []string{"RollbackFailed"}},
	}, {
		name: "manual rollback to a version never retained", row: "blocked (Failed, recoverable)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.readyAt(v2)
			c.annotate(v1alpha1.RollbackToAnnotation, "OpenMed/not-retained")
		},
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RollbackTargetUnavailable", progF + "Blocked", rdyF + "RollbackTargetUnavailable", stlT + "RollbackTargetUnavailable", rbF + "RollbackRejected"},
			events: []string{"RollbackRejected"}},
	}, {
		name: "manual rollback started", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.readyAt(v2)
			c.annotate(v1alpha1.RollbackToAnnotation, v1)
		},
		want: expect{phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds: []string{degT + "ManualRollback", progT + "RollbackInProgress", rdyF + "ManualRollback", recT + "ManualRollback", rbF + "RollbackInProgress"},
			apply: true, events: []string{"RollbackStarted"}, requeue: true},
	}, {
		name: "manual rollback holds the retained version", row: "held at a retained version",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.readyAt(v2)
			c.annotate(v1alpha1.RollbackToAnnotation, v1)
			c.pass()
			markReady(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseRolledBack, kstatus: status.FailedStatus,
			conds:  []string{degT + "ManualRollback", progF + "RollbackComplete", rdyF + "RolledBack", stlT + "RolledBack", "RolledBack=True/RollbackSucceeded"},
			events: []string{"RollbackSucceeded"}},
	}, {
		name: "Ready Deployment loses pods (DeploymentUnavailable)", row: "waiting (Deployment recovering)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			markUnavailable(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds:   []string{degT + "DeploymentUnavailable", progF + "DeploymentUnavailable", rdyF + "DeploymentUnavailable", recT + "DeploymentUnavailable", notReq},
			requeue: true},
	}, {
		name: "Ready Deployment fails without a model change (DeploymentUnavailable)", row: "failed (Deployment's own failure)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			markFailed(c.dep)
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.FailedStatus,
			conds: []string{degT + "DeploymentUnavailable", progF + "DeploymentUnavailable", rdyF + "DeploymentUnavailable", stlT + "DeploymentUnavailable", notReq}},
	}, {
		name: "suspended while Ready", row: "suspended",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.obj.Spec.Suspend = true
			c.obj.Generation++
		},
		want: expect{phase: v1alpha1.PhaseSuspended, kstatus: status.CurrentStatus,
			conds: []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq}},
	}, {
		name: "suspended mid-rollout drops Reconciling", row: "suspended",
		setup: func(c *cluster) {
			c.pass()
			c.obj.Spec.Suspend = true
			c.obj.Generation++
		},
		want: expect{phase: v1alpha1.PhaseSuspended, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "SpecChanged", rdyF + "RolloutStarted", notReq}},
	}, {
		name: "being deleted", row: "being deleted",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.obj.DeletionTimestamp = &metav1.Time{Time: clock}
			c.obj.Finalizers = []string{v1alpha1.Finalizer}
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.TerminatingStatus,
			conds:   []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq},
			release: true, prune: 1, events: []string{"ModelRemoved"}, finalizer: true, unchanged: true},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			tc.setup(c)
			in := c.obj.Status.DeepCopy()
			plan := c.decide()
			w := tc.want
			if plan.Status.Phase != w.phase {
				t.Errorf("phase %s, want %s", plan.Status.Phase, w.phase)
			}
			sort.Strings(w.conds)
			assertStrings(t, "conditions", condSummary(plan.Status), w.conds)
			if got := kstatusOf(t, c.obj, plan.Status); got != w.kstatus {
				t.Errorf("kstatus %s, want %s (%s)", got, w.kstatus, tc.row)
			}
			if (plan.ApplyDeployment != nil) != w.apply || plan.Claim != w.claim {
				t.Errorf("apply %v claim %v, want %v %v", plan.ApplyDeployment != nil, plan.Claim, w.apply, w.claim)
			}
			if len(plan.EnsureConfigMaps) != w.ensure || len(plan.PruneConfigMaps) != w.prune {
				t.Errorf("ensure %d prune %v, want %d %d", len(plan.EnsureConfigMaps), plan.PruneConfigMaps, w.ensure, w.prune)
			}
			if (plan.Release != nil) != w.release || plan.RemoveFinalizer != w.finalizer {
				t.Errorf("release %v finalizer %v", plan.Release != nil, plan.RemoveFinalizer)
			}
			assertStrings(t, "events", eventReasons(plan.Events), w.events)
			if (plan.RequeueAfter > 0) != w.requeue {
				t.Errorf("requeueAfter %v, want requeue %v", plan.RequeueAfter, w.requeue)
			}
			if w.unchanged != apiequality.Semantic.DeepEqual(*in, plan.Status) {
				t.Errorf("status unchanged = %v, want %v", !w.unchanged, w.unchanged)
			}
			if c.obj.DeletionTimestamp == nil && plan.Status.ObservedGeneration != c.obj.Generation {
				t.Errorf("observedGeneration %d, want %d", plan.Status.ObservedGeneration, c.obj.Generation)
			}
			for _, cond := range plan.Status.Conditions {
				if c.obj.DeletionTimestamp == nil && cond.ObservedGeneration != c.obj.Generation {
					t.Errorf("condition %s observedGeneration %d, want %d", cond.Type, cond.ObservedGeneration, c.obj.Generation)
				}
			}
		})
	}
}

// kstatusOf is Flux's (and kstatus UIs') reading of the status.
func kstatusOf(t *testing.T, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) status.Status {
	t.Helper()
	out := obj.DeepCopy()
	out.Status = st
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("openmed.ai/v1alpha1")
	u.SetKind("OpenMedModel")
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// TestFreshObjectIsNotCurrent is contract §3's first row: the CRD default
// status (observedGeneration -1) is InProgress, never Current, until a pass.
func TestFreshObjectIsNotCurrent(t *testing.T) {
	obj := fixtureModel(t)
	if obj.Status.ObservedGeneration != -1 {
		t.Fatalf("default observedGeneration %d", obj.Status.ObservedGeneration)
	}
	if got := kstatusOf(t, obj, obj.Status); got != status.InProgressStatus {
		t.Errorf("kstatus %s, want InProgress", got)
	}
}
