package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

var applicationSetGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationSet"}

// argoHeldReconciliations is how many of Argo CD's reconciliations
// (timeout.reconciliation) the test watches held rings stay as they were.
const argoHeldReconciliations = 3

// TestFleetArgoCD rolls model versions through three rings with a real Argo
// CD — application controller, repo server, API server, notifications and
// the ApplicationSet controller with progressive syncs — and the published
// examples/fleet/argocd: ring 1 on the suite's cluster, rings 2 and 3 on a
// second control plane registered with Argo CD, one Application per ring
// from one ApplicationSet, RollingSync steps by ring. A healthy version
// committed once is synced to ring 1, bakes, then ring 2, then ring 3: each
// ring's sync starts (its operation state) only after the ring before
// retained the version after its bake (its model's history); ring 1's model
// is Progressing in every health face from the first stored version of the
// new spec until its bake ended. A version that fails its bake in ring 1 is
// rolled back there, its Application is Degraded and pages once, the
// ApplicationSet keeps the step at ring 1, and rings 2 and 3 are never
// synced: their Deployments stay as they were over several
// reconciliations. A revert resumes the fleet.
func TestFleetArgoCD(t *testing.T) {
	requireCluster(t)
	began := time.Now()
	run := figures.FleetRun{Engine: "Argo CD", BakeSeconds: fleetBakeSeconds, HeldIntervals: argoHeldReconciliations,
		Interval: "Argo CD's `timeout.reconciliation`"}
	var waves []wave
	var committedAt time.Time
	const operator = "fleet-argocd"
	rem, rings := startFleet(t, operator)
	rig := startArgoCD(t)
	rig.startApplicationSets(t)
	ctx := context.Background()

	// The second cluster registered with Argo CD as clusters.yaml does it,
	// with its client certificate; rings 2 and 3 are two namespaces of it
	// here, two clusters in the example, so its first Secret serves both.
	server := rem.cluster.RESTConfig().Host
	secrets, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "fleet", "argocd", "clusters.yaml"))
	if err != nil || len(secrets) == 0 {
		t.Fatalf("examples/fleet/argocd/clusters.yaml: %v", err)
	}
	tls := rem.cluster.RESTConfig().TLSClientConfig
	config, err := json.Marshal(map[string]any{"tlsClientConfig": map[string]any{
		"insecure": false,
		"caData":   base64.StdEncoding.EncodeToString(tls.CAData),
		"certData": base64.StdEncoding.EncodeToString(tls.CertData),
		"keyData":  base64.StdEncoding.EncodeToString(tls.KeyData),
	}})
	if err != nil {
		t.Fatal(err)
	}
	clusterSecret := secrets[0]
	if err := unstructured.SetNestedStringMap(clusterSecret.Object, map[string]string{"name": "second", "server": server, "config": string(config)}, "stringData"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, clusterSecret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), clusterSecret) })

	const repo = "fleet"
	url := rig.git.repo(t, repo)
	rig.git.commit(t, repo, "openmed-service v1", fleetFiles(t, v1, operator))
	set := fleetApplicationSet(t, url, []string{"https://kubernetes.default.svc", server, server}, rings)
	if err := k8s.Create(ctx, set); err != nil {
		t.Fatal(err)
	}
	// Deleted, with its Applications, while Argo CD and the operators run
	// (an Application's finalizer, a model's), and waited for: the next
	// Argo CD of the suite finds none of them.
	t.Cleanup(func() {
		objs := []*unstructured.Unstructured{set}
		for _, r := range rings {
			app := &unstructured.Unstructured{}
			app.SetGroupVersionKind(applicationGVK)
			app.SetNamespace(argocdNamespace)
			app.SetName("openmed-" + r.name)
			objs = append(objs, app)
		}
		for _, o := range objs {
			_ = k8s.Delete(context.Background(), o)
		}
		for _, o := range objs {
			eventually(t, o.GetKind()+" "+o.GetName()+" gone", func() (bool, string) {
				return isGone(t, o), fmt.Sprintf("finalizers %v", o.GetFinalizers())
			})
		}
	})
	apps := make([]string, len(rings))
	for i, r := range rings {
		apps[i] = "openmed-" + r.name
	}
	for _, r := range rings {
		waitRingServing(t, r, v1, 3*time.Minute)
	}
	awaitApps(t, apps, "Synced and Healthy", func(s appState) bool { return s.sync == "Synced" && s.health == "Healthy" })

	t.Run("healthy-version-ring-by-ring", func(t *testing.T) {
		w := watchFleet(t, rings)
		appRec := record(t, k8s, applicationGVK, argocdNamespace)
		setRec := record(t, k8s, applicationSetGVK, argocdNamespace)
		faces := startFaceWatch(t, rings[0].ns)
		before := fleetModel(t, rings[0]).Generation
		committed := time.Now()
		sha := rig.git.commit(t, repo, "openmed-service v2", fleetFiles(t, v2, operator))
		for _, r := range rings {
			waitRingServing(t, r, v2, 5*time.Minute)
		}
		awaitApps(t, apps, "Synced and Healthy at "+sha[:8], func(s appState) bool {
			return s.sync == "Synced" && s.health == "Healthy" && s.revision == sha
		})
		// The ApplicationSet controller synced them itself: automated
		// sync is off in each Application it generated.
		for _, app := range apps {
			u := application(t, app)
			enabled, found, _ := unstructured.NestedBool(u.Object, "spec", "syncPolicy", "automated", "enabled")
			by, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "operation", "initiatedBy", "username")
			if !found || enabled || by != "applicationset-controller" {
				t.Errorf("%s: automated.enabled %t (set: %t), sync initiated by %q; want false, applicationset-controller", app, enabled, found, by)
			}
		}
		committedAt, waves = committed, w.waves(t, hashOf(t, v2), v2)
		reportWaves(t, "argocd", committed, waves)
		// Each ring's sync started (the Application's operation state)
		// after the ring before retained v2 after its bake (the model's
		// history): both the API servers' clocks, to the second.
		for i := 1; i < len(rings); i++ {
			started := syncStartedAt(t, appRec, apps[i], sha)
			baked := retainedAt(fleetModel(t, rings[i-1]), v2)
			if started.Before(baked) {
				t.Errorf("%s's sync of %s started at %s, before %s retained %s after its bake (%s)", apps[i], sha[:8], started.Format(time.TimeOnly), rings[i-1], v2, baked.Format(time.TimeOnly))
			}
			t.Logf("%s retained %s at %s; %s's sync started at %s", rings[i-1].name, v2, baked.Format(time.TimeOnly), apps[i], started.Format(time.TimeOnly))
		}
		m := fleetModel(t, rings[0])
		if n := progressingUntilBaked(t, faces.stop(t, m.ResourceVersion), before, v2); n < 2 {
			t.Errorf("judged %d versions of ring 1's model after the spec changed, want the rollout's and the bake's", n)
		}
		// Argo CD's own verdict on those versions, ordered with them by
		// the first API server's resourceVersions: ring 1's Application
		// Synced and Healthy at the commit, ring 1's step Healthy in the
		// ApplicationSet and ring 2's sync only after ring 1's model
		// retained v2.
		retainedBefore(t, w, 0, v2, appRec, apps[0], "Synced and Healthy at "+sha[:8], func(u *unstructured.Unstructured) bool {
			s := appStateOf(u)
			return s.revision == sha && s.sync == "Synced" && s.health == "Healthy"
		})
		retainedBefore(t, w, 0, v2, setRec, "openmed-fleet", apps[0]+"'s step Healthy at "+sha[:8], func(u *unstructured.Unstructured) bool {
			e := applicationStatusOf(u)[apps[0]]
			return e.status == "Healthy" && slices.Contains(e.targetRevisions, sha)
		})
		retainedBefore(t, w, 0, v2, appRec, apps[1], "a sync to "+sha[:8], func(u *unstructured.Unstructured) bool {
			rev, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "operation", "sync", "revision")
			return rev == sha
		})
	})
	if t.Failed() {
		return
	}

	t.Run("failed-bake-halts-the-fleet", func(t *testing.T) {
		w := watchFleet(t, rings)
		from := time.Now()
		sha := rig.git.commit(t, repo, "openmed-service crashes", fleetFiles(t, crashingVersion, operator))
		r1 := rings[0]
		waitRolledBack(t, r1, v2)
		awaitApps(t, apps[:1], "Degraded at "+sha[:8], func(s appState) bool { return s.health == "Degraded" && s.revision == sha })
		failed := time.Now()
		// Several of Argo CD's reconciliations (each compares the
		// Applications with Git) and the ApplicationSet controller's
		// reactions to them.
		reconciled := reconciledAt(t, apps[1:])
		time.Sleep(argoHeldReconciliations * reconciliation)
		checkHeld(t, w, 1, v2)
		compared(t, apps[1:], reconciled)
		for _, app := range apps[1:] {
			heldOutOfSync(t, app, sha)
		}
		// The ApplicationSet shows where the fleet stopped.
		status := applicationStatus(t, "openmed-fleet")
		for i, want := range []string{"Progressing", "Waiting", "Waiting"} {
			if got := status[apps[i]]; got.status != want {
				t.Errorf("applicationStatus of %s: %+v, want %s", apps[i], got, want)
			}
			t.Logf("applicationStatus %s: %+v", apps[i], status[apps[i]])
		}
		// One page, from ring 1.
		eventually(t, "ring 1's degraded notification", func() (bool, string) {
			n := rig.receiver.of(apps[0], "degraded", from)
			return len(n) > 0, fmt.Sprintf("%d", len(n))
		})
		if n := rig.receiver.of(apps[0], "degraded", from); len(n) != 1 {
			t.Errorf("%d degraded notifications of %s, want 1:\n%s", len(n), apps[0], notificationList(n))
		}
		for _, app := range apps[1:] {
			if n := rig.receiver.of(app, "", from); len(n) != 0 {
				t.Errorf("%d notifications of %s, want none:\n%s", len(n), app, notificationList(n))
			}
		}
		run.HeldSeconds = time.Since(failed).Seconds()
		t.Logf("failed version committed; ring 1 Degraded %s later; rings 2 and 3 held for %s more",
			failed.Sub(from).Round(100*time.Millisecond), time.Since(failed).Round(100*time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("revert-resumes", func(t *testing.T) {
		w := watchFleet(t, rings)
		reverted := time.Now()
		sha := resume(t, rig, repo, "Revert openmed-service crashes", fleetFiles(t, v2, operator), apps)
		awaitApps(t, apps, "Synced and Healthy at "+sha[:8], func(s appState) bool {
			return s.sync == "Synced" && s.health == "Healthy" && s.revision == sha
		})
		awaitSteps(t, apps, sha)
		for _, r := range rings {
			waitRingServing(t, r, v2, time.Minute)
		}
		neverRolled(t, w, 1, crashingVersion)
		t.Logf("revert: every ring Synced and Healthy %s after the commit", time.Since(reverted).Round(100*time.Millisecond))
	})
	if t.Failed() {
		return
	}

	// A version that passes ring 1 and fails its bake in ring 2: ring 1
	// keeps it, ring 2 rolls back, ring 3 is never synced to it.
	t.Run("ring-2-fails-ring-1-keeps-the-version", func(t *testing.T) {
		w := watchFleet(t, rings)
		from := time.Now()
		sha := rig.git.commit(t, repo, "openmed-service crashes on the second cluster", fleetFiles(t, secondClusterCrashing, operator))
		waitRingServing(t, rings[0], secondClusterCrashing, 4*time.Minute)
		waitRolledBack(t, rings[1], v2)
		awaitApps(t, apps[1:2], "Degraded at "+sha[:8], func(s appState) bool { return s.health == "Degraded" && s.revision == sha })
		reconciled := reconciledAt(t, apps[2:])
		time.Sleep(argoHeldReconciliations * reconciliation)
		checkHeld(t, w, 2, v2)
		compared(t, apps[2:], reconciled)
		heldOutOfSync(t, apps[2], sha)
		// Ring 1 stays on the version, Synced and Healthy at the commit.
		if m := fleetModel(t, rings[0]); m.Status.ActiveVersion != secondClusterCrashing || !apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) {
			t.Errorf("ring 1 after ring 2 failed: serving %s, %v; want %s, Ready", m.Status.ActiveVersion, m.Status.Conditions, secondClusterCrashing)
		}
		if s := readApp(t, apps[0], modelName); s.sync != "Synced" || s.health != "Healthy" || s.revision != sha {
			t.Errorf("%s after ring 2 failed: %s, want Synced and Healthy at %.8s", apps[0], s, sha)
		}
		status := applicationStatus(t, "openmed-fleet")
		for i, want := range []string{"Healthy", "Progressing", "Waiting"} {
			if got := status[apps[i]]; got.status != want {
				t.Errorf("applicationStatus of %s: %+v, want %s", apps[i], got, want)
			}
		}
		eventually(t, "ring 2's degraded notification", func() (bool, string) {
			n := rig.receiver.of(apps[1], "degraded", from)
			return len(n) > 0, fmt.Sprintf("%d", len(n))
		})
		for i, want := range []int{0, 1, 0} {
			if n := rig.receiver.of(apps[i], "degraded", from); len(n) != want {
				t.Errorf("%d degraded notifications of %s, want %d:\n%s", len(n), apps[i], want, notificationList(n))
			}
		}
	})
	if t.Failed() {
		return
	}

	// Reverting the commit in Git rolls ring 1 back.
	t.Run("revert-rolls-ring-1-back", func(t *testing.T) {
		w := watchFleet(t, rings)
		sha := resume(t, rig, repo, "Revert openmed-service crashes on the second cluster", fleetFiles(t, v2, operator), apps)
		awaitAppsWithin(t, 4*time.Minute, apps, "Synced and Healthy at "+sha[:8], func(s appState) bool {
			return s.sync == "Synced" && s.health == "Healthy" && s.revision == sha
		})
		awaitSteps(t, apps, sha)
		for _, r := range rings {
			waitRingServing(t, r, v2, time.Minute)
		}
		neverRolled(t, w, 1, secondClusterCrashing)
		if got, want := templateHashes(w.templates[0]), []string{hashOf(t, secondClusterCrashing), hashOf(t, v2)}; !slices.Equal(got, want) {
			t.Errorf("ring 1's pod templates %v, want %v", got, want)
		}
	})
	run.TestSeconds = time.Since(began).Seconds()
	writeFleetFigures(t, run, committedAt, waves)
}

// fleetApplicationSet is examples/fleet/argocd/applicationset.yaml as a
// user edits it: the repository, each ring's server and namespace.
func fleetApplicationSet(t *testing.T, repoURL string, servers []string, rings []ring) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(localrun.ExamplesDir(), "fleet", "argocd", "applicationset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	generators, _, _ := unstructured.NestedSlice(u.Object, "spec", "generators")
	elements, _, _ := unstructured.NestedSlice(generators[0].(map[string]any), "list", "elements")
	if len(elements) != len(rings) {
		t.Fatalf("applicationset.yaml: %d elements, want one per ring (%d)", len(elements), len(rings))
	}
	for i, e := range elements {
		m := e.(map[string]any)
		if m["ring"] != rings[i].name {
			t.Fatalf("applicationset.yaml: element %d is %v, want %s", i, m["ring"], rings[i].name)
		}
		m["server"], m["namespace"] = servers[i], rings[i].ns
	}
	if err := unstructured.SetNestedSlice(generators[0].(map[string]any), elements, "list", "elements"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(u.Object, generators, "spec", "generators"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, repoURL, "spec", "template", "spec", "source", "repoURL"); err != nil {
		t.Fatal(err)
	}
	return u
}

// resume commits files to resume a halted fleet and refreshes every
// Application of it at once, the last ring first, as a Git webhook would:
// Argo CD v3.6's RollingSync syncs a held ring to the revision its step
// recorded when the failed commit arrived (status.applicationStatus
// targetRevisions) if the ring before turns Healthy at the fix before Argo CD
// has compared the held ring with Git again.
func resume(t *testing.T, rig *argoRig, repo, message string, files map[string][]byte, apps []string) string {
	t.Helper()
	sha := rig.git.commit(t, repo, message, files)
	refresh := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"normal"}}}`))
	for _, app := range slices.Backward(apps) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(applicationGVK)
		u.SetNamespace(argocdNamespace)
		u.SetName(app)
		if err := k8s.Patch(context.Background(), u, refresh); err != nil {
			t.Fatal(err)
		}
	}
	return sha
}

// awaitSteps waits until the ApplicationSet's step of each Application is
// Healthy at sha: no step keeps an older revision to sync.
func awaitSteps(t *testing.T, apps []string, sha string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "every step Healthy at "+sha[:8], func() (bool, string) {
		status := applicationStatus(t, "openmed-fleet")
		for _, app := range apps {
			if e := status[app]; e.status != "Healthy" || !slices.Contains(e.targetRevisions, sha) {
				return false, fmt.Sprintf("%s: %+v", app, e)
			}
		}
		return true, ""
	})
}

// neverRolled checks that no Deployment of the rings from the index from on
// carried version's pod template while w recorded.
func neverRolled(t *testing.T, w *fleetWatch, from int, version string) {
	t.Helper()
	for i, r := range w.rings[from:] {
		if got := templateHashes(w.templates[from+i]); slices.Contains(got, hashOf(t, version)) {
			t.Errorf("%s: pod templates %v, rolled to the failed %s after the fix", r, got, version)
		}
	}
}

// awaitApps waits until cond holds for each Application.
func awaitApps(t *testing.T, apps []string, what string, cond func(appState) bool) {
	t.Helper()
	awaitAppsWithin(t, waitTimeout, apps, what, cond)
}

// awaitAppsWithin is awaitApps with a timeout of its own.
func awaitAppsWithin(t *testing.T, timeout time.Duration, apps []string, what string, cond func(appState) bool) {
	t.Helper()
	for _, app := range apps {
		testenv.Eventually(t, timeout, app+" "+what, func() (bool, string) {
			s := readApp(t, app, modelName)
			return cond(s), s.String()
		})
	}
}

// heldOutOfSync checks that the Application is OutOfSync with the commit
// sha (status.sync.revision is what it was compared with) and was never
// synced to it (its last sync is the one before).
func heldOutOfSync(t *testing.T, app, sha string) {
	t.Helper()
	u := application(t, app)
	s := appStateOf(u)
	synced, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "syncResult", "revision")
	if s.sync != "OutOfSync" || s.revision != sha || synced == sha {
		t.Errorf("%s: %s, last synced %.8s; want OutOfSync with %.8s, never synced to it", app, s, synced, sha)
	}
}

// syncStartedAt is the startedAt of the Application's sync operation to
// revision, from the recorded versions of it.
func syncStartedAt(t *testing.T, rec *recorder, app, revision string) time.Time {
	t.Helper()
	for _, g := range rec.all(app) {
		rev, _, _ := unstructured.NestedString(g.obj.Object, "status", "operationState", "operation", "sync", "revision")
		started, _, _ := unstructured.NestedString(g.obj.Object, "status", "operationState", "startedAt")
		if rev == revision && started != "" {
			at, err := time.Parse(time.RFC3339, started)
			if err != nil {
				t.Fatal(err)
			}
			return at
		}
	}
	t.Fatalf("%s: no sync operation to %s recorded", app, revision)
	return time.Time{}
}

// appSetEntry is one status.applicationStatus entry of an ApplicationSet.
type appSetEntry struct {
	status, message, step string
	targetRevisions       []string
}

// applicationStatus reads the ApplicationSet's status.applicationStatus by
// Application.
func applicationStatus(t *testing.T, name string) map[string]appSetEntry {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(applicationSetGVK)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: argocdNamespace, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return applicationStatusOf(u)
}

// applicationStatusOf is a version of an ApplicationSet's
// status.applicationStatus by Application.
func applicationStatusOf(u *unstructured.Unstructured) map[string]appSetEntry {
	items, _, _ := unstructured.NestedSlice(u.Object, "status", "applicationStatus")
	out := map[string]appSetEntry{}
	for _, item := range items {
		m, _ := item.(map[string]any)
		app, _ := m["application"].(string)
		e := appSetEntry{}
		e.status, _ = m["status"].(string)
		e.message, _ = m["message"].(string)
		e.step, _ = m["step"].(string)
		e.targetRevisions, _, _ = unstructured.NestedStringSlice(m, "targetRevisions")
		out[app] = e
	}
	return out
}

// reconciledAt reads each Application's status.reconciledAt (when Argo CD
// last compared it with Git).
func reconciledAt(t *testing.T, apps []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, app := range apps {
		out[app], _, _ = unstructured.NestedString(application(t, app).Object, "status", "reconciledAt")
	}
	return out
}

// compared checks that Argo CD compared each Application with Git again
// since before (a held ring was looked at, not forgotten).
func compared(t *testing.T, apps []string, before map[string]string) {
	t.Helper()
	for app, at := range reconciledAt(t, apps) {
		if at == before[app] {
			t.Errorf("%s: reconciledAt still %s: Argo CD did not compare it again while it was held", app, at)
		}
	}
}
