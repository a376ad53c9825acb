package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/health/snapshot"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/rollout"
)

const (
	// helmManager is the field manager the target is created with, as
	// `helm install` would; drift reports name managers like it.
	helmManager = "helm"
	// gitOpsManager applies the OpenMedModel, standing in for Argo CD or
	// Flux applying what was committed to Git.
	gitOpsManager = "openmed-demo"
	// pollInterval is how often the display reads the model; kwok rolls
	// pods out in a fraction of a second, so a short interval shows the
	// intermediate phases.
	pollInterval = 150 * time.Millisecond
)

// story plays the lifecycle on a cluster where the operator runs.
type story struct {
	p      *printer
	c      client.WithWatch
	model  *v1alpha1.OpenMedModel
	target []*unstructured.Unstructured

	deadline                      time.Duration
	upgradeVersion, brokenVersion string
	// crashingVersion's pods restart crashAfter after they became Ready;
	// its stage sets bakeSeconds to bake.
	crashingVersion string
	crashAfter      time.Duration
	bake            time.Duration
	// neverReady is true when the cluster's kwok keeps the broken
	// version's pods NotReady; a real kubelet cannot be told to.
	neverReady bool
	// forgetfulVersion's pods answer the golden request without the
	// patient's name: the demo's model server (local control plane only,
	// served) plays the OpenMed service on every pod's IP. verification is
	// the spec.verification the model carries from its stage on.
	forgetfulVersion string
	served           bool
	verification     *v1alpha1.Verification
	stageTimeout     time.Duration
}

// stage is one step of the storyline.
type stage struct {
	name  string
	intro string
	// skip, when set, says why the stage cannot run on this cluster.
	skip string
	act  func(ctx context.Context) error
	// done says when the model has reached the stage's end state.
	done func(snapshot.Snapshot) bool
	// note describes what the stage showed, for the summary.
	note func(watchStats) string
}

// watchStats is what the display saw of the Deployment during a stage.
type watchStats struct {
	// minAvailable is the lowest availableReplicas seen, -1 for none.
	minAvailable int32
	// deadlineExceeded is true when the Deployment reported
	// ProgressDeadlineExceeded.
	deadlineExceeded bool
	// baking and bakeFailed are true when a status the operator wrote
	// during the stage said Reconciling=True/Baking and
	// Degraded=True/BakeFailed: the model is watched, so a status that
	// lasted less than the display's poll interval counts too (a failed
	// bake's Degraded=BakeFailed is replaced by DesiredVersionFailed as
	// soon as the rollback it records is applied).
	baking, bakeFailed bool
	// verificationFailed is true when a status said
	// Degraded=True/VerificationFailed.
	verificationFailed bool
}

func (s *story) stages() []stage {
	v1 := s.model.Spec.Version
	servingAt := func(version string) func(snapshot.Snapshot) bool {
		return func(snap snapshot.Snapshot) bool {
			return snap.Observed() && snap.Phase == v1alpha1.PhaseReady && snap.ActiveVersion == version && snap.KStatus == kstatus.CurrentStatus
		}
	}
	var neverReadySkip, crashSkip, verifySkip string
	if !s.neverReady {
		neverReadySkip = "needs the local control plane: a real kubelet cannot be made to keep a version's pods NotReady"
		crashSkip = "needs the local control plane: a real kubelet cannot be made to restart a version's containers"
	}
	if !s.served {
		verifySkip = "needs the local control plane: the demo plays the model server whose answers it changes on its pods' IPs"
	}
	return []stage{{
		name: "first-rollout",
		intro: fmt.Sprintf("create the chart's ConfigMap and Deployment (as %q) and apply the OpenMedModel for %s, progressDeadlineSeconds %d instead of the example's %d",
			helmManager, v1, s.deadlineSeconds(), ptr.Deref(s.model.Spec.RolloutStrategy.ProgressDeadlineSeconds, v1alpha1.DefaultProgressDeadlineSeconds)),
		act: func(ctx context.Context) error {
			if err := s.createTarget(ctx); err != nil {
				return err
			}
			return s.applyVersion(ctx, v1)
		},
		done: servingAt(v1),
	}, {
		name:  "upgrade",
		intro: "change spec.version to " + s.upgradeVersion + " (a commit to Git)",
		act:   func(ctx context.Context) error { return s.applyVersion(ctx, s.upgradeVersion) },
		done:  servingAt(s.upgradeVersion),
	}, {
		name:  "never-ready",
		intro: fmt.Sprintf("change spec.version to %s, whose pods never become ready; after %s the Deployment reports ProgressDeadlineExceeded and the operator restores %s", s.brokenVersion, s.deadline, s.upgradeVersion),
		skip:  neverReadySkip,
		act:   func(ctx context.Context) error { return s.applyVersion(ctx, s.brokenVersion) },
		done: func(snap snapshot.Snapshot) bool {
			return snap.Observed() && snap.Phase == v1alpha1.PhaseRolledBack && snap.ActiveVersion == s.upgradeVersion &&
				snap.KStatus == kstatus.FailedStatus && deploymentSettled(snap)
		},
		note: func(w watchStats) string {
			return fmt.Sprintf("ProgressDeadlineExceeded seen: %t; availableReplicas never below %d", w.deadlineExceeded, w.minAvailable)
		},
	}, {
		name:  "revert",
		intro: "revert spec.version to " + s.upgradeVersion + " (the bad commit reverted in Git)",
		skip:  neverReadySkip,
		act:   func(ctx context.Context) error { return s.applyVersion(ctx, s.upgradeVersion) },
		done:  servingAt(s.upgradeVersion),
	}, {
		name: "crash-after-warm-up",
		intro: fmt.Sprintf("change spec.version to %s with bakeSeconds %d: its pods become ready, then restart %s later; the restart fails the bake and the operator restores %s",
			s.crashingVersion, s.bakeSeconds(), s.crashAfter, s.upgradeVersion),
		skip: crashSkip,
		act:  func(ctx context.Context) error { return s.apply(ctx, s.crashingVersion, s.bakeSeconds()) },
		done: func(snap snapshot.Snapshot) bool {
			return snap.Observed() && snap.Phase == v1alpha1.PhaseRolledBack && snap.ActiveVersion == s.upgradeVersion &&
				snap.KStatus == kstatus.FailedStatus && deploymentSettled(snap)
		},
		note: func(w watchStats) string {
			return fmt.Sprintf("Baking seen: %t; BakeFailed seen: %t", w.baking, w.bakeFailed)
		},
	}, {
		name:  "revert-again",
		intro: "revert spec.version to " + s.upgradeVersion + ", keeping bakeSeconds (it served already, so it is Ready at once)",
		skip:  crashSkip,
		act:   func(ctx context.Context) error { return s.apply(ctx, s.upgradeVersion, s.bakeSeconds()) },
		done:  servingAt(s.upgradeVersion),
	}, {
		name: "forgets-names",
		intro: fmt.Sprintf("declare spec.verification (POST /pii/extract with a synthetic note; the answer must find John Smith) and change spec.version to %s, whose server answers without the name: its pod never turns Ready, and the operator restores %s as soon as the pod failed the request, before the deadline",
			s.forgetfulVersion, s.upgradeVersion),
		skip: verifySkip,
		act: func(ctx context.Context) error {
			s.verification = localrun.GoldenRequest()
			return s.apply(ctx, s.forgetfulVersion, s.bakeSeconds())
		},
		done: func(snap snapshot.Snapshot) bool {
			return snap.Observed() && snap.Phase == v1alpha1.PhaseRolledBack && snap.ActiveVersion == s.upgradeVersion &&
				snap.KStatus == kstatus.FailedStatus && deploymentSettled(snap)
		},
		note: func(w watchStats) string {
			return fmt.Sprintf("VerificationFailed seen: %t; availableReplicas never below %d", w.verificationFailed, w.minAvailable)
		},
	}, {
		name:  "revert-verified",
		intro: "revert spec.version to " + s.upgradeVersion + ", keeping spec.verification: its pods answer correctly",
		skip:  verifySkip,
		act:   func(ctx context.Context) error { return s.apply(ctx, s.upgradeVersion, s.bakeSeconds()) },
		done:  servingAt(s.upgradeVersion),
	}, {
		name:  "manual-rollback",
		intro: fmt.Sprintf("annotate %s=%s: roll back by hand to a retained version", v1alpha1.RollbackToAnnotation, v1),
		act:   func(ctx context.Context) error { return s.annotateRollback(ctx, &v1) },
		done: func(snap snapshot.Snapshot) bool {
			return snap.Observed() && snap.Phase == v1alpha1.PhaseRolledBack && snap.ActiveVersion == v1 &&
				snap.Condition(v1alpha1.ReconcilingCondition) == "-" && deploymentSettled(snap)
		},
	}, {
		name:  "release",
		intro: fmt.Sprintf("remove %s: the desired spec (%s) serves again", v1alpha1.RollbackToAnnotation, s.upgradeVersion),
		act:   func(ctx context.Context) error { return s.annotateRollback(ctx, nil) },
		done:  servingAt(s.upgradeVersion),
	}}
}

// deploymentSettled is true when every replica runs the current template and
// is available.
func deploymentSettled(snap snapshot.Snapshot) bool {
	d := snap.Deployment
	return d != nil && d.Updated == d.Replicas && d.Available == d.Replicas && d.Ready == d.Replicas
}

// play runs the stages in order and stops at the first failure; the results
// list every stage, including those that did not run.
func (s *story) play(ctx context.Context) ([]result, error) {
	stages := s.stages()
	var results []result
	var failed error
	for i, st := range stages {
		r := result{stage: st.name}
		switch {
		case failed != nil:
			r.outcome = outcomeNotRun
		case st.skip != "":
			r.outcome, r.note = outcomeSkipped, st.skip
			s.p.line(st.name, fmt.Sprintf("== stage %d/%d skipped: %s", i+1, len(stages), st.skip))
		default:
			s.p.line(st.name, fmt.Sprintf("== stage %d/%d: %s", i+1, len(stages), st.intro))
			start := time.Now()
			final, stats, err := s.runStage(ctx, st)
			r.took, r.final = time.Since(start), final
			if err != nil {
				failed = fmt.Errorf("stage %s: %w", st.name, err)
				r.outcome, r.note = outcomeFailed, err.Error()
				break
			}
			r.outcome = outcomeOK
			if st.note != nil {
				r.note = st.note(stats)
			}
			s.p.line(st.name, fmt.Sprintf("done in %s", r.took.Round(10*time.Millisecond)))
		}
		results = append(results, r)
	}
	return results, failed
}

// runStage acts, then prints every change of the model's state until the
// stage's end state is reached. A watch on the target Deployment runs beside
// the display, so short-lived Deployment states (the operator reacts to
// ProgressDeadlineExceeded within milliseconds) are seen too.
func (s *story) runStage(ctx context.Context, st stage) (*snapshot.Snapshot, watchStats, error) {
	ctx, cancel := context.WithTimeout(ctx, s.deadline+s.stageTimeout)
	defer cancel()
	w := &deploymentWatch{stats: watchStats{minAvailable: -1}}
	var mw modelWatch
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		var wg sync.WaitGroup
		wg.Go(func() { s.watchDeployment(ctx, st.name, w) })
		wg.Go(func() { s.watchModel(ctx, &mw) })
		wg.Wait()
	}()
	// The watch must have ended before its stats are read.
	defer func() { cancel(); <-watching }()
	if err := st.act(ctx); err != nil {
		return nil, watchStats{}, err
	}
	start := time.Now()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last string
	var snap *snapshot.Snapshot
	var baking, bakeFailed, verificationFailed bool
	for {
		cur, err := s.observe(ctx)
		if err != nil && ctx.Err() == nil {
			return snap, watchStats{}, err
		}
		if err == nil {
			snap = &cur
			if line := cur.String(); line != last {
				s.p.line(st.name, fmt.Sprintf("+%5.2fs %s", time.Since(start).Seconds(), line))
				last = line
			}
			baking = baking || cur.Condition(v1alpha1.ReconcilingCondition) == "True/"+v1alpha1.BakingReason
			bakeFailed = bakeFailed || cur.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.BakeFailedReason
			verificationFailed = verificationFailed || cur.Condition(v1alpha1.DegradedCondition) == "True/"+v1alpha1.VerificationFailedReason
			if st.done(cur) {
				cancel()
				<-watching
				stats := w.stats
				stats.baking, stats.bakeFailed = baking || mw.baking, bakeFailed || mw.bakeFailed
				stats.verificationFailed = verificationFailed || mw.verificationFailed
				return snap, stats, nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return snap, watchStats{}, fmt.Errorf("end state not reached within %s; last state: %s", s.deadline+s.stageTimeout, last)
			}
			return snap, watchStats{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// deploymentWatch collects what watchDeployment saw.
type deploymentWatch struct {
	stats watchStats
}

// watchDeployment records every state of the target Deployment until ctx
// ends, and prints the moment it reports ProgressDeadlineExceeded.
func (s *story) watchDeployment(ctx context.Context, stage string, w *deploymentWatch) {
	s.watchNamed(ctx, &appsv1.DeploymentList{}, rollout.TargetName(s.model), func(o k8sruntime.Object) {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			return
		}
		if a := d.Status.AvailableReplicas; d.Status.ObservedGeneration > 0 && (w.stats.minAvailable < 0 || a < w.stats.minAvailable) {
			w.stats.minAvailable = a
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == v1alpha1.ProgressDeadlineExceededReason && !w.stats.deadlineExceeded {
				w.stats.deadlineExceeded = true
				s.p.line(stage, fmt.Sprintf("deployment %s reports Progressing=%s/%s; available %d of %d: the old pods keep serving",
					d.Name, c.Status, c.Reason, d.Status.AvailableReplicas, ptr.Deref(d.Spec.Replicas, 1)))
			}
		}
	})
}

// modelWatch collects what watchModel saw.
type modelWatch struct {
	baking, bakeFailed, verificationFailed bool
}

// watchModel records, from every state of the model until ctx ends,
// whether it said Reconciling=True/Baking or Degraded=True/BakeFailed.
func (s *story) watchModel(ctx context.Context, w *modelWatch) {
	s.watchNamed(ctx, &v1alpha1.OpenMedModelList{}, s.model.Name, func(o k8sruntime.Object) {
		m, ok := o.(*v1alpha1.OpenMedModel)
		if !ok {
			return
		}
		w.baking = w.baking || conditionIs(m, v1alpha1.ReconcilingCondition, v1alpha1.BakingReason)
		w.bakeFailed = w.bakeFailed || conditionIs(m, v1alpha1.DegradedCondition, v1alpha1.BakeFailedReason)
		w.verificationFailed = w.verificationFailed || conditionIs(m, v1alpha1.DegradedCondition, v1alpha1.VerificationFailedReason)
	})
}

// watchNamed hands every state the API server reports of the object of
// list's kind named name, in the model's namespace, to seen until ctx ends
// (a deletion excepted), watching again whenever a watch ends or cannot
// start yet (the namespace may not exist in the first stage).
func (s *story) watchNamed(ctx context.Context, list client.ObjectList, name string, seen func(k8sruntime.Object)) {
	for ctx.Err() == nil {
		wi, err := s.c.Watch(ctx, list, client.InNamespace(s.model.Namespace), client.MatchingFields{"metadata.name": name})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(pollInterval):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type != watch.Deleted {
				seen(ev.Object)
			}
		}
		wi.Stop()
	}
}

// conditionIs is true when m's condition typ is True with reason.
func conditionIs(m *v1alpha1.OpenMedModel, typ, reason string) bool {
	c := apimeta.FindStatusCondition(m.Status.Conditions, typ)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
}

// observe reads the model and its target.
func (s *story) observe(ctx context.Context) (snapshot.Snapshot, error) {
	m := &v1alpha1.OpenMedModel{}
	if err := s.c.Get(ctx, client.ObjectKeyFromObject(s.model), m); err != nil {
		return snapshot.Snapshot{}, err
	}
	d := &appsv1.Deployment{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: rollout.TargetName(m)}, d); err != nil {
		if !apierrors.IsNotFound(err) {
			return snapshot.Snapshot{}, err
		}
		d = nil
	}
	return snapshot.Observe(m, d)
}

// createTarget creates the model's namespace and the chart's objects the way
// `helm install --create-namespace` does: plain creates, as field manager
// helm. Objects left from an earlier run on a kept data directory or on a
// $KUBECONFIG cluster are kept as they are.
func (s *story) createTarget(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.model.Namespace}}
	if err := s.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Namespace %s: %w", ns.Name, err)
	}
	for _, obj := range s.target {
		obj = obj.DeepCopy()
		if err := s.c.Create(ctx, obj, client.FieldOwner(helmManager)); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
			s.p.line("first-rollout", fmt.Sprintf("%s %s/%s exists already; kept", obj.GetKind(), obj.GetNamespace(), obj.GetName()))
		}
	}
	return nil
}

// deadlineSeconds is the demo's progress deadline in whole seconds.
func (s *story) deadlineSeconds() int32 {
	return int32(max(1, s.deadline.Round(time.Second)/time.Second))
}

// bakeSeconds is the crash stage's bake in whole seconds.
func (s *story) bakeSeconds() int32 {
	return int32(max(1, s.bake.Round(time.Second)/time.Second))
}

// applyVersion applies the example model with version and no bake.
func (s *story) applyVersion(ctx context.Context, version string) error {
	return s.apply(ctx, version, 0)
}

// apply server-side applies the example model with version, the demo's
// progress deadline, bakeSeconds when not 0, and no status, as a GitOps
// tool applies what is in Git.
func (s *story) apply(ctx context.Context, version string, bakeSeconds int32) error {
	m := s.model.DeepCopy()
	m.Spec.Version = version
	m.Spec.RolloutStrategy.ProgressDeadlineSeconds = ptr.To(s.deadlineSeconds())
	if bakeSeconds > 0 {
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To(bakeSeconds)
	}
	m.Spec.Verification = s.verification.DeepCopy()
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("OpenMedModel"))
	content, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return err
	}
	delete(content, "status")
	unstructured.RemoveNestedField(content, "metadata", "creationTimestamp")
	body, err := json.Marshal(content)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: content}
	if err := s.c.Patch(ctx, u, client.RawPatch(types.ApplyPatchType, body),
		client.FieldOwner(gitOpsManager), client.ForceOwnership, client.FieldValidation("Strict")); err != nil {
		return fmt.Errorf("apply OpenMedModel %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// annotateRollback sets the rollback-to annotation to version, or removes it
// when version is nil, as `kubectl annotate` does.
func (s *story) annotateRollback(ctx context.Context, version *string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{v1alpha1.RollbackToAnnotation: version}},
	})
	if err != nil {
		return err
	}
	m := &v1alpha1.OpenMedModel{ObjectMeta: metav1.ObjectMeta{Namespace: s.model.Namespace, Name: s.model.Name}}
	if err := s.c.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotate OpenMedModel %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}
