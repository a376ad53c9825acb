package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// fluxFleetRequeue is kustomize-controller's --requeue-dependency in the
// suite: how often a ring held by its dependency tries again.
const fluxFleetRequeue = 5 * time.Second

// fleetHeldReconciliations is how many times a held ring tries again while
// the test watches its Deployment stay as it was.
const fleetHeldReconciliations = 6

// TestFleetFlux rolls model versions through three rings with Flux's real
// kustomize-controller and notification-controller and the published
// examples/fleet/flux: ring 1 on the suite's cluster, rings 2 and 3 on a
// second control plane (spec.kubeConfig), each ring dependsOn the one
// before, all from one GitRepository. A healthy version committed once
// reaches ring 1, bakes there, then ring 2, then ring 3, each ring's
// Deployment changing only after the ring before retained the version
// after its bake; ring 1's model is Progressing in every health face from
// the first stored version of the new spec until its bake ended. A version
// that fails its bake in ring 1 is rolled back there; rings 2 and 3 wait
// on ring 1 (DependencyNotReady) and their Deployments stay as they were
// over several of their reconciliations; the failure is delivered once. A
// revert resumes the fleet.
func TestFleetFlux(t *testing.T) {
	requireCluster(t)
	began := time.Now()
	run := figures.FleetRun{Engine: "Flux", BakeSeconds: fleetBakeSeconds, HeldIntervals: fleetHeldReconciliations,
		Interval: "kustomize-controller's `--requeue-dependency`"}
	var waves []wave
	var committedAt time.Time
	const operator = "fleet-flux"
	rem, rings := startFleet(t, operator)
	rig := startFlux(t)
	ctx := context.Background()

	// The second cluster's kubeconfig, as a user puts it in flux-system,
	// for rings 2 and 3 (two namespaces of it here, two clusters in the
	// example).
	kubeconfig, err := os.ReadFile(rem.cluster.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ring-2-kubeconfig", "ring-3-kubeconfig"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fluxNamespace}, Data: map[string][]byte{"value": kubeconfig}}
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), s) })
	}
	for _, u := range fleetFluxObjects(t, "alerts.yaml", rig.receiver.url, nil) {
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
	}

	src := startNamedGitSource(t, "openmed-fleet")
	rev := src.publish(t, fleetFiles(t, v1, operator))
	src.create(t)
	kss := fleetFluxObjects(t, "rings.yaml", "", rings)
	for _, u := range kss {
		createdKustomization(t, u)
	}
	for _, r := range rings {
		waitRingServing(t, r, v1, 3*time.Minute)
	}
	for _, u := range kss {
		rig.waitKustomization(t, u.GetName(), "Ready at "+rev, func(ks *unstructured.Unstructured) bool {
			return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev
		})
	}
	ringKs := func(i int) string { return kss[i].GetName() }

	// A healthy version, committed once, goes ring by ring.
	t.Run("healthy-version-ring-by-ring", func(t *testing.T) {
		w := watchFleet(t, rings)
		ksRec := record(t, k8s, kustomizationGVK, fluxNamespace)
		faces := startFaceWatch(t, rings[0].ns)
		before := fleetModel(t, rings[0]).Generation
		committed := time.Now()
		rev = src.publish(t, fleetFiles(t, v2, operator))
		for _, r := range rings {
			waitRingServing(t, r, v2, 4*time.Minute)
		}
		rig.waitKustomization(t, ringKs(2), "Ready at "+rev, func(ks *unstructured.Unstructured) bool {
			return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev
		})
		committedAt, waves = committed, w.waves(t, hashOf(t, v2), v2)
		// Ring 2 (the second control plane) was attempted only after ring
		// 1's model retained v2: both stored by the first API server.
		retainedBefore(t, w, 0, v2, ksRec, ringKs(1), "attempted "+rev, func(u *unstructured.Unstructured) bool { return lastAttempted(u) == rev })
		reportWaves(t, "flux", committed, waves)
		// Ring 1's model read right after kustomize-controller applied the
		// new spec, and every version after it until the bake ended: never
		// a Healthy from the previous version.
		m := fleetModel(t, rings[0])
		if n := progressingUntilBaked(t, faces.stop(t, m.ResourceVersion), before, v2); n < 2 {
			t.Errorf("judged %d versions of ring 1's model after the spec changed, want the rollout's and the bake's", n)
		}
		// While ring 1 rolled out and baked, ring 2 said it waits on it.
		want := fmt.Sprintf("dependency '%s/%s'", fluxNamespace, ringKs(0))
		if _, ok := ksRec.first(ringKs(1), func(u *unstructured.Unstructured) bool {
			c := readyCondition(u)
			return c.Status == metav1.ConditionFalse && c.Reason == "DependencyNotReady" && strings.Contains(c.Message, want)
		}); !ok {
			t.Errorf("%s never said it waits on %s (DependencyNotReady, %q)", ringKs(1), ringKs(0), want)
		}
	})
	if t.Failed() {
		return
	}

	// A version that fails its bake in ring 1 never reaches rings 2 and 3.
	t.Run("failed-bake-halts-the-fleet", func(t *testing.T) {
		w := watchFleet(t, rings)
		committed := time.Now()
		rev = src.publish(t, fleetFiles(t, crashingVersion, operator))
		r1 := rings[0]
		waitRolledBack(t, r1, v2)
		waitRingFailed(t, rig, ringKs(0), rev, r1)
		failed := time.Now()
		// Rings 2 and 3 try again every fluxFleetRequeue; their
		// Deployments stay as they were all along.
		time.Sleep(fleetHeldReconciliations * fluxFleetRequeue)
		checkHeld(t, w, 1, v2)
		for i := 1; i < 3; i++ {
			checkWaitsOn(t, rig, ringKs(i), ringKs(i-1), rev)
		}
		// The failure is delivered once; the held rings' info events are
		// not errors.
		ring1Failed := func(e eventv1.Event) bool {
			return involved(e) == "Kustomization/"+fluxNamespace+"/"+ringKs(0) && e.Severity == eventv1.EventSeverityError
		}
		rig.receiver.wait(t, "ring 1's failure", ring1Failed)
		if n := rig.receiver.countSince(committed, ring1Failed); n != 1 {
			t.Errorf("%d deliveries of ring 1's failure, want 1:\n%s", n, rig.receiver.dump())
		}
		if n := rig.receiver.countSince(committed, func(e eventv1.Event) bool { return e.Severity == eventv1.EventSeverityError && !ring1Failed(e) }); n != 0 {
			t.Errorf("%d other error deliveries, want none:\n%s", n, rig.receiver.dump())
		}
		run.HeldSeconds = time.Since(failed).Seconds()
		t.Logf("failed version committed; ring 1 rolled back and its Kustomization failed %s later; rings 2 and 3 held for %s more",
			failed.Sub(committed).Round(100*time.Millisecond), time.Since(failed).Round(100*time.Millisecond))
	})
	if t.Failed() {
		return
	}

	// Reverting the commit resumes the fleet.
	t.Run("revert-resumes", func(t *testing.T) {
		rev = src.publish(t, fleetFiles(t, v2, operator))
		reverted := time.Now()
		for _, u := range kss {
			rig.waitKustomization(t, u.GetName(), "Ready at "+rev, func(ks *unstructured.Unstructured) bool {
				return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev
			})
		}
		for _, r := range rings {
			waitRingServing(t, r, v2, time.Minute)
		}
		t.Logf("revert: every ring Ready at the new revision %s after the commit", time.Since(reverted).Round(100*time.Millisecond))
	})
	if t.Failed() {
		return
	}

	// A version that passes ring 1 and fails its bake in ring 2: ring 1
	// keeps it, ring 2 rolls back, ring 3 never gets it.
	t.Run("ring-2-fails-ring-1-keeps-the-version", func(t *testing.T) {
		w := watchFleet(t, rings)
		committed := time.Now()
		rev = src.publish(t, fleetFiles(t, secondClusterCrashing, operator))
		waitRingServing(t, rings[0], secondClusterCrashing, 4*time.Minute)
		waitRolledBack(t, rings[1], v2)
		waitRingFailed(t, rig, ringKs(1), rev, rings[1])
		time.Sleep(fleetHeldReconciliations * fluxFleetRequeue)
		checkHeld(t, w, 2, v2)
		checkWaitsOn(t, rig, ringKs(2), ringKs(1), rev)
		// Ring 1 stays on the version: Ready at the commit, serving it.
		if m := fleetModel(t, rings[0]); m.Status.ActiveVersion != secondClusterCrashing || !apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) {
			t.Errorf("ring 1 after ring 2 failed: serving %s, %v; want %s, Ready", m.Status.ActiveVersion, m.Status.Conditions, secondClusterCrashing)
		}
		if ks := getKustomization(t, ringKs(0)); readyCondition(ks).Status != metav1.ConditionTrue || lastApplied(ks) != rev {
			t.Errorf("%s: Ready=%s at %s, want True at %s", ringKs(0), readyCondition(ks).Status, lastApplied(ks), rev)
		}
		ring2Failed := func(e eventv1.Event) bool {
			return involved(e) == "Kustomization/"+fluxNamespace+"/"+ringKs(1) && e.Severity == eventv1.EventSeverityError
		}
		rig.receiver.wait(t, "ring 2's failure", ring2Failed)
		if n := rig.receiver.countSince(committed, ring2Failed); n != 1 {
			t.Errorf("%d deliveries of ring 2's failure, want 1:\n%s", n, rig.receiver.dump())
		}
		if n := rig.receiver.countSince(committed, func(e eventv1.Event) bool { return e.Severity == eventv1.EventSeverityError && !ring2Failed(e) }); n != 0 {
			t.Errorf("%d other error deliveries, want none:\n%s", n, rig.receiver.dump())
		}
	})
	if t.Failed() {
		return
	}

	// Reverting the commit in Git rolls ring 1 back.
	t.Run("revert-rolls-ring-1-back", func(t *testing.T) {
		w := watchFleet(t, rings)
		rev = src.publish(t, fleetFiles(t, v2, operator))
		for _, u := range kss {
			rig.waitKustomization(t, u.GetName(), "Ready at "+rev, func(ks *unstructured.Unstructured) bool {
				return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev
			})
		}
		for _, r := range rings {
			waitRingServing(t, r, v2, time.Minute)
		}
		if got, want := templateHashes(w.templates[0]), []string{hashOf(t, secondClusterCrashing), hashOf(t, v2)}; !slices.Equal(got, want) {
			t.Errorf("ring 1's pod templates %v, want %v", got, want)
		}
	})
	if t.Failed() {
		return
	}

	// kustomize-controller with a dependency Ready at an older revision:
	// ring 1 suspended (it stays Ready at the revision it applied), a new
	// commit. Ring 2, which reads the same source, waits for ring 1 to
	// apply it; a Kustomization that reads another source, or that states
	// a readyExpr, does not.
	t.Run("dependency-ready-at-an-older-revision", func(t *testing.T) {
		older := rev
		rig.flux(t, 0, "suspend", "kustomization", ringKs(0), "-n", fluxNamespace)
		// Resumed however the subtest ends: a suspended Kustomization is
		// not pruned when it is deleted.
		t.Cleanup(func() { setSuspended(t, ringKs(0), false) })
		rig.waitKustomization(t, ringKs(0), "suspended, Ready at "+older, func(ks *unstructured.Unstructured) bool {
			return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == older && ks.GetGeneration() == observedGeneration(ks)
		})
		// A mirror of the repository: the same commits under another
		// GitRepository.
		mirror := startNamedGitSource(t, "openmed-fleet-mirror")
		mirror.publish(t, fleetFiles(t, v2, operator))
		mirror.create(t)
		probe := func(name, source, readyExpr string) *unstructured.Unstructured {
			// Each applies the model into a namespace of its own.
			probeNs := newNamespace(t)
			dep := map[string]any{"name": ringKs(0)}
			if readyExpr != "" {
				dep["readyExpr"] = readyExpr
			}
			u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
				"interval": "10m", "prune": true, "path": "./models", "targetNamespace": probeNs,
				"sourceRef": map[string]any{"kind": "GitRepository", "name": source},
				"dependsOn": []any{dep},
			}}}
			u.SetGroupVersionKind(kustomizationGVK)
			u.SetNamespace(fluxNamespace)
			u.SetName(name)
			return u
		}
		onlyReady := "dep.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')"
		probes := []*unstructured.Unstructured{
			probe("probe-ready-expr", src.name, onlyReady),
			probe("probe-other-source", mirror.name, ""),
		}
		newer := src.publish(t, fleetFiles(t, v2, operator))
		mirrored := mirror.publish(t, fleetFiles(t, v2, operator))
		for _, u := range probes {
			createdKustomization(t, u)
		}
		ks := rig.waitKustomization(t, ringKs(1), "held: ring 1 at "+older, func(ks *unstructured.Unstructured) bool {
			c := readyCondition(ks)
			return c.Status == metav1.ConditionFalse && c.Reason == "DependencyNotReady" && lastAttempted(ks) != newer
		})
		want := fmt.Sprintf("dependency '%s/%s' revision is not up to date", fluxNamespace, ringKs(0))
		if c := readyCondition(ks); c.Message != want {
			t.Errorf("%s held with %q, want %q", ringKs(1), c.Message, want)
		}
		for u, at := range map[*unstructured.Unstructured]string{probes[0]: newer, probes[1]: mirrored} {
			rig.waitKustomization(t, u.GetName(), "applied "+at+" past ring 1 at "+older, func(ks *unstructured.Unstructured) bool {
				return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == at
			})
		}
		if ks := getKustomization(t, ringKs(0)); lastApplied(ks) != older {
			t.Fatalf("ring 1 applied %s while suspended", lastApplied(ks))
		}
		ks = getKustomization(t, ringKs(1))
		if lastApplied(ks) == newer {
			t.Errorf("%s applied %s while ring 1 was at %s", ringKs(1), newer, older)
		}
		t.Logf("ring 1 Ready at the older revision: %s %q; a readyExpr and another source went past it", ringKs(1), readyCondition(ks).Message)
		// Resumed, ring 1 applies the commit and the rings follow.
		rig.flux(t, 0, "resume", "kustomization", ringKs(0), "-n", fluxNamespace, "--timeout", "2m")
		for _, u := range kss {
			rig.waitKustomization(t, u.GetName(), "Ready at "+newer, func(ks *unstructured.Unstructured) bool {
				return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == newer
			})
		}
	})
	run.TestSeconds = time.Since(began).Seconds()
	writeFleetFigures(t, run, committedAt, waves)
}

// fleetFluxObjects reads a file of examples/fleet/flux as a user edits it:
// the Provider's address pointed at receiverURL. With rings, it returns the
// file's Kustomizations, one per ring in order, each ring's
// targetNamespace set to its namespace (rings 2 and 3 share the second
// control plane here).
func fleetFluxObjects(t *testing.T, name, receiverURL string, rings []ring) []*unstructured.Unstructured {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "fleet", "flux", name))
	if err != nil || len(objs) == 0 {
		t.Fatalf("examples/fleet/flux/%s: %v", name, err)
	}
	var ks []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Provider":
			if err := unstructured.SetNestedField(u.Object, receiverURL, "spec", "address"); err != nil {
				t.Fatal(err)
			}
		case "Kustomization":
			ks = append(ks, u)
		}
	}
	if rings != nil {
		if len(ks) != len(rings) {
			t.Fatalf("examples/fleet/flux/%s: %d Kustomizations, want one per ring (%d)", name, len(ks), len(rings))
		}
		for i, u := range ks {
			if err := unstructured.SetNestedField(u.Object, rings[i].ns, "spec", "targetNamespace"); err != nil {
				t.Fatal(err)
			}
		}
		return ks
	}
	return objs
}

// createdKustomization creates u and deletes it when the test ends, while
// kustomize-controller still runs, so it prunes what it applied.
func createdKustomization(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), u); err != nil {
			return
		}
		eventually(t, "Kustomization "+u.GetName()+" gone", func() (bool, string) {
			return isGone(t, u), fmt.Sprintf("finalizers %v", u.GetFinalizers())
		})
	})
}

// observedGeneration is a Flux object's status.observedGeneration.
func observedGeneration(u *unstructured.Unstructured) int64 {
	g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return g
}

// getKustomization reads the Kustomization name of flux-system.
func getKustomization(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	ks := &unstructured.Unstructured{}
	ks.SetGroupVersionKind(kustomizationGVK)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: fluxNamespace, Name: name}, ks); err != nil {
		t.Fatal(err)
	}
	return ks
}

// setSuspended sets the Kustomization's spec.suspend, as `flux suspend`
// and `flux resume` do (without waiting).
func setSuspended(t *testing.T, name string, suspend bool) {
	t.Helper()
	ks := &unstructured.Unstructured{}
	ks.SetGroupVersionKind(kustomizationGVK)
	ks.SetNamespace(fluxNamespace)
	ks.SetName(name)
	patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
	if err := k8s.Patch(context.Background(), ks, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Errorf("suspend=%t on %s: %v", suspend, name, err)
	}
}

// waitRingFailed waits until the ring's Kustomization name failed its
// health check at revision, naming the ring's model.
func waitRingFailed(t *testing.T, rig *fluxRig, name, revision string, r ring) {
	t.Helper()
	ks := rig.waitKustomization(t, name, "failed at "+revision, func(ks *unstructured.Unstructured) bool {
		c := readyCondition(ks)
		return c.Status == metav1.ConditionFalse && c.Reason == "HealthCheckFailed" && lastAttempted(ks) == revision
	})
	if msg, want := readyCondition(ks).Message, fmt.Sprintf("OpenMedModel/%s/%s status: 'Failed'", r.ns, modelName); !strings.Contains(msg, want) {
		t.Errorf("%s: %q, want the failure naming %s", name, msg, want)
	}
}

// checkWaitsOn waits until the Kustomization name is held by its
// dependency dep ("dependency '…' is not ready") and checks that it has not
// applied revision.
func checkWaitsOn(t *testing.T, rig *fluxRig, name, dep, revision string) {
	t.Helper()
	ks := rig.waitKustomization(t, name, "held by "+dep, func(ks *unstructured.Unstructured) bool {
		c := readyCondition(ks)
		return c.Status == metav1.ConditionFalse && c.Reason == "DependencyNotReady"
	})
	if want := fmt.Sprintf("dependency '%s/%s' is not ready", fluxNamespace, dep); readyCondition(ks).Message != want {
		t.Errorf("%s: Ready=False %q, want %q", name, readyCondition(ks).Message, want)
	}
	if lastApplied(ks) == revision {
		t.Errorf("%s applied %s", name, revision)
	}
}
