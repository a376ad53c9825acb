package rollout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// bakeSeconds is the bake of the tests' desired version.
const bakeSeconds = 20

// bakeCluster is the fixture at v1, Ready, on the real clock (the pods'
// creation times are the API server's), with v2 set to bake and its rollout
// complete: the next pass starts the bake. It returns the two pods of v2,
// created before the bake began, Ready.
func bakeCluster(t *testing.T) (*cluster, []string) {
	t.Helper()
	c := v2Baking(t)
	p := c.pass()
	if p.ApplyDeployment == nil || p.ApplyDeployment.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"] == nil {
		t.Fatalf("the apply of a baking spec carries no bake label: %v", p.ApplyDeployment)
	}
	if got := c.dep().Spec.Template.Labels[v1alpha1.BakeLabel]; got != "true" {
		t.Fatalf("pod template label %s = %q", v1alpha1.BakeLabel, got)
	}
	pods := []string{c.createPod(v2), c.createPod(v2)}
	c.markReady()
	// The bake begins on the next second: creation times have a resolution
	// of a second, and these pods were created before it.
	c.now = time.Now().Truncate(time.Second).Add(time.Second)
	return c, pods
}

// v2Baking is the fixture at v1, Ready, on the real clock, with the spec
// changed to v2 with a bake: the next pass applies v2.
func v2Baking(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t)
	c.now = time.Now().Add(-time.Minute)
	c.readyAt(v1)
	c.editModel(func(m *v1alpha1.OpenMedModel) {
		m.Spec.Version = v2
		m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bakeSeconds)
	})
	return c
}

// createPod creates a pod of the fixture's Deployment with version's
// manifest hash, as its ReplicaSet would, Running and Ready.
func (c *cluster) createPod(version string) string {
	c.t.Helper()
	pod := c.templatePod(c.owner(), version)
	pod.Labels[v1alpha1.BakeLabel] = "true"
	if err := env.Client.Create(context.Background(), pod); err != nil {
		c.t.Fatal(err)
	}
	c.setPodStatus(pod.Name, func(p *corev1.Pod) {
		at := metav1.NewTime(time.Now())
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "openmed-service", Ready: true, Started: ptr.To(true), Image: "openmed:2.2.0", ImageID: "x",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}}
	})
	return pod.Name
}

// templatePod is a pod of the fixture's Deployment with the pod template
// annotations of version for the model owner ("namespace/name"), not yet
// created: its controller is the Deployment's ReplicaSet (replicaSetRef),
// as that ReplicaSet creates it.
func (c *cluster) templatePod(owner, version string) *corev1.Pod {
	c.t.Helper()
	m := c.obj.DeepCopy()
	m.Spec.Version = version
	n, err := Normalize(m)
	if err != nil {
		c.t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, GenerateName: "openmed-service-",
			Labels:          map[string]string{"app": "openmed-service", appsv1.DefaultDeploymentUniqueLabelKey: fixtureTemplateHash},
			Annotations:     map[string]string{v1alpha1.ModelResourceAnnotation: owner, v1alpha1.ManifestHashAnnotation: ManifestHash(n)},
			OwnerReferences: []metav1.OwnerReference{c.replicaSetRef()}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "openmed-service", Image: "openmed:2.2.0"}}},
	}
}

// fixtureTemplateHash is the pod-template-hash of the fixture's pods.
const fixtureTemplateHash = "7c9d8f6b5"

// replicaSetRef is the controller reference of the fixture Deployment's
// ReplicaSet of its pods, which it creates the first time as the
// Deployment controller does: named after the Deployment and the template
// hash, controlled by the Deployment's UID. The fixture runs no
// controllers, so the ReplicaSet creates no pod of its own.
func (c *cluster) replicaSetRef() metav1.OwnerReference {
	c.t.Helper()
	ctx := context.Background()
	dep := c.dep()
	name := dep.Name + "-" + fixtureTemplateHash
	rs := &appsv1.ReplicaSet{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, rs)
	if apierrors.IsNotFound(err) {
		labels := map[string]string{"app": "openmed-service", appsv1.DefaultDeploymentUniqueLabelKey: fixtureTemplateHash}
		rs = &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: dep.Spec.Template.Spec}},
		}
		err = env.Client.Create(ctx, rs)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
}

// setPodStatus plays the kubelet for a pod.
func (c *cluster) setPodStatus(name string, mutate func(*corev1.Pod)) {
	c.t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, p); err != nil {
		c.t.Fatal(err)
	}
	mutate(p)
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		c.t.Fatal(err)
	}
}

// restart reports a restart of the pod's container that ended at, with
// reason (Error, OOMKilled).
func (c *cluster) restart(pod, reason string, at time.Time) {
	c.setPodStatus(pod, func(p *corev1.Pod) {
		s := &p.Status.ContainerStatuses[0]
		s.RestartCount++
		s.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: reason,
			StartedAt: metav1.NewTime(at.Add(-time.Minute)), FinishedAt: metav1.NewTime(at)}
	})
}

// TestBake covers the bake guard: what starts, ends, fails and does not
// fail the bake of a version, each pass on the real API server's objects.
func TestBake(t *testing.T) {
	t.Run("the completed rollout bakes: not Ready, not retained, one timer", func(t *testing.T) {
		c, _ := bakeCluster(t)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut || !conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) || p.Status.BakeStartedAt == nil {
			t.Fatalf("baking: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		if p.Status.History[0].Version != v1 || p.Status.ActiveVersion != v1 {
			t.Errorf("a baking version is retained: history %s active %s", p.Status.History[0].Version, p.Status.ActiveVersion)
		}
		if p.RequeueAfter < bakeSeconds*time.Second || p.RequeueAfter > (bakeSeconds+1)*time.Second || p.Backstop || p.Timer != p.RequeueAfter {
			t.Errorf("requeue after %v (backstop %v), want the end of the bake", p.RequeueAfter, p.Backstop)
		}
		if got := kstatusOf(t, c.obj, p.Status); got != "InProgress" {
			t.Errorf("kstatus %s", got)
		}
		if m := kstatusMessage(p.Status); !strings.HasPrefix(m, "Baking "+v2+" on Deployment openmed-service until ") {
			t.Errorf("message %q", m)
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.BakingReason})
		// A pass before the end changes nothing.
		c.now = c.now.Add(5 * time.Second)
		if p2 := c.pass(); p2.Status.Phase != v1alpha1.PhaseRollingOut || len(p2.Events) != 0 {
			t.Errorf("mid-bake pass: %s events %v", p2.Status.Phase, eventReasons(p2.Events))
		}
	})

	t.Run("the plan watches the pods only while it judges a bake", func(t *testing.T) {
		c := v2Baking(t)
		// The apply of v2, and the passes while its Deployment rolls: the
		// Deployment's events tell when it completes, the pods' need not.
		if p := c.pass(); p.ApplyDeployment == nil || p.WatchesPods {
			t.Fatalf("the apply's pass: apply %v, watches pods %v", p.ApplyDeployment != nil, p.WatchesPods)
		}
		c.createPod(v2)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.WatchesPods {
			t.Fatalf("rolling: phase %s, watches pods %v", p.Status.Phase, p.WatchesPods)
		}
		// Complete: the bake judges the pods.
		c.markReady()
		c.now = time.Now().Truncate(time.Second).Add(time.Second)
		p := c.pass()
		if !conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) || !p.WatchesPods {
			t.Fatalf("baking: %v, watches pods %v", condSummary(p.Status), p.WatchesPods)
		}
		// Ready: nothing reads them.
		c.now = c.now.Add(bakeSeconds * time.Second)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.WatchesPods {
			t.Fatalf("after the bake: phase %s, watches pods %v", p.Status.Phase, p.WatchesPods)
		}
		if p := c.pass(); p.WatchesPods {
			t.Error("a Ready pass watches the pods")
		}
	})

	// A pod counts for the model only through its controller chain: a
	// copy of the pod template in another tenant's namespace (a Deployment
	// of the same name, whose ReplicaSet has the same name and hash), or a
	// pod of the model's namespace whose controller reference names the
	// target's ReplicaSet with another UID, fails no bake however it
	// crashes; the real pod's crash still does.
	t.Run("pods that only claim to belong fail no bake", func(t *testing.T) {
		c, pods := bakeCluster(t)
		if p := c.pass(); p.Status.BakeStartedAt == nil {
			t.Fatalf("not baking: %v", condSummary(p.Status))
		}
		crashed := func(f *cluster, pod *corev1.Pod) corev1.Pod {
			t.Helper()
			pod.Labels[v1alpha1.BakeLabel] = "true"
			if err := env.Client.Create(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			f.setPodStatus(pod.Name, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "openmed-service", Image: "openmed:2.2.0", ImageID: "x",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
			})
			f.restart(pod.Name, "OOMKilled", time.Now())
			out := corev1.Pod{}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &out); err != nil {
				t.Fatal(err)
			}
			return out
		}
		other := newCluster(t)
		copied := crashed(other, other.templatePod(c.owner(), v2))
		forgedRef := c.templatePod(c.owner(), v2)
		forgedRef.OwnerReferences[0].UID = "0e7d1c4b-forged"
		crashed(c, forgedRef)
		c.now = c.now.Add(time.Second)
		obs := c.observed()
		// As a store that files pods by their owner annotation hands them
		// out, the copy in the other namespace included.
		obs.Pods = append(obs.Pods, copied)
		if len(obs.Pods) != 4 {
			t.Fatalf("%d pods observed, want the version's 2, the copy and the forged reference", len(obs.Pods))
		}
		p := decideWith(t, c.obj, obs, c.opts)
		if p.BakeFailure != "" || p.Status.Phase != v1alpha1.PhaseRollingOut ||
			!conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) {
			t.Fatalf("a pod that only claims to belong changed the bake: failure %q, %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
		if sel := BakePodSelector(nil, obs.Pods[len(obs.Pods)-1:], c.ns, obs.ReplicaSets, p.Status.ManifestHash); sel != nil {
			t.Errorf("the copy in another namespace is read at the bake's end: %s", sel)
		}
		c.restart(pods[0], "OOMKilled", time.Now())
		obs = c.observed()
		obs.Pods = append(obs.Pods, copied)
		if p := decideWith(t, c.obj, obs, c.opts); p.BakeFailure != BakeOOMKilled {
			t.Fatalf("the version's own pod crashed: failure %q, %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
	})

	// Found by the fault suite under load: the pods crashed a second
	// after Ready, and the pass that began the bake ran after the crash. A
	// crash is the version's whenever it came; only a reset's retry leaves
	// the crashes from before it out.
	t.Run("a crash between Ready and the pass that begins the bake fails it", func(t *testing.T) {
		c, pods := bakeCluster(t)
		c.restart(pods[0], "OOMKilled", c.now.Add(-500*time.Millisecond))
		p := c.pass()
		if p.BakeFailure != BakeOOMKilled || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("the crashed version: failure %q phase %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
		if p.WatchesPods {
			t.Error("the pass that failed the bake watches the pods")
		}
	})

	t.Run("the bake ends: Ready and retained", func(t *testing.T) {
		c, _ := bakeCluster(t)
		c.pass()
		c.now = c.now.Add(bakeSeconds * time.Second)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseReady || p.Status.History[0].Version != v2 || p.Status.BakeStartedAt != nil {
			t.Fatalf("after the bake: %s history %s %v", p.Status.Phase, p.Status.History[0].Version, condSummary(p.Status))
		}
		assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.RolloutSucceededReason})
	})

	// Found by the fault suite: the pod store's watch was broken when a
	// pod of the version restarted, and the pass at the end of the bake
	// judged the pods it still had. The pass that ends a bake judges the
	// pods read from the API server.
	t.Run("a bake ends only on pods read from the API server", func(t *testing.T) {
		c, pods := bakeCluster(t)
		c.pass()
		stale := c.observed().Pods // as a store whose watch broke keeps them
		c.now = c.now.Add(bakeSeconds * time.Second)
		c.restart(pods[0], "Error", c.now.Add(-time.Second))
		c.refresh()
		obs := c.observed()
		obs.Pods, obs.PodsRead = stale, false
		p := decideWith(t, c.obj, obs, c.opts)
		if !p.ReadPods || p.Status.Phase != v1alpha1.PhaseRollingOut || p.Status.BakeStartedAt == nil || p.BakeFailure != "" ||
			!conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) {
			t.Fatalf("the bake ended on the store's pods: read pods %v, %s %v", p.ReadPods, p.Status.Phase, condSummary(p.Status))
		}
		if len(p.Events) != 0 {
			t.Errorf("events before the read: %v", eventReasons(p.Events))
		}
		// What the reconciler reads: the version's pods by the selector,
		// not those of another Deployment of the same pod template (the
		// same pod-template-hash), which sort first.
		other := c.templatePod("elsewhere/other-model", v2)
		other.GenerateName = ""
		other.Name = "a-other-deployment"
		other.Labels = map[string]string{"app": "other", v1alpha1.BakeLabel: "true", appsv1.DefaultDeploymentUniqueLabelKey: "7c9d8f6b5"}
		if err := env.Client.Create(context.Background(), other); err != nil {
			t.Fatal(err)
		}
		target, err := metav1.LabelSelectorAsSelector(c.dep().Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		sel := BakePodSelector(target, stale, c.ns, obs.ReplicaSets, p.Status.ManifestHash)
		if sel == nil {
			t.Fatal("no selector for the version's pods")
		}
		var read corev1.PodList
		if err := env.Client.List(context.Background(), &read, client.InNamespace(c.ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			t.Fatal(err)
		}
		if len(read.Items) != len(pods) {
			t.Fatalf("selector %s read %d pods, want the version's %d", sel, len(read.Items), len(pods))
		}
		obs.Pods, obs.PodsRead = read.Items, true
		p = decideWith(t, c.obj, obs, c.opts)
		if p.ReadPods || p.BakeFailure != BakeContainerRestarted || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("on the pods read: read pods %v, failure %q, %s %v", p.ReadPods, p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
		if BakePodSelector(target, stale, c.ns, []types.UID{"another-replicaset"}, p.Status.ManifestHash) != nil ||
			BakePodSelector(target, stale, "elsewhere", obs.ReplicaSets, p.Status.ManifestHash) != nil ||
			BakePodSelector(target, stale, c.ns, obs.ReplicaSets, "sha256:other") != nil {
			t.Error("a selector for pods of another target, namespace or version")
		}
	})

	// A model that moved to another shard mid-bake: its pods carry the
	// old shard's label, and the new shard's pod store does not hold
	// them. Every pass of the bake reads them from the API server and
	// looks again on a timer (no pod event wakes it); it fails and ends
	// the bake as on the store's pods.
	t.Run("pods the store cannot see are read in every pass of the bake", func(t *testing.T) {
		c, pods := bakeCluster(t)
		hidden := func() Observed {
			obs := c.observed()
			obs.Pods, obs.PodsRead, obs.PodsHidden = nil, false, true
			return obs
		}
		c.refresh()
		p := decideWith(t, c.obj, hidden(), c.opts)
		if !p.ReadPods {
			t.Fatalf("a pass on hidden pods does not read them: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		target, err := metav1.LabelSelectorAsSelector(c.dep().Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var read corev1.PodList
		if err := env.Client.List(context.Background(), &read, client.InNamespace(c.ns), client.MatchingLabelsSelector{Selector: TargetBakePodSelector(target)}); err != nil {
			t.Fatal(err)
		}
		if len(read.Items) != len(pods) {
			t.Fatalf("selector %s read %d pods, want the version's %d", TargetBakePodSelector(target), len(read.Items), len(pods))
		}
		obs := hidden()
		obs.Pods, obs.PodsRead = read.Items, true
		p = decideWith(t, c.obj, obs, c.opts)
		if p.ReadPods || p.Status.BakeStartedAt == nil || !conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) {
			t.Fatalf("the bake on pods read: read pods %v, %s %v", p.ReadPods, p.Status.Phase, condSummary(p.Status))
		}
		if p.Timer <= 0 || p.Timer > HiddenPodsRecheck {
			t.Errorf("timer %v, want a look again within %v", p.Timer, HiddenPodsRecheck)
		}
		// The same pods, as the store of an unsharded operator sees
		// them: the timer is the end of the bake.
		obs.PodsHidden = false
		if q := decideWith(t, c.obj, obs, c.opts); q.Timer <= HiddenPodsRecheck {
			t.Errorf("timer %v with the pods in the store, want the end of the bake", q.Timer)
		}
		// A restart read so fails the bake.
		c.writeStatus(p.Status)
		c.now = c.now.Add(5 * time.Second)
		c.restart(pods[0], "OOMKilled", c.now.Add(-time.Second))
		c.refresh()
		if err := env.Client.List(context.Background(), &read, client.InNamespace(c.ns), client.MatchingLabelsSelector{Selector: TargetBakePodSelector(target)}); err != nil {
			t.Fatal(err)
		}
		obs = hidden()
		obs.Pods, obs.PodsRead = read.Items, true
		if p := decideWith(t, c.obj, obs, c.opts); p.BakeFailure != BakeOOMKilled || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("a restart on hidden pods: failure %q, %s", p.BakeFailure, p.Status.Phase)
		}
	})

	for _, tc := range []struct{ termination, reason string }{
		{"Error", BakeContainerRestarted},
		{"OOMKilled", BakeOOMKilled},
	} {
		t.Run(fmt.Sprintf("a %s during the bake rolls back and is never applied again", tc.reason), func(t *testing.T) {
			c, pods := bakeCluster(t)
			c.pass()
			c.now = c.now.Add(5 * time.Second)
			c.restart(pods[1], tc.termination, c.now.Add(-time.Second))
			p := c.pass()
			if p.BakeFailure != tc.reason || p.Status.Phase != v1alpha1.PhaseRolledBack || p.Status.FailedSpecHash != p.Status.DesiredSpecHash {
				t.Fatalf("bake failure %q, phase %s, %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
			}
			if !conditionIs(&p.Status, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.BakeFailedReason) {
				t.Errorf("Degraded: %v", condSummary(p.Status))
			}
			assertStrings(t, "events", eventReasons(p.Events), []string{v1alpha1.RolloutFailedReason, v1alpha1.RollbackStartedReason})
			if !strings.Contains(p.Events[0].Message, tc.reason) {
				t.Errorf("event %q does not say why", p.Events[0].Message)
			}
			c.pass() // applies the rollback
			if c.pointedVersion() != v1 {
				t.Fatalf("rollback not applied: %s", c.pointedVersion())
			}
			c.markReady()
			for i := 0; i < 3; i++ {
				if p := c.pass(); c.pointedVersion() != v1 || p.Status.History[0].Version != v1 {
					t.Fatalf("pass %d: pointed %s, history %s", i, c.pointedVersion(), p.Status.History[0].Version)
				}
			}
		})
	}

	t.Run("the status of the apply was lost and the Deployment completed at once: the bake still ends", func(t *testing.T) {
		// The pass that applied v2 lost its status write (the status still
		// records v1 applied), and the Deployment controller finished the
		// rollout before the next pass: that pass goes straight to the bake.
		c := v2Baking(t)
		c.passLosingStatus()
		c.createPod(v2)
		c.markReady()
		c.now = time.Now().Truncate(time.Second).Add(time.Second)
		p := c.pass()
		if p.Status.BakeStartedAt == nil || !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) {
			t.Fatalf("baking: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		started := p.Status.BakeStartedAt.Time
		c.now = c.now.Add(bakeSeconds / 2 * time.Second)
		if p := c.pass(); p.Status.BakeStartedAt == nil || !p.Status.BakeStartedAt.Time.Equal(started) {
			t.Fatalf("a pass during the bake began it again: started %v, now %v", started, p.Status.BakeStartedAt)
		}
		c.now = started.Add(bakeSeconds * time.Second)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.History[0].Version != v2 {
			t.Fatalf("after the bake: %s history %s %v", p.Status.Phase, p.Status.History[0].Version, condSummary(p.Status))
		}
	})

	t.Run("a restart during the bake fails it", func(t *testing.T) {
		// A crash before the pass that begins the bake fails it too (the
		// subtest above); only a reset's retry leaves out the crashes
		// from before the reset (TestResetAfterAFailedFirstVersionBake).
		c, pods := bakeCluster(t)
		if p := c.pass(); p.BakeFailure != "" || p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("the bake: failure %q phase %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
		c.now = c.now.Add(2 * time.Second)
		c.restart(pods[1], "Error", c.now.Add(-time.Second))
		if p := c.pass(); p.BakeFailure != BakeContainerRestarted || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("a restart during the bake: failure %q phase %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("a pod that stays unready past the grace fails the bake", func(t *testing.T) {
		c, pods := bakeCluster(t)
		c.pass()
		c.now = c.now.Add(5 * time.Second)
		unready := metav1.NewTime(c.now.Add(-time.Second))
		c.setPodStatus(pods[0], func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: unready}}
		})
		p := c.pass()
		if p.BakeFailure != "" || p.Status.Phase != v1alpha1.PhaseRollingOut || p.RequeueAfter > BakeUnreadyGrace {
			t.Fatalf("within the grace: failure %q phase %s requeue %v", p.BakeFailure, p.Status.Phase, p.RequeueAfter)
		}
		c.now = c.now.Add(BakeUnreadyGrace)
		if p := c.pass(); p.BakeFailure != BakePodUnready || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("past the grace: failure %q phase %s", p.BakeFailure, p.Status.Phase)
		}
	})

	t.Run("a scale-up, another template and pods being deleted do not fail the bake", func(t *testing.T) {
		c, pods := bakeCluster(t)
		start := c.pass().Status.BakeStartedAt.Time
		c.now = c.now.Add(5 * time.Second)
		// A restarted pod of the old template, and a pod of the new one
		// being drained whose container was killed.
		old := c.createPod(v1)
		c.restart(old, "Error", c.now)
		c.restart(pods[0], "Error", c.now)
		if err := env.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: pods[0]}},
			client.GracePeriodSeconds(30)); err != nil {
			t.Fatal(err)
		}
		// A pod of the scale-up, created during the bake, still starting.
		time.Sleep(time.Until(start))
		c.now = time.Now()
		started := c.createPod(v2)
		c.setPodStatus(started, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(c.now)}}
		})
		c.now = c.now.Add(BakeUnreadyGrace + time.Second)
		if p := c.pass(); p.BakeFailure != "" || p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("failed on pods that do not count: %q %s", p.BakeFailure, p.Status.Phase)
		}
	})

	t.Run("turning bakeSeconds on or off rolls nothing; the next version drops the label", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		generation := c.dep().Generation
		setBake := func(seconds int32) {
			c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RolloutStrategy.BakeSeconds = ptr.To(seconds) })
			for i := 0; i < 2; i++ {
				if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || generation != c.dep().Generation {
					t.Fatalf("bakeSeconds=%d: phase %s, Deployment generation %d -> %d", seconds, p.Status.Phase, generation, c.dep().Generation)
				}
			}
		}
		setBake(bakeSeconds) // the serving version has served: nothing to bake
		if _, ok := c.dep().Spec.Template.Labels[v1alpha1.BakeLabel]; ok {
			t.Fatal("the bake label was added to the serving template")
		}
		c.setVersion(v2)
		c.pass()
		if c.dep().Spec.Template.Labels[v1alpha1.BakeLabel] != "true" {
			t.Fatal("a baking version has no bake label")
		}
		c.markReady()
		generation = c.dep().Generation
		setBake(0) // the baking version is Ready at once, its label stays
		if c.dep().Spec.Template.Labels[v1alpha1.BakeLabel] != "true" {
			t.Fatal("turning the bake off removed the label (a roll)")
		}
		c.setVersion(v3)
		c.pass()
		if _, ok := c.dep().Spec.Template.Labels[v1alpha1.BakeLabel]; ok {
			t.Error("the next template kept the bake label without a bake")
		}
	})

	t.Run("without bakeSeconds a completed rollout is Ready at once and the template has no bake label", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		if _, ok := c.dep().Spec.Template.Labels[v1alpha1.BakeLabel]; ok {
			t.Fatal("bake label without bakeSeconds")
		}
	})
}

// TestResetAfterAFailedFirstVersionBake: the first version of a model
// fails its bake and nothing is retained to roll back to, so the failed
// pointer stays and its pods keep the container's lastState. A reset
// (reconcile.fluxcd.io/resetAt) bakes the version again: the termination
// from before the reset is the failed bake's, not the retry's, so the
// retried bake runs its full time and passes on healthy pods (issue 26,
// item 4; before, it failed in the pass that started it).
func TestResetAfterAFailedFirstVersionBake(t *testing.T) {
	c := newCluster(t)
	c.now = time.Now().Add(-time.Minute)
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bakeSeconds) })
	c.pass()
	pods := []string{c.createPod(v1), c.createPod(v1)}
	c.markReady()
	c.now = time.Now().Truncate(time.Second).Add(time.Second)
	if p := c.pass(); !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) {
		t.Fatalf("the first version does not bake: %v", condSummary(p.Status))
	}
	c.now = c.now.Add(2 * time.Second)
	c.restart(pods[0], "Error", c.now.Add(-time.Second))
	if p := c.pass(); p.BakeFailure != BakeContainerRestarted || p.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("the first version's bake: failure %q phase %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
	}
	// A later pass over the held spec says the same: the bake failed (not
	// "did not become available", which the Deployment contradicts).
	c.now = c.now.Add(time.Second)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed ||
		!conditionIs(&p.Status, v1alpha1.DegradedCondition, metav1.ConditionTrue, v1alpha1.BakeFailedReason) {
		t.Fatalf("the pass after the failed bake: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	c.now = c.now.Add(5 * time.Second)
	c.annotate(v1alpha1.ResetRequestAnnotation, c.now.Format(time.RFC3339))
	c.pass()
	p := c.pass()
	if p.BakeFailure != "" || !conditionIs(&p.Status, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.BakingReason) || p.Status.BakeStartedAt == nil {
		t.Fatalf("the retry does not bake: failure %q %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
	}
	started := p.Status.BakeStartedAt.Time
	c.now = started.Add(bakeSeconds / 2 * time.Second)
	if p := c.pass(); p.BakeFailure != "" || p.Status.Phase != v1alpha1.PhaseRollingOut {
		t.Fatalf("halfway through the retried bake: failure %q phase %s", p.BakeFailure, p.Status.Phase)
	}
	c.now = started.Add(bakeSeconds * time.Second)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || len(p.Status.History) != 1 || p.Status.History[0].Version != v1 {
		t.Fatalf("after the retried bake: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	// The restart from before the reset is still on the pod.
	if c.podRestarts(pods[0]) != 1 {
		t.Fatal("the fixture lost the restart it judges")
	}
}

// podRestarts is the restart count of the pod's model container.
func (c *cluster) podRestarts(name string) int32 {
	c.t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.ns, Name: name}, p); err != nil {
		c.t.Fatal(err)
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// TestBakeGuardHolds: the guard cannot be switched off by accident and
// never passes on nothing (issue 26, items 6 and 9).
func TestBakeGuardHolds(t *testing.T) {
	t.Run("bakeSeconds set while the rollout is in flight: the label goes on and the version bakes", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.setVersion(v2)
		c.pass()
		c.markRolling()
		if _, ok := c.dep().Spec.Template.Labels[v1alpha1.BakeLabel]; ok {
			t.Fatal("a version without a bake has the label")
		}
		c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bakeSeconds) })
		c.pass()
		if c.dep().Spec.Template.Labels[v1alpha1.BakeLabel] != "true" {
			t.Fatal("bakeSeconds set mid-rollout: the template has no bake label, the pod store sees no pod")
		}
	})

	t.Run("the label stripped during the bake is put back", func(t *testing.T) {
		c, _ := bakeCluster(t)
		c.pass()
		c.editDeployment("kubectl-edit", func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, v1alpha1.BakeLabel) })
		c.pass()
		if c.dep().Spec.Template.Labels[v1alpha1.BakeLabel] != "true" {
			t.Fatal("the stripped bake label was not restored")
		}
	})

	t.Run("replicas 0: the bake begins only once a pod of the version serves", func(t *testing.T) {
		c := v2Baking(t)
		c.pass()
		c.markReady() // the rollout completed, with no pod (or none the store sees)
		c.now = time.Now()
		p := c.pass()
		if p.Status.BakeStartedAt != nil || !conditionIs(&p.Status, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, v1alpha1.BakingReason) {
			t.Fatalf("no pod: bake started %v, %v", p.Status.BakeStartedAt, condSummary(p.Status))
		}
		if m := kstatusMessage(p.Status); !strings.Contains(m, "begins once a pod of it is Ready") {
			t.Errorf("message %q does not say why it waits", m)
		}
		// Ready keeps the fixed message (the scale test counts this
		// state's extra status write by it).
		if r := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.ReadyCondition); r == nil || r.Message != MsgBakingNoPods {
			t.Errorf("Ready = %+v, want the message %q", r, MsgBakingNoPods)
		}
		c.now = c.now.Add(10 * bakeSeconds * time.Second)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || p.Status.History[0].Version != v1 {
			t.Fatalf("a bake of no pod passed: %s history %s", p.Status.Phase, p.Status.History[0].Version)
		}
		// Scaled up (KEDA): the bake runs its full time from the first pod.
		c.createPod(v2)
		c.now = time.Now().Truncate(time.Second).Add(time.Second)
		p = c.pass()
		if p.Status.BakeStartedAt == nil || !p.Status.BakeStartedAt.Time.Equal(c.now) {
			t.Fatalf("the bake did not begin with the pod: %v", p.Status.BakeStartedAt)
		}
		c.now = c.now.Add(bakeSeconds * time.Second)
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.History[0].Version != v2 {
			t.Fatalf("after the bake: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("every pod of the version gone at the end of the bake: not Ready", func(t *testing.T) {
		c, pods := bakeCluster(t)
		start := c.pass().Status.BakeStartedAt.Time
		for _, name := range pods {
			if err := env.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}},
				client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
		c.now = start.Add(bakeSeconds * time.Second)
		p := c.pass()
		if p.Status.Phase != v1alpha1.PhaseRollingOut {
			t.Fatalf("a bake whose pods are gone passed: %s %v", p.Status.Phase, condSummary(p.Status))
		}
		if m := kstatusMessage(p.Status); !strings.Contains(m, "no pod of it is Ready") {
			t.Errorf("message %q does not say why it waits", m)
		}
	})

	t.Run("a retained older version (history[1]) does not bake again", func(t *testing.T) {
		c := newCluster(t)
		c.readyAt(v1)
		c.readyAt(v2)
		c.editModel(func(m *v1alpha1.OpenMedModel) {
			m.Spec.Version = v1
			m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](bakeSeconds)
		})
		c.pass()
		c.markReady()
		if p := c.pass(); p.Status.Phase != v1alpha1.PhaseReady || p.Status.ActiveVersion != v1 {
			t.Fatalf("going back to a retained version: %s %v", p.Status.Phase, condSummary(p.Status))
		}
	})

	t.Run("a crash while the Deployment is paused fails the bake now", func(t *testing.T) {
		c, pods := bakeCluster(t)
		c.pass()
		c.editDeployment("kubectl-rollout", func(d *appsv1.Deployment) { d.Spec.Paused = true })
		c.markScaling(1) // the crashed pod is not available
		c.now = c.now.Add(5 * time.Second)
		c.restart(pods[1], "Error", c.now.Add(-time.Second))
		if p := c.pass(); p.BakeFailure != BakeContainerRestarted || p.Status.Phase != v1alpha1.PhaseRolledBack {
			t.Fatalf("a crash while paused: failure %q, %s %v", p.BakeFailure, p.Status.Phase, condSummary(p.Status))
		}
	})
}

// TestRetryDeadlineIsTheRollouts: a reset retries a failed first version in
// place; once its rollout completed and it bakes, the retry's progress
// deadline is over: a pod replaced during the bake (a drain) is no
// RolloutFailed (issue 26, item 8).
func TestRetryDeadlineIsTheRollouts(t *testing.T) {
	c := newCluster(t)
	c.now = time.Now().Add(-time.Minute)
	c.editModel(func(m *v1alpha1.OpenMedModel) { m.Spec.RolloutStrategy.BakeSeconds = ptr.To[int32](3600) })
	c.pass()
	pods := []string{c.createPod(v1), c.createPod(v1)}
	c.markReady()
	c.now = time.Now().Truncate(time.Second).Add(time.Second)
	c.pass()
	c.now = c.now.Add(2 * time.Second)
	c.restart(pods[0], "Error", c.now.Add(-time.Second))
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("the first version's bake: %s %v", p.Status.Phase, condSummary(p.Status))
	}
	c.now = c.now.Add(5 * time.Second)
	c.annotate(v1alpha1.ResetRequestAnnotation, c.now.Format(time.RFC3339))
	c.pass()
	if p := c.pass(); p.Status.BakeStartedAt == nil {
		t.Fatalf("the retry does not bake: %v", condSummary(p.Status))
	}
	// Past the retry's deadline, a drain replaces a pod: the Deployment is
	// incomplete for a moment.
	c.now = c.now.Add(time.Duration(ptr.Deref(c.obj.Spec.RolloutStrategy.ProgressDeadlineSeconds, 600)) * time.Second * 2)
	c.markScaling(1)
	if p := c.pass(); p.Status.Phase != v1alpha1.PhaseRollingOut || len(p.Events) != 0 {
		t.Fatalf("a drain during the retried bake: %s events %v %v", p.Status.Phase, eventReasons(p.Events), condSummary(p.Status))
	}
}
