package rollout

import (
	"sort"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

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
	// lagging: the status keeps an older observedGeneration on purpose.
	lagging bool
	// message, when set, is the Reconciling or Stalled message: what
	// kstatus, Argo CD and `flux get` show.
	message string
}

// Condition spellings used by the table.
const (
	rdyF   = "Ready=False/"
	progT  = "Progressing=True/"
	progF  = "Progressing=False/"
	degT   = "Degraded=True/"
	rbF    = "RolledBack=False/"
	recT   = "Reconciling=True/"
	stlT   = "Stalled=True/"
	notReq = "RolledBack=False/NotRequested"
	hlthy  = "Degraded=False/Healthy"
)

var (
	readyConds   = []string{hlthy, "Progressing=False/RolloutComplete", "Ready=True/RolloutSucceeded", notReq}
	startedConds = func(reason string) []string {
		return []string{hlthy, progT + reason, rdyF + "RolloutStarted", recT + "RolloutStarted", notReq}
	}
)

// TestDecideTable covers every declared state (states.go) and every row of
// the status table in docs/spec (Status at a glance). Each case drives the
// fixture on the real API server to a state and checks the next pass
// completely.
func TestDecideTable(t *testing.T) {
	cases := []struct {
		name   string
		row    string // the row of docs/spec's Status at a glance
		target func(*appsv1.Deployment)
		setup  func(c *cluster)
		want   expect
	}{{
		name: "first pass starts the rollout (SpecChanged)", row: "rolling out",
		setup: func(c *cluster) {},
		want: expect{message: "Rolling out " + v1 + " on Deployment openmed-service", phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("SpecChanged"),
			apply: true, claim: true, ensure: 1, events: []string{"RolloutStarted"}, requeue: true},
	}, {
		name: "target appears after TargetNotFound (InitialRollout)", row: "rolling out",
		target: func(d *appsv1.Deployment) { d.Name = "later" },
		setup: func(c *cluster) {
			c.pass()
			c.recreateTarget("openmed-service")
		},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("InitialRollout"),
			apply: true, claim: true, ensure: 1, events: []string{"RolloutStarted"}, requeue: true},
	}, {
		name: "env entry removed by another manager (DriftCorrected)", row: "rolling out",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Env = nil })
		},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("DriftCorrected"),
			apply: true, events: []string{"DriftCorrected"}, requeue: true},
	}, {
		name: "replicas changed by helm while Ready: corrected, still Ready", row: "desired version serving",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](5) })
			c.markReady()
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus, conds: readyConds,
			apply: true, events: []string{"DriftCorrected"}},
	}, {
		name: "rollout in progress keeps its conditions and reports the progress", row: "rolling out",
		setup: func(c *cluster) {
			c.pass()
			c.markRolling()
		},
		want: expect{message: "Rolling out " + v1 + " on Deployment openmed-service: 1/2 pods updated, 2 available", phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("SpecChanged"),
			requeue: true},
	}, {
		name: "rollout pass without new progress writes nothing", row: "rolling out",
		setup: func(c *cluster) {
			c.pass()
			c.markRolling()
			c.pass()
		},
		want: expect{phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("SpecChanged"),
			message: "Rolling out " + v1 + " on Deployment openmed-service: 1/2 pods updated, 2 available", requeue: true, unchanged: true},
	}, {
		name: "rollout reaches Ready", row: "desired version serving",
		setup: func(c *cluster) {
			c.pass()
			c.markReady()
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus, conds: readyConds, events: []string{"RolloutSucceeded"}},
	}, {
		name: "old pods still terminating is not Ready (kubectl rollout status)", row: "rolling out",
		setup: func(c *cluster) {
			c.pass()
			c.setDeploymentStatus(func(d *appsv1.Deployment) {
				c.statusOf(d, 3, 2, 3, 3)
			})
		},
		want: expect{message: "Rolling out " + v1 + " on Deployment openmed-service: 2/2 pods updated, 3 available", phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus, conds: startedConds("SpecChanged"),
			requeue: true},
	}, {
		name: "steady state", row: "desired version serving",
		setup: func(c *cluster) { c.readyAt(v1) },
		want:  expect{phase: v1alpha1.PhaseReady, kstatus: status.CurrentStatus, conds: readyConds, unchanged: true},
	}, {
		name: "another manager's rollout while Ready (DeploymentRolling)", row: "waiting (Deployment rolling for another reason)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "openmed:2.4.0" })
			c.markRolling()
		},
		want: expect{message: "Deployment openmed-service is rolling out a change the model did not make: 1/2 pods updated, 2 available; serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "DeploymentRolling", rdyF + "DeploymentRolling", recT + "DeploymentRolling", notReq}},
	}, {
		name: "paused target waits for its owner", row: "waiting for target",
		target: func(d *appsv1.Deployment) { d.Spec.Paused = true },
		setup: func(c *cluster) {
			c.pass()
			c.setDeploymentStatus(func(d *appsv1.Deployment) { c.statusOf(d, 2, 0, 1, 1) })
		},
		want: expect{message: "Deployment openmed-service is paused; " + v1 + " rolls out when it is resumed", phase: v1alpha1.PhaseRollingOut, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progF + "TargetPaused", rdyF + "TargetPaused", recT + "TargetPaused", notReq}},
	}, {
		name: "target not found", row: "waiting for target",
		target: func(d *appsv1.Deployment) { d.Name = "elsewhere" },
		setup:  func(c *cluster) {},
		want: expect{message: "Waiting for Deployment openmed-service", phase: v1alpha1.PhasePending, kstatus: status.InProgressStatus,
			conds:  []string{degT + "TargetNotFound", progF + "Blocked", rdyF + "TargetNotFound", recT + "TargetNotFound", notReq},
			events: []string{"TargetNotFound"}},
	}, {
		name: "container not found", row: "blocked (Failed, recoverable)",
		target: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "other" },
		setup:  func(c *cluster) {},
		want: expect{message: "Deployment openmed-service has no container openmed-service", phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "ContainerNotFound", progF + "Blocked", rdyF + "ContainerNotFound", stlT + "ContainerNotFound", notReq},
			events: []string{"ContainerNotFound"}},
	}, {
		name: "target owned by another resource", row: "blocked (Failed, recoverable)",
		setup: func(c *cluster) {
			c.editDeployment("helm", func(d *appsv1.Deployment) {
				d.Annotations = map[string]string{v1alpha1.ModelResourceAnnotation: c.ns + "/other"}
			})
		},
		want: expect{message: "Deployment openmed-service is managed by another OpenMedModel", phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "TargetConflict", progF + "Blocked", rdyF + "TargetConflict", stlT + "TargetConflict", notReq},
			events: []string{"TargetConflict"}},
	}, {
		name: "invalid spec", row: "invalid spec",
		setup: func(c *cluster) { c.override = func(m *v1alpha1.OpenMedModel) { m.Spec.Tier = "Huge" } },
		want: expect{phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds: []string{degT + "InvalidSpec", progF + "Blocked", rdyF + "InvalidSpec", "RolledBack=Unknown/InvalidSpec", stlT + "InvalidSpec"}},
	}, {
		name: "failed rollout records the automatic rollback before acting", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.setVersion(v2)
			c.pass()
			c.markFailed()
		},
		want: expect{message: "Rolling back Deployment openmed-service to " + v1 + " after " + v2 + " failed", phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds:  []string{degT + "RolloutFailed", progT + "RollbackInProgress", rdyF + "RolledBack", recT + "RolledBack", rbF + "RollbackInProgress"},
			events: []string{"RolloutFailed", "RollbackStarted"}, requeue: true},
	}, {
		name: "the recorded rollback is applied by the next pass", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.setVersion(v2)
			c.pass()
			c.markFailed()
			c.pass()
		},
		want: expect{message: "Rolling back Deployment openmed-service to " + v1 + " after " + v2 + " failed", phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds: []string{degT + "DesiredVersionFailed", progT + "RollbackInProgress", rdyF + "RolledBack", recT + "RolledBack", rbF + "RollbackInProgress"},
			apply: true, requeue: true},
	}, {
		name: "failed rollout with rollback disabled", row: "desired spec failed, nothing to roll back to",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) {
				m.Spec.RolloutStrategy.RollbackOnFailure = ptr.To(false)
				m.Spec.Version = v2
			})
			c.pass()
			c.markFailed()
		},
		want: expect{message: v2 + " failed on Deployment openmed-service and no retained version is serving; change the spec or set reconcile.fluxcd.io/resetAt to retry", phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RolloutFailed", progF + "ProgressDeadlineExceeded", rdyF + "RolloutFailed", stlT + "RolloutFailed", rbF + "RollbackDisabled"},
			events: []string{"RolloutFailed"}},
	}, {
		name: "failed first rollout, nothing retained", row: "desired spec failed, nothing to roll back to",
		setup: func(c *cluster) {
			c.pass()
			c.markFailed()
		},
		want: expect{message: v1 + " failed on Deployment openmed-service and no retained version is serving; change the spec or set reconcile.fluxcd.io/resetAt to retry", phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
			conds:  []string{degT + "RolloutFailed", progF + "ProgressDeadlineExceeded", rdyF + "RolloutFailed", stlT + "RolloutFailed", rbF + "RollbackDisabled"},
			events: []string{"RolloutFailed"}},
	}, {
		name: "automatic rollback in progress", row: "rollback in progress",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
		},
		want: expect{message: "Rolling back Deployment openmed-service to " + v1 + " after " + v2 + " failed", phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus, unchanged: true,
			conds:   []string{degT + "DesiredVersionFailed", progT + "RollbackInProgress", rdyF + "RolledBack", recT + "RolledBack", rbF + "RollbackInProgress"},
			requeue: true},
	}, {
		name: "automatic rollback succeeded", row: "desired spec failed, held at a retained version",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
			c.markReady()
		},
		want: expect{message: v2 + " failed on Deployment openmed-service; serving the retained " + v1 + "; change the spec or set reconcile.fluxcd.io/resetAt to retry", phase: v1alpha1.PhaseRolledBack, kstatus: status.FailedStatus,
			conds:  []string{degT + "DesiredVersionFailed", progF + "RollbackComplete", rdyF + "RolledBack", stlT + "RolledBack", "RolledBack=True/RollbackSucceeded"},
			events: []string{"RollbackSucceeded"}},
	}, {
		name: "automatic rollback failed", row: "rollback failed",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.failRollout(v2)
			c.markFailed()
		},
		want: expect{message: "Rollback of Deployment openmed-service to " + v1 + " failed after " + v2 + " failed", phase: v1alpha1.PhaseFailed, kstatus: status.FailedStatus,
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
		want: expect{message: "Rolling back Deployment openmed-service to " + v1 + " (openmed.ai/rollback-to)", phase: v1alpha1.PhaseRolledBack, kstatus: status.InProgressStatus,
			conds: []string{degT + "ManualRollback", progT + "RollbackInProgress", rdyF + "ManualRollback", recT + "ManualRollback", rbF + "RollbackInProgress"},
			apply: true, events: []string{"RollbackStarted"}, requeue: true},
	}, {
		name: "manual rollback holds the retained version", row: "held at a retained version",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.readyAt(v2)
			c.annotate(v1alpha1.RollbackToAnnotation, v1)
			c.pass()
			c.markReady()
		},
		want: expect{message: "Held at " + v1 + " on Deployment openmed-service by the openmed.ai/rollback-to annotation; remove it to roll out " + v2, phase: v1alpha1.PhaseRolledBack, kstatus: status.FailedStatus,
			conds:  []string{degT + "ManualRollback", progF + "RollbackComplete", rdyF + "RolledBack", stlT + "RolledBack", "RolledBack=True/RollbackSucceeded"},
			events: []string{"RollbackSucceeded"}},
	}, {
		name: "Ready Deployment loses pods (DeploymentUnavailable)", row: "waiting (Deployment recovering)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.markUnavailable()
		},
		want: expect{message: "Deployment openmed-service lost availability (0/2 pods available); serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds: []string{degT + "DeploymentUnavailable", progF + "DeploymentUnavailable", rdyF + "DeploymentUnavailable", recT + "DeploymentUnavailable", notReq}},
	}, {
		name: "Ready Deployment fails without a model change (DeploymentUnavailable)", row: "failed (Deployment's own failure)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editDeployment("helm", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "openmed:broken" })
			c.markFailed()
		},
		want: expect{message: "Deployment openmed-service reports a failed rollout the model did not start (2/2 pods available); serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.FailedStatus,
			conds: []string{degT + "DeploymentUnavailable", progF + "DeploymentUnavailable", rdyF + "DeploymentUnavailable", stlT + "DeploymentUnavailable", notReq}},
	}, {
		name: "Ready Deployment scales up (Scaling)", row: "a capacity change (scale-up, HPA, minReadySeconds)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = nil })
			c.pass()
			c.scaleAs("kube-controller-manager", 4)
			c.markScaling(2)
		},
		want: expect{message: "Deployment openmed-service is bringing up pods (2/4 pods available); serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "Scaling", rdyF + "Scaling", recT + "Scaling", notReq}, requeue: true},
	}, {
		name: "Ready Deployment cannot create the pods of a scale-up (ReplicaFailure)", row: "a capacity change (scale-up, HPA, minReadySeconds)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = nil })
			c.pass()
			c.scaleAs("kube-controller-manager", 4)
			c.markReplicaFailure(2)
		},
		want: expect{message: "Deployment openmed-service cannot create pods (ReplicaFailure; 2/4 pods available); serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds: []string{degT + "DeploymentUnavailable", progF + "DeploymentUnavailable", rdyF + "DeploymentUnavailable", recT + "DeploymentUnavailable", notReq}},
	}, {
		name: "the model's own replicas change waits for the Deployment controller", row: "a capacity change (scale-up, HPA, minReadySeconds)",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Replicas = ptr.To[int32](4) })
		},
		want: expect{message: "Waiting for the Deployment controller to observe Deployment openmed-service; serving " + v1, phase: v1alpha1.PhaseReady, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "DeploymentProgressing", rdyF + "RolloutInProgress", recT + "RolloutInProgress", notReq}, apply: true, requeue: true},
	}, {
		name: "suspended while Ready", row: "suspended",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend = true })
		},
		want: expect{phase: v1alpha1.PhaseSuspended, kstatus: status.CurrentStatus, conds: readyConds},
	}, {
		name: "suspended together with a spec edit is not observed", row: "suspended",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend, m.Spec.Version = true, v2 })
		},
		want: expect{phase: v1alpha1.PhaseSuspended, kstatus: status.InProgressStatus, lagging: true,
			conds: []string{hlthy, "Progressing=False/RolloutComplete", rdyF + "Suspended", notReq}},
	}, {
		// kstatus reads the Ready=False it was suspended with.
		name: "suspended mid-rollout drops Reconciling", row: "suspended",
		setup: func(c *cluster) {
			c.pass()
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.Suspend = true })
		},
		want: expect{phase: v1alpha1.PhaseSuspended, kstatus: status.InProgressStatus,
			conds: []string{hlthy, progT + "SpecChanged", rdyF + "RolloutStarted", notReq}},
	}, {
		name: "being deleted", row: "being deleted",
		setup: func(c *cluster) {
			c.readyAt(v1)
			c.deleteModel()
		},
		want: expect{phase: v1alpha1.PhaseReady, kstatus: status.TerminatingStatus, conds: readyConds,
			release: true, prune: 1, events: []string{"ModelRemoved"}, finalizer: true, unchanged: true},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == nil {
				target = func(*appsv1.Deployment) {}
			}
			c := newClusterWith(t, target)
			tc.setup(c)
			plan := c.decide()
			in := c.obj.Status.DeepCopy()
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
			if (plan.RequeueAfter > 0 || plan.Requeue) != w.requeue {
				t.Errorf("requeueAfter %v requeue %v, want requeue %v", plan.RequeueAfter, plan.Requeue, w.requeue)
			}
			if w.message != "" {
				if got := kstatusMessage(plan.Status); got != w.message {
					t.Errorf("kstatus message\n got: %s\nwant: %s", got, w.message)
				}
			}
			if w.unchanged != apiequality.Semantic.DeepEqual(*in, plan.Status) {
				t.Errorf("status unchanged = %v, want %v", !w.unchanged, w.unchanged)
			}
			if c.obj.DeletionTimestamp != nil {
				return
			}
			if (plan.Status.ObservedGeneration != c.obj.Generation) != w.lagging {
				t.Errorf("observedGeneration %d, generation %d, lagging want %v", plan.Status.ObservedGeneration, c.obj.Generation, w.lagging)
			}
			for _, cond := range plan.Status.Conditions {
				if cond.ObservedGeneration != plan.Status.ObservedGeneration {
					t.Errorf("condition %s observedGeneration %d, status says %d", cond.Type, cond.ObservedGeneration, plan.Status.ObservedGeneration)
				}
			}
		})
	}
}

// kstatusOf is Flux's (and kstatus UIs') reading of the status.
func kstatusOf(t *testing.T, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) status.Status {
	t.Helper()
	res, err := status.Compute(withStatus(t, obj, st))
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// TestFreshObjectIsNotCurrent is the first row of docs/spec's Status at a glance: the CRD default
// status (observedGeneration -1) is InProgress, never Current, until a pass.
func TestFreshObjectIsNotCurrent(t *testing.T) {
	c := newCluster(t)
	if c.obj.Status.ObservedGeneration != -1 {
		t.Fatalf("default observedGeneration %d", c.obj.Status.ObservedGeneration)
	}
	if got := kstatusOf(t, c.obj, c.obj.Status); got != status.InProgressStatus {
		t.Errorf("kstatus %s, want InProgress", got)
	}
}

// kstatusMessage is the message of the Reconciling or Stalled condition.
func kstatusMessage(st v1alpha1.OpenMedModelStatus) string {
	for _, typ := range []string{v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition} {
		if c := apimeta.FindStatusCondition(st.Conditions, typ); c != nil {
			return c.Message
		}
	}
	return ""
}

// withStatus is obj with status st, as the unstructured object the health
// faces (kstatus, Argo CD's) read.
func withStatus(t *testing.T, obj *v1alpha1.OpenMedModel, st v1alpha1.OpenMedModelStatus) *unstructured.Unstructured {
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
	return u
}
