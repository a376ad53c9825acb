package e2e_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// fluxDirEnv names the directory `make fluxbin` fills with kustomize-controller,
// the flux CLI and the CRDs they read (crds/); fluxNotificationDirEnv the one
// with notification-controller and its CRDs as it ships them (crds/).
const (
	fluxDirEnv             = "OPENMED_FLUX_DIR"
	fluxNotificationDirEnv = "OPENMED_FLUX_NOTIFICATION_DIR"
)

const (
	fluxNamespace = "flux-system"
	// gitRepository is the source the published Kustomizations reference.
	gitRepository = "openmed"
	appKs         = "openmed-app"
	modelsKs      = "openmed-models"
	// fluxDeadlineSeconds is the model's progress deadline in Git.
	fluxDeadlineSeconds = 15
	// fluxOperator is the operatorLabel value of TestFlux's models: they
	// belong to an operator of the test's own, which forwards its events
	// to notification-controller (--events-addr).
	fluxOperator = "flux"
	// alertCRD is notification-controller's Alert CRD.
	alertCRD = "alerts.notification.toolkit.fluxcd.io"
)

var (
	gitRepositoryGVK = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}
	kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}
	alertGVK         = schema.GroupVersionKind{Group: "notification.toolkit.fluxcd.io", Version: "v1beta3", Kind: "Alert"}
)

// TestFlux runs Flux's real kustomize-controller and flux CLI against the
// local control plane with the published examples/flux Kustomizations: the
// app (the chart's Deployment) and the models, the models' Kustomization
// dependsOn the app's and waits for them. The GitRepository's artifact is a
// tarball served on loopback; the test plays source-controller by writing
// the GitRepository's status (artifact, Ready, handled reconcile requests).
//
// notification-controller runs too, with examples/flux/alerts.yaml (a
// generic Provider to a receiver on loopback, an Alert on the models'
// Kustomization) and the operator forwarding its events (--events-addr).
// With the Alert CRD as Flux ships it, an Alert naming OpenMedModel is
// rejected and notification-controller discards the operator's events; with
// examples/flux/alert-crd-patch.yaml, examples/flux/model-alerts.yaml is
// accepted. A never-ready version committed: one delivery of the
// Kustomization's failure naming the model per reconciliation (the commit's,
// then the flux reconcile's), and exactly one of the operator's
// RolloutFailed with the failed and the serving version; the revert
// delivers no error.
func TestFlux(t *testing.T) {
	requireCluster(t)
	rig := startFlux(t)
	ns := newNamespace(t)
	v1, err := exampleModel()
	if err != nil {
		t.Fatal(err)
	}
	good := v1.Spec.Version
	op, err := launchOperator(context.Background(), "flux", operatorLabel+"="+fluxOperator, "--events-addr="+rig.events)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = op.Kill() })

	// The Provider and the Kustomization's Alert, before anything is applied.
	rig.applyAlerts(t, "alerts.yaml", ns)

	// First apply: the models' Kustomization is Ready only once the model is.
	rev1 := rig.src.publish(t, repoTree(t, good))
	rig.src.create(t)
	for _, name := range []string{"app-kustomization.yaml", "models-kustomization.yaml"} {
		rig.createKustomization(t, filepath.Join(localrun.ExamplesDir(), "flux", name), ns)
	}
	ks := rig.waitKustomization(t, modelsKs, "Ready at "+rev1, func(ks *unstructured.Unstructured) bool {
		return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev1
	})
	m := getModel(t, ns)
	modelReady := apimeta.FindStatusCondition(m.Status.Conditions, v1alpha1.ReadyCondition)
	if modelReady == nil || modelReady.Status != metav1.ConditionTrue {
		t.Fatalf("the Kustomization is Ready, the model is not: %v", m.Status.Conditions)
	}
	if ksReady := readyCondition(ks); ksReady.LastTransitionTime.Before(&modelReady.LastTransitionTime) {
		t.Errorf("the Kustomization became Ready at %s, before the model (%s)", ksReady.LastTransitionTime, modelReady.LastTransitionTime)
	}
	t.Logf("first apply: model Ready at %s, Kustomization Ready at %s", modelReady.LastTransitionTime.Format(time.TimeOnly), readyCondition(ks).LastTransitionTime.Format(time.TimeOnly))

	// With the Alert CRD as shipped the operator's events (the first
	// rollout's, forwarded while alerts.yaml's Alert existed) reach
	// notification-controller and are discarded, and an Alert that would
	// select them is rejected; the published patch lets it in.
	eventually(t, "notification-controller discards the operator's events", func() (bool, string) {
		l := discarded(rig.ncLog, "OpenMedModel", ns, modelName)
		return l != "", "no such line in " + rig.ncLog
	})
	t.Logf("with the Alert CRD as shipped: %s", discarded(rig.ncLog, "OpenMedModel", ns, modelName))
	err = rig.createAlert(t, "model-alerts.yaml", ns)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `Unsupported value: "OpenMedModel"`) {
		t.Fatalf("an Alert naming OpenMedModel with the CRD as shipped: %v, want rejected (Unsupported value)", err)
	}
	t.Logf("with the Alert CRD as shipped: %v", err)
	rig.patchAlertCRD(t)
	if err := rig.createAlert(t, "model-alerts.yaml", ns); err != nil {
		t.Fatalf("model-alerts.yaml with the patched CRD: %v", err)
	}
	rig.receiver.waitAlertsLive(t, rig, ns)

	// A version that never becomes ready: the model rolls back and is
	// Stalled, and the Kustomization fails early, naming the model.
	rev2 := rig.src.publish(t, repoTree(t, brokenVersion))
	published := time.Now()
	ks = rig.waitKustomization(t, modelsKs, "failed at "+rev2, func(ks *unstructured.Unstructured) bool {
		c := readyCondition(ks)
		return c.Status == metav1.ConditionFalse && lastAttempted(ks) == rev2 && c.Reason == "HealthCheckFailed"
	})
	failed := time.Now()
	ksID := "Kustomization/" + fluxNamespace + "/" + modelsKs
	modelID := "OpenMedModel/" + ns + "/" + modelName
	ksAlert := rig.receiver.wait(t, "the Kustomization's failure", func(e eventv1.Event) bool {
		return involved(e) == ksID && e.Severity == eventv1.EventSeverityError
	})
	modelAlert := rig.receiver.wait(t, "the model's failure", func(e eventv1.Event) bool {
		return involved(e) == modelID && e.Severity == eventv1.EventSeverityError
	})
	if want := fmt.Sprintf("OpenMedModel/%s/%s status: 'Failed'", ns, modelName); !strings.Contains(ksAlert.event.Message, want) {
		t.Errorf("the Kustomization's Alert delivered %q, want the failure naming %s", ksAlert.event.Message, want)
	}
	// notification-controller delivers the metadata without the group prefix.
	md := func(e eventv1.Event, key string) string {
		return e.Metadata[strings.TrimPrefix(key, v1alpha1.GroupVersion.Group+"/")]
	}
	if e := modelAlert.event; e.Reason != v1alpha1.RolloutFailedReason || md(e, controllers.MetaRevision) != brokenVersion ||
		md(e, controllers.MetaServing) != good || md(e, controllers.MetaHealth) != "Progressing" || !strings.Contains(md(e, controllers.MetaHealthMessage), brokenVersion) ||
		!strings.Contains(md(e, controllers.MetaHealthMessage), good) {
		t.Errorf("the model's Alert delivered %s %q %v, want RolloutFailed with revision %s, serving %s, health Progressing (rolling back) and a health message naming both", e.Reason, e.Message, e.Metadata, brokenVersion, good)
	}
	t.Logf("commit of a never-ready version -> first delivery: Kustomization Alert %s (%q), model Alert %s (%s %q %v)",
		ksAlert.at.Sub(published).Round(100*time.Millisecond), ksAlert.event.Message,
		modelAlert.at.Sub(published).Round(100*time.Millisecond), modelAlert.event.Reason, modelAlert.event.Message, modelAlert.event.Metadata)
	msg := readyCondition(ks).Message
	wantID := fmt.Sprintf("OpenMedModel/%s/%s status: 'Failed'", ns, modelName)
	if !strings.Contains(msg, "failed early due to stalled resources") || !strings.Contains(msg, wantID) {
		t.Errorf("Kustomization message %q, want a failure before the timeout naming %s", msg, wantID)
	}
	if strings.Contains(msg, "Deployment/") {
		t.Errorf("the Kustomization blames the Deployment: %q", msg)
	}
	m = getModel(t, ns)
	if m.Status.Phase != v1alpha1.PhaseRolledBack || m.Status.ActiveVersion != good {
		t.Errorf("model after the failed version: phase %s, active %s", m.Status.Phase, m.Status.ActiveVersion)
	}
	t.Logf("never-ready version: Kustomization failed %s after the commit (model deadline %ds, Kustomization timeout 15m): %s",
		failed.Sub(published).Round(100*time.Millisecond), fluxDeadlineSeconds, msg)

	// One delivery of the failure per reconciliation of the Kustomization:
	// its message carries how long the health check waited, so
	// notification-controller's duplicate filter does not merge two.
	ksFailed := func(e eventv1.Event) bool { return involved(e) == ksID && e.Severity == eventv1.EventSeverityError }
	if n := rig.receiver.count(ksFailed); n != 1 {
		t.Errorf("the Kustomization's Alert delivered %d failures after one reconciliation, want 1:\n%s", n, rig.receiver.dump())
	}

	// `flux get kustomizations` shows the failure.
	out := rig.flux(t, 0, "get", "kustomizations", "-n", fluxNamespace)
	if row := line(out, modelsKs); !strings.Contains(row, "False") || !strings.Contains(row, "OpenMedModel/"+ns+"/"+modelName) {
		t.Errorf("flux get ks, the failed models row: %q\n%s", row, out)
	}

	// The flux CLI waits for Ready until its own timeout while a model is
	// failed (the Kustomization is Ready=False without Stalled, which
	// kstatus reads as in progress).
	start := time.Now()
	out, code := rig.fluxRun(t, "reconcile", "kustomization", modelsKs, "-n", fluxNamespace, "--timeout", "20s")
	if code == 0 {
		t.Errorf("flux reconcile ks succeeded while the model is failed:\n%s", out)
	}
	t.Logf("flux reconcile ks while failed: exit %d after %s:\n%s", code, time.Since(start).Round(100*time.Millisecond), out)

	// The bad commit reverted: Ready again.
	rev3 := rig.src.publish(t, repoTree(t, good))
	reverted := time.Now()
	rig.waitKustomization(t, modelsKs, "Ready at "+rev3, func(ks *unstructured.Unstructured) bool {
		return readyCondition(ks).Status == metav1.ConditionTrue && lastApplied(ks) == rev3
	})
	t.Logf("revert: Kustomization Ready %s after the commit", time.Since(reverted).Round(100*time.Millisecond))
	// One delivery per failure: notification-controller's duplicate filter
	// holds the Kustomization's repeated health-check failures, and the
	// revert is no error.
	// `flux reconcile` reconciled it once more while failed: one more
	// delivery; the revert none.
	if n := rig.receiver.count(ksFailed); n != 2 {
		t.Errorf("the Kustomization's Alert delivered %d failures, want 2 (the commit's and the flux reconcile's):\n%s", n, rig.receiver.dump())
	}
	if n := rig.receiver.count(func(e eventv1.Event) bool { return involved(e) == modelID && e.Severity == eventv1.EventSeverityError }); n != 1 {
		t.Errorf("the model's Alert delivered %d errors, want 1:\n%s", n, rig.receiver.dump())
	}
	if m := getModel(t, ns); !apimeta.IsStatusConditionTrue(m.Status.Conditions, v1alpha1.ReadyCondition) || m.Status.ActiveVersion != good {
		t.Errorf("model after the revert: %s %v", m.Status.ActiveVersion, m.Status.Conditions)
	}

	// `flux reconcile kustomization --with-source` as a user runs it.
	start = time.Now()
	out = rig.flux(t, 0, "reconcile", "kustomization", modelsKs, "-n", fluxNamespace, "--with-source", "--timeout", "2m")
	for _, want := range []string{"fetched revision " + rev3, "applied revision " + rev3} {
		if !strings.Contains(out, want) {
			t.Errorf("flux reconcile ks --with-source: no %q in\n%s", want, out)
		}
	}
	t.Logf("flux reconcile ks --with-source took %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)

	out = rig.flux(t, 0, "get", "kustomizations", "-n", fluxNamespace)
	short := rev3[:len("main@sha1:")+8]
	for _, name := range []string{appKs, modelsKs} {
		if row := line(out, name); !strings.Contains(row, "True") || !strings.Contains(row, "Applied revision: "+short) {
			t.Errorf("flux get ks, row %s: %q\n%s", name, row, out)
		}
	}
	t.Logf("flux get ks:\n%s", out)
}

// fluxRig is kustomize-controller, the flux CLI and the source stand-in.
type fluxRig struct {
	dir        string
	kubeconfig string
	src        *gitSource
	// events is notification-controller's event endpoint, ncDir where
	// `make fluxbin` put it, ncLog its log.
	events, ncDir, ncLog string
	receiver             *fluxReceiver
}

func startFlux(t *testing.T) *fluxRig {
	t.Helper()
	dir := os.Getenv(fluxDirEnv)
	if dir == "" {
		t.Fatalf("%s is not set: run `make fluxbin` and point it at the directory (make test does both)", fluxDirEnv)
	}
	for _, bin := range []string{"kustomize-controller", "flux"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			t.Fatalf("Flux binaries missing, run `make fluxbin`: %v", err)
		}
	}
	rig := &fluxRig{dir: dir, kubeconfig: cluster.KubeconfigPath(), ncDir: os.Getenv(fluxNotificationDirEnv)}
	if _, err := os.Stat(filepath.Join(rig.ncDir, "notification-controller")); err != nil {
		t.Fatalf("notification-controller missing (%s), run `make fluxbin`: %v", fluxNotificationDirEnv, err)
	}
	installCRDs(t, filepath.Join(dir, "crds"))
	installCRDs(t, filepath.Join(rig.ncDir, "crds"))
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rig.src = startGitSource(t)
	rig.receiver = startFluxReceiver(t)

	eventsAddr := freeAddr(t)
	rig.events = "http://" + eventsAddr + "/"
	logDir := t.TempDir()
	nc := exec.Command(filepath.Join(rig.ncDir, "notification-controller"),
		"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--events-addr="+eventsAddr, "--receiverAddr="+freeAddr(t),
		"--watch-all-namespaces=true", "--log-level=info", "--log-encoding=console")
	nc.Env = append(os.Environ(), "KUBECONFIG="+rig.kubeconfig, "RUNTIME_NAMESPACE="+fluxNamespace)
	startChild(t, "notification-controller", logDir, nc, nil)
	rig.ncLog = filepath.Join(logDir, "notification-controller.log")

	cmd := exec.Command(filepath.Join(dir, "kustomize-controller"),
		"--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0", "--events-addr="+rig.events,
		"--watch-all-namespaces=true", "--requeue-dependency=5s", "--log-level=info", "--log-encoding=console")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+rig.kubeconfig, "RUNTIME_NAMESPACE="+fluxNamespace)
	startChild(t, "kustomize-controller", t.TempDir(), cmd, nil)
	return rig
}

// installCRDs creates the Flux CRDs in dir once and waits until they serve.
func installCRDs(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Flux CRDs in %s (run `make fluxbin`): %v", dir, err)
	}
	ctx := context.Background()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := k8s.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		eventually(t, "CRD "+crd.Name+" established", func() (bool, string) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
				return false, err.Error()
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, ""
				}
			}
			return false, "not established"
		})
	}
}

// repoTree is the Git repository at one commit: ./app holds the chart's
// ConfigMap and Deployment (examples/target-deployment.yaml without
// spec.replicas, which the model sets), ./models the example model at
// version with a short progress deadline.
func repoTree(t *testing.T, version string) map[string][]byte {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() == "Deployment" {
			unstructured.RemoveNestedField(u.Object, "spec", "replicas")
		}
	}
	app, err := localrun.MarshalObjects(objs)
	if err != nil {
		t.Fatal(err)
	}
	models, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil || len(models) != 1 {
		t.Fatalf("%s: %v", localrun.ModelExample, err)
	}
	m := models[0].Object
	models[0].SetLabels(map[string]string{operatorLabel: fluxOperator})
	if err := unstructured.SetNestedField(m, version, "spec", "version"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(m, int64(fluxDeadlineSeconds), "spec", "rolloutStrategy", "progressDeadlineSeconds"); err != nil {
		t.Fatal(err)
	}
	model, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"app/target.yaml": app, "models/openmedmodel.yaml": model}
}

// createKustomization creates the published Kustomization in path with its
// targetNamespace set to ns.
func (r *fluxRig) createKustomization(t *testing.T, path, ns string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := unstructured.SetNestedField(u.Object, ns, "spec", "targetNamespace"); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	// Deleted while kustomize-controller runs, so it prunes what it applied.
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), u); err != nil {
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(kustomizationGVK)
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(u), got); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("Kustomization %s still terminating after 30s", u.GetName())
	})
}

// waitKustomization polls the Kustomization until cond holds.
func (r *fluxRig) waitKustomization(t *testing.T, name, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var ks *unstructured.Unstructured
	eventually(t, "Kustomization "+name+" "+what, func() (bool, string) {
		ks = &unstructured.Unstructured{}
		ks.SetGroupVersionKind(kustomizationGVK)
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: fluxNamespace, Name: name}, ks); err != nil {
			return false, err.Error()
		}
		c := readyCondition(ks)
		return cond(ks), fmt.Sprintf("Ready=%s %s %q, applied %s, attempted %s", c.Status, c.Reason, c.Message, lastApplied(ks), lastAttempted(ks))
	})
	return ks
}

// flux runs the flux CLI and fails the test unless it exits with want.
func (r *fluxRig) flux(t *testing.T, want int, args ...string) string {
	t.Helper()
	out, code := r.fluxRun(t, args...)
	if code != want {
		t.Fatalf("flux %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

func (r *fluxRig) fluxRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.dir, "flux"), append([]string{"--kubeconfig", r.kubeconfig}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("flux %s: %v", strings.Join(args, " "), err)
		return "", -1
	}
}

func readyCondition(u *unstructured.Unstructured) metav1.Condition {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, item := range conditions {
		c, _ := item.(map[string]any)
		if c["type"] != "Ready" {
			continue
		}
		var out metav1.Condition
		if err := fromUnstructured(&unstructured.Unstructured{Object: c}, &out); err == nil {
			return out
		}
	}
	return metav1.Condition{Status: metav1.ConditionUnknown}
}

func lastApplied(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	return s
}

func lastAttempted(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", "lastAttemptedRevision")
	return s
}

func getModel(t *testing.T, ns string) *v1alpha1.OpenMedModel {
	t.Helper()
	m := &v1alpha1.OpenMedModel{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: modelName}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// line returns the first line of out that starts with name.
func line(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), name+" ") || strings.HasPrefix(strings.TrimSpace(l), name+"\t") {
			return l
		}
	}
	return ""
}

// gitSource plays source-controller for one GitRepository: it serves each
// published tree as a tarball on loopback and writes the GitRepository's
// status as source-controller does (artifact, Ready, ArtifactInStorage, the
// handled reconcile request).
type gitSource struct {
	url  string
	name string

	mu       sync.Mutex
	blobs    map[string][]byte
	commits  int
	artifact map[string]any
}

func startGitSource(t *testing.T) *gitSource {
	t.Helper()
	return startNamedGitSource(t, gitRepository)
}

// startNamedGitSource is startGitSource for the GitRepository name.
func startNamedGitSource(t *testing.T, name string) *gitSource {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gitSource{url: "http://" + ln.Addr().String(), name: name, blobs: map[string][]byte{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		g.mu.Lock()
		blob, ok := g.blobs[strings.TrimPrefix(req.URL.Path, "/")]
		g.mu.Unlock()
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/x-gzip")
		_, _ = w.Write(blob)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	// Reconcile requests (flux reconcile source git, --with-source) are
	// handled as source-controller does: the same artifact, the request
	// recorded as handled.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			g.handleRequests()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		_ = srv.Close()
		repo := &unstructured.Unstructured{}
		repo.SetGroupVersionKind(gitRepositoryGVK)
		repo.SetNamespace(fluxNamespace)
		repo.SetName(g.name)
		_ = k8s.Delete(context.Background(), repo)
	})
	return g
}

// publish makes tree the repository's newest commit and returns its
// revision. Every commit has its own revision, also a revert to an older
// tree, as in Git.
func (g *gitSource) publish(t *testing.T, tree map[string][]byte) string {
	t.Helper()
	blob := tarball(t, tree)
	g.mu.Lock()
	g.commits++
	commit := sha1.Sum(append([]byte(fmt.Sprintf("commit %d\n", g.commits)), blob...))
	digest := sha256.Sum256(blob)
	sha := hex.EncodeToString(commit[:])
	name := sha + ".tar.gz"
	g.blobs[name] = blob
	revision := "main@sha1:" + sha
	g.artifact = map[string]any{
		"path":           fmt.Sprintf("gitrepository/%s/%s/%s", fluxNamespace, g.name, name),
		"url":            g.url + "/" + name,
		"revision":       revision,
		"digest":         "sha256:" + hex.EncodeToString(digest[:]),
		"lastUpdateTime": time.Now().UTC().Format(time.RFC3339),
		"size":           int64(len(blob)),
	}
	g.mu.Unlock()
	if g.commits > 1 {
		if err := g.writeStatus(""); err != nil {
			t.Fatal(err)
		}
	}
	return revision
}

// create creates the GitRepository with the newest commit as its artifact.
func (g *gitSource) create(t *testing.T) {
	t.Helper()
	repo := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"url":      "https://git.example.com/platform/openmed.git",
			"interval": "10m",
			"ref":      map[string]any{"branch": "main"},
		},
	}}
	repo.SetGroupVersionKind(gitRepositoryGVK)
	repo.SetNamespace(fluxNamespace)
	repo.SetName(g.name)
	if err := k8s.Create(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	if err := g.writeStatus(""); err != nil {
		t.Fatal(err)
	}
}

// writeStatus writes the GitRepository status for the newest commit;
// handled, when set, is the reconcile request it answers.
func (g *gitSource) writeStatus(handled string) error {
	ctx := context.Background()
	repo := &unstructured.Unstructured{}
	repo.SetGroupVersionKind(gitRepositoryGVK)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: fluxNamespace, Name: g.name}, repo); err != nil {
		return err
	}
	g.mu.Lock()
	artifact := g.artifact
	g.mu.Unlock()
	now := time.Now().UTC().Format(time.RFC3339)
	gen := repo.GetGeneration()
	msg := fmt.Sprintf("stored artifact for revision '%s'", artifact["revision"])
	status := map[string]any{
		"observedGeneration": gen,
		"artifact":           artifact,
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded", "message": msg, "observedGeneration": gen, "lastTransitionTime": now},
			map[string]any{"type": "ArtifactInStorage", "status": "True", "reason": "Succeeded", "message": msg, "observedGeneration": gen, "lastTransitionTime": now},
		},
	}
	if handled == "" {
		handled, _, _ = unstructured.NestedString(repo.Object, "status", "lastHandledReconcileAt")
	}
	if handled != "" {
		status["lastHandledReconcileAt"] = handled
	}
	repo.Object["status"] = status
	return k8s.Status().Update(ctx, repo)
}

// handleRequests answers a new reconcile.fluxcd.io/requestedAt.
func (g *gitSource) handleRequests() {
	repo := &unstructured.Unstructured{}
	repo.SetGroupVersionKind(gitRepositoryGVK)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: fluxNamespace, Name: g.name}, repo); err != nil {
		return
	}
	requested := repo.GetAnnotations()["reconcile.fluxcd.io/requestedAt"]
	handled, _, _ := unstructured.NestedString(repo.Object, "status", "lastHandledReconcileAt")
	if requested != "" && requested != handled {
		_ = g.writeStatus(requested)
	}
}

// tarball is tree as a gzipped tar, in name order with fixed times, as
// source-controller packs an artifact.
func tarball(t *testing.T, tree map[string][]byte) []byte {
	t.Helper()
	names := make([]string, 0, len(tree))
	for name := range tree {
		names = append(names, name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{}
	for _, name := range names {
		if dir := filepath.Dir(name); dir != "." && !dirs[dir] {
			dirs[dir] = true
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				t.Fatal(err)
			}
		}
		data := tree[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fluxObjects reads a published examples/flux file with the Provider's
// address pointed at receiverURL and the eventSources of kind OpenMedModel
// at ns, as a user edits them.
func fluxObjects(t *testing.T, name, receiverURL, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "flux", name))
	if err != nil || len(objs) == 0 {
		t.Fatalf("%s: %v", name, err)
	}
	for _, u := range objs {
		switch u.GetKind() {
		case "Provider":
			if err := unstructured.SetNestedField(u.Object, receiverURL, "spec", "address"); err != nil {
				t.Fatal(err)
			}
		case "Alert":
			sources, _, _ := unstructured.NestedSlice(u.Object, "spec", "eventSources")
			for _, src := range sources {
				if m, _ := src.(map[string]any); m["kind"] == "OpenMedModel" {
					m["namespace"] = ns
				}
			}
			if err := unstructured.SetNestedSlice(u.Object, sources, "spec", "eventSources"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return objs
}

// applyAlerts creates every object of the published file, and deletes them
// when the test ends.
func (r *fluxRig) applyAlerts(t *testing.T, name, ns string) {
	t.Helper()
	for _, u := range fluxObjects(t, name, r.receiver.url, ns) {
		if err := k8s.Create(context.Background(), u); err != nil {
			t.Fatalf("%s %s: %v", name, u.GetName(), err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
	}
}

// createAlert creates the one Alert of the published file and returns the
// API server's answer.
func (r *fluxRig) createAlert(t *testing.T, name, ns string) error {
	t.Helper()
	objs := fluxObjects(t, name, r.receiver.url, ns)
	if len(objs) != 1 || objs[0].GroupVersionKind() != alertGVK {
		t.Fatalf("%s: want one Alert, got %d objects", name, len(objs))
	}
	u := objs[0]
	err := k8s.Create(context.Background(), u)
	if err == nil {
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
	}
	return err
}

// patchAlertCRD builds the Alert CRD as notification-controller ships it
// with examples/flux/alert-crd-patch.yaml, as a user's flux-system
// kustomization.yaml does, applies it and waits until the API server
// accepts OpenMedModel.
func (r *fluxRig) patchAlertCRD(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for src, dst := range map[string]string{
		filepath.Join(r.ncDir, "crds", "notification.toolkit.fluxcd.io_alerts.yaml"): "gotk-components.yaml",
		filepath.Join(localrun.ExamplesDir(), "flux", "alert-crd-patch.yaml"):        "alert-crd-patch.yaml",
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kustomization := "resources:\n- gotk-components.yaml\npatches:\n- path: alert-crd-patch.yaml\n  target:\n    kind: CustomResourceDefinition\n    name: " + alertCRD + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := kustomize.Build(dir)
	if err != nil || len(objs) != 1 {
		t.Fatalf("kustomize build of the Alert CRD with the patch: %d objects, %v", len(objs), err)
	}
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: alertCRD}, crd); err != nil {
		t.Fatal(err)
	}
	shipped := crd.Spec.DeepCopy()
	objs[0].SetResourceVersion(crd.ResourceVersion)
	if err := k8s.Update(ctx, objs[0]); err != nil {
		t.Fatalf("update the Alert CRD: %v", err)
	}
	// The next TestFlux in this cluster starts from the CRD as shipped.
	t.Cleanup(func() {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: alertCRD}, got); err != nil {
				return err
			}
			got.Spec = *shipped
			return k8s.Update(ctx, got)
		})
		if err != nil {
			t.Errorf("restore the Alert CRD as shipped: %v", err)
		}
	})
	eventually(t, "the patched Alert CRD serves", func() (bool, string) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: alertCRD}, got); err != nil {
			return false, err.Error()
		}
		enum := got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["eventSources"].Items.Schema.Properties["kind"].Enum
		for _, v := range enum {
			if string(v.Raw) == `"OpenMedModel"` {
				// The API server validates with the new schema once it
				// answers a dry run with it.
				probe := fluxObjects(t, "model-alerts.yaml", r.receiver.url, "default")[0]
				probe.SetName("crd-probe")
				err := k8s.Create(ctx, probe, client.DryRunAll)
				return err == nil, fmt.Sprintf("dry run: %v", err)
			}
		}
		return false, "OpenMedModel not in the enum"
	})
}

// discarded is notification-controller's log line discarding an event of
// kind/ns/name for want of an Alert, or "".
func discarded(logPath, kind, ns, name string) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "discarding event, no alerts found for the involved object") &&
			strings.Contains(l, kind) && strings.Contains(l, ns) && strings.Contains(l, name) {
			return l
		}
	}
	return ""
}

// involved is an event's involved object as Kind/namespace/name.
func involved(e eventv1.Event) string {
	o := e.InvolvedObject
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// fluxReceiver is the generic Provider's webhook on loopback: it keeps
// every event notification-controller delivers, with when it came.
type fluxReceiver struct {
	url string

	mu  sync.Mutex
	got []delivery
}

type delivery struct {
	at    time.Time
	event eventv1.Event
}

func startFluxReceiver(t *testing.T) *fluxReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &fluxReceiver{url: "http://" + ln.Addr().String() + "/flux"}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e eventv1.Event
		if err := json.NewDecoder(req.Body).Decode(&e); err != nil {
			t.Errorf("receiver: a body that is not a Flux event: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, delivery{at: time.Now(), event: e})
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// wait returns the first delivery that match accepts, waiting for it.
func (r *fluxReceiver) wait(t *testing.T, what string, match func(eventv1.Event) bool) delivery {
	t.Helper()
	var found delivery
	eventually(t, "delivery of "+what, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range r.got {
			if match(d.event) {
				found = d
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d deliveries, none matches", len(r.got))
	})
	return found
}

func (r *fluxReceiver) count(match func(eventv1.Event) bool) int {
	return r.countSince(time.Time{}, match)
}

// countSince counts the deliveries at or after from that match accepts.
func (r *fluxReceiver) countSince(from time.Time, match func(eventv1.Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.got {
		if !d.at.Before(from) && match(d.event) {
			n++
		}
	}
	return n
}

func (r *fluxReceiver) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, d := range r.got {
		fmt.Fprintf(&b, "%s %s %s %s %q %v\n", d.at.Format(time.TimeOnly), involved(d.event), d.event.Severity, d.event.Reason, d.event.Message, d.event.Metadata)
	}
	return b.String()
}

// waitAlertsLive posts probe events for an OpenMedModel of ns named
// alert-probe to notification-controller, as the operator posts its own,
// until one is delivered: notification-controller then routes by the
// Alerts just created.
func (r *fluxReceiver) waitAlertsLive(t *testing.T, rig *fluxRig, ns string) {
	t.Helper()
	n := 0
	eventually(t, "notification-controller delivers by the new Alert", func() (bool, string) {
		if r.count(func(e eventv1.Event) bool { return e.InvolvedObject.Name == "alert-probe" }) > 0 {
			return true, ""
		}
		n++
		e := eventv1.Event{
			InvolvedObject: corev1.ObjectReference{Kind: "OpenMedModel", APIVersion: v1alpha1.GroupVersion.String(), Namespace: ns, Name: "alert-probe"},
			Severity:       eventv1.EventSeverityError, Timestamp: metav1.Now(), Reason: "Probe",
			Message: fmt.Sprintf("probe %d", n), ReportingController: "e2e", ReportingInstance: "e2e",
		}
		body, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(rig.events, "application/json", bytes.NewReader(body))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return false, fmt.Sprintf("probe %d: %s", n, resp.Status)
	})
}
