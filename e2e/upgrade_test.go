package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// previousRelease is the commit of this repository whose operator the
// upgrade test starts from: the last one before the release tooling. Move
// it forward with each release, to the release's commit.
const previousRelease = "ca267c184161ea653bb7e9c70e5e93db17733854"

// crdFile is the CRD's file in the repository.
const crdFile = "kustomize/crd/bases/openmed.ai_openmedmodels.yaml"

// TestOperatorUpgrade replaces a running operator of the previous release
// by this one, as `kubectl apply -f install.yaml` of a new release does
// (the old process gets SIGTERM, the new CRD is applied, the new process
// starts), with three models in flight: one Ready, one in the middle of a
// rollout, one in the middle of its bake. The new operator rolls no pod
// the old one had settled (no new Deployment generation, template or
// ReplicaSet; the Ready model's pods are the same pods), finishes the
// rollout without starting it again, keeps the bake's clock (the bake
// began when the old operator said, and ends no earlier than bakeSeconds
// after), and loses nothing of status or history. Every stored model is
// still valid under the new CRD.
func TestOperatorUpgrade(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	root := localrun.ModuleRoot()
	oldCRD := gitShow(t, root, previousRelease, crdFile)
	newCRD, err := os.ReadFile(filepath.Join(root, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	// The other tests share the cluster's CRD: the old one may be installed
	// for the length of this test only when nobody else runs.
	if bytes.Equal(oldCRD, newCRD) {
		t.Parallel()
	} else {
		applyCRD(t, oldCRD)
	}
	oldBinary := buildPrevious(t, root, previousRelease)

	const selector = operatorLabel + "=upgrade"
	old, err := localrun.StartOperator(localrun.OperatorConfig{
		Binary:     oldBinary,
		Kubeconfig: operatorKubeconfig,
		LogPath:    filepath.Join(workDir, "operator-upgrade-old.log"),
		Args:       []string{"--log-encoding=console", "--watch-label-selector=" + selector},
		Scraper:    metricsScraper,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Kill() })
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := old.WaitReady(waitCtx); err != nil {
		t.Fatal(err)
	}

	ready, rolling, baking := newNamespace(t), newNamespace(t), newNamespace(t)
	readyModel(t, ready, v1, "upgrade", nil)
	readyModel(t, rolling, v1, "upgrade", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = minReadySeconds })
	readyModel(t, baking, v1, "upgrade", nil)
	setVersion(t, rolling, v2)
	bakeVersion(t, baking, v2)
	waitState(t, rolling, "the upgrade in flight", func(s state) bool {
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseRollingOut && s.m.Status.DesiredVersion == v2 &&
			s.d.Status.ObservedGeneration == s.d.Generation && s.d.Status.UpdatedReplicas >= 1 && !settled(s.d)
	})
	bake := waitState(t, baking, "the bake under way", func(s state) bool {
		c := apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.ReadyCondition)
		return s.snap.Observed() && s.m.Status.BakeStartedAt != nil && c != nil && c.Reason == v1alpha1.BakingReason && settled(s.d)
	})
	// Hand over a quarter into the bake: a bake the new operator started
	// again would end a quarter of it later than the one the old one began.
	time.Sleep(time.Until(bake.m.Status.BakeStartedAt.Add(bakeSeconds * time.Second / 4)))

	// The upgrade: the old process stops as a Deployment's rolling update
	// stops it, the new CRD is applied, the new process starts.
	if err := old.Stop(40 * time.Second); err != nil {
		t.Fatal(err)
	}
	before := map[string]upgradeReading{}
	for _, ns := range []string{ready, rolling, baking} {
		before[ns] = readUpgrade(t, ns)
	}
	if before[rolling].s.m.Status.Phase != v1alpha1.PhaseRollingOut || before[baking].s.m.Status.BakeStartedAt == nil {
		t.Fatalf("the old operator stopped with the rollout at %s and the bake at %v: nothing in flight to hand over",
			before[rolling].s.m.Status.Phase, before[baking].s.m.Status.BakeStartedAt)
	}
	applyCRD(t, newCRD)
	for _, ns := range []string{ready, rolling, baking} {
		checkStoredModelValid(t, ns)
	}
	newStarted := time.Now()
	op, err := launchOperator(ctx, "upgrade-new", selector)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })
	if s := read(t, baking); s.m.Status.BakeStartedAt != nil && !s.m.Status.BakeStartedAt.Equal(before[baking].s.m.Status.BakeStartedAt) {
		t.Errorf("bakeStartedAt %s -> %s: the new operator started the bake again", before[baking].s.m.Status.BakeStartedAt, s.m.Status.BakeStartedAt)
	}

	waitServing(t, rolling, v2)
	baked := waitState(t, baking, "Ready after the bake", func(s state) bool {
		c := apimeta.FindStatusCondition(s.m.Status.Conditions, v1alpha1.ReadyCondition)
		return s.snap.Observed() && s.m.Status.Phase == v1alpha1.PhaseReady && c != nil && c.Status == metav1.ConditionTrue &&
			c.Reason != v1alpha1.BakingReason && s.m.Status.ActiveVersion == v2
	})
	// The new operator has taken the Ready model up too (it reports it).
	eventually(t, "the new operator reports the Ready model", func() (bool, string) {
		body, err := op.Read(ctx, "/metrics")
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "openmed_model_info{") && strings.Contains(line, `namespace="`+ready+`"`) && strings.Contains(line, `phase="Ready"`) {
				return true, ""
			}
		}
		return false, "no openmed_model_info for " + ready
	})
	after := map[string]upgradeReading{ready: readUpgrade(t, ready), rolling: readUpgrade(t, rolling), baking: readUpgrade(t, baking)}

	for _, ns := range []string{ready, rolling, baking} {
		b, a := before[ns], after[ns]
		if a.s.d.Generation != b.s.d.Generation {
			t.Errorf("%s: Deployment generation %d -> %d: the new operator changed the Deployment's spec", ns, b.s.d.Generation, a.s.d.Generation)
		}
		if got, want := a.s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation], b.s.d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]; got != want {
			t.Errorf("%s: template hash %s -> %s", ns, want, got)
		}
		if !slices.Equal(a.replicaSets, b.replicaSets) {
			t.Errorf("%s: ReplicaSets %v -> %v: pods rolled", ns, b.replicaSets, a.replicaSets)
		}
		for _, h := range b.s.m.Status.History {
			if !slices.ContainsFunc(a.s.m.Status.History, func(x v1alpha1.HistoryEntry) bool { return reflect.DeepEqual(x, h) }) {
				t.Errorf("%s: history entry %+v lost in the upgrade (now %+v)", ns, h, a.s.m.Status.History)
			}
		}
		if a.s.m.Status.DesiredSpecHash != b.s.m.Status.DesiredSpecHash {
			t.Errorf("%s: desiredSpecHash %s -> %s", ns, b.s.m.Status.DesiredSpecHash, a.s.m.Status.DesiredSpecHash)
		}
	}
	// The settled model: the same pods, the same status.
	if !slices.Equal(after[ready].pods, before[ready].pods) {
		t.Errorf("the Ready model's pods %v -> %v", before[ready].pods, after[ready].pods)
	}
	if !reflect.DeepEqual(after[ready].s.m.Status, before[ready].s.m.Status) {
		t.Errorf("the Ready model's status changed in the upgrade:\nbefore %+v\nafter  %+v", before[ready].s.m.Status, after[ready].s.m.Status)
	}
	// The bake: the same pods, the clock the old operator started.
	if !slices.Equal(after[baking].pods, before[baking].pods) {
		t.Errorf("the baking model's pods %v -> %v", before[baking].pods, after[baking].pods)
	}
	began := before[baking].s.m.Status.BakeStartedAt.Time
	readyAt := apimeta.FindStatusCondition(baked.m.Status.Conditions, v1alpha1.ReadyCondition).LastTransitionTime.Time
	if readyAt.Before(began.Add(bakeSeconds * time.Second)) {
		t.Errorf("the bake began at %s and ended at %s, before its %d s", began, readyAt, bakeSeconds)
	}
	if !readyAt.Before(newStarted.Add(bakeSeconds * time.Second)) {
		t.Errorf("the bake began at %s under the old operator and ended at %s, a whole bake after the new one started (%s): it started again",
			began, readyAt, newStarted)
	}
	if a := after[baking].s.m.Status.BakeStartedAt; a != nil && !a.Time.Equal(began) {
		t.Errorf("bakeStartedAt %s -> %s: the new operator restarted the bake", began, a.Time)
	}
}

// upgradeReading is what the upgrade must keep of a model: its state, its
// target's ReplicaSets and its pods (names and UIDs, sorted).
type upgradeReading struct {
	s           state
	replicaSets []string
	pods        []string
}

func readUpgrade(t *testing.T, ns string) upgradeReading {
	t.Helper()
	r := upgradeReading{s: read(t, ns)}
	var rss appsv1.ReplicaSetList
	if err := k8s.List(context.Background(), &rss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss.Items {
		r.replicaSets = append(r.replicaSets, rs.Name+"/"+string(rs.UID))
	}
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			r.pods = append(r.pods, p.Name+"/"+string(p.UID))
		}
	}
	slices.Sort(r.replicaSets)
	slices.Sort(r.pods)
	return r
}

// git is a git command on this repository: the checkout at root, or the
// repository $OPENMED_GIT_DIR names for a copy without .git (hack/mutants).
func git(root string, args ...string) *exec.Cmd {
	if dir := os.Getenv("OPENMED_GIT_DIR"); dir != "" {
		return exec.Command("git", append([]string{"--git-dir=" + dir}, args...)...)
	}
	return exec.Command("git", append([]string{"-C", root}, args...)...)
}

// gitShow is a file of the repository at commit.
func gitShow(t *testing.T, root, commit, path string) []byte {
	t.Helper()
	out, err := git(root, "show", commit+":"+path).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the upgrade test reads the previous release from commit %s of this repository's history: %v %s(a shallow clone lacks it: git fetch --unshallow)",
			commit, err, stderr)
	}
	return out
}

// buildPrevious builds the operator binary of commit: the tree from `git
// archive`, built with the toolchain running the test.
func buildPrevious(t *testing.T, root, commit string) string {
	t.Helper()
	src := filepath.Join(workDir, "previous-"+commit[:12])
	archive := git(root, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	out, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.String())
	}
	if err := localrun.Untar(bytes.NewReader(out), src); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(workDir, "openmed-operator-"+commit[:12])
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/openmed-operator")
	build.Dir = src
	build.Env = append(os.Environ(), "GOTOOLCHAIN="+runtime.Version(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the operator of %s: %v\n%s", commit, err, out)
	}
	return bin
}

// applyCRD server-side applies a CRD manifest, as `kubectl apply
// --server-side -f install.yaml` would, and waits until it is established.
func applyCRD(t *testing.T, manifest []byte) {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(manifest, &crd); err != nil {
		t.Fatal(err)
	}
	crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	if err := k8s.Patch(context.Background(), &crd, client.Apply, client.FieldOwner("openmed-install"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the CRD established", func() (bool, string) {
		var got apiextensionsv1.CustomResourceDefinition
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(&crd), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", got.Status.Conditions)
	})
}

// checkStoredModelValid creates, as a dry run, a model with the stored
// model's spec, labels and annotations under the CRD now installed: the
// API server's full validation, which an update of an unchanged object
// would ratchet past.
func checkStoredModelValid(t *testing.T, ns string) {
	t.Helper()
	var m v1alpha1.OpenMedModel
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: modelName}, &m); err != nil {
		t.Fatal(err)
	}
	probe := &v1alpha1.OpenMedModel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: modelName + "-stored", Labels: m.Labels, Annotations: m.Annotations},
		Spec:       m.Spec,
	}
	if err := k8s.Create(context.Background(), probe, client.DryRunAll); err != nil {
		t.Errorf("the stored model %s/%s is not valid under the new CRD: %v", ns, modelName, err)
	}
}
