package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// operator stands in for the operator: once a reconcile request appears on
// ns/name it records the request as handled and writes status, the way the
// operator ends a pass. A nil status means nobody handles requests.
func operator(t *testing.T, ns, name string, status map[string]any) {
	t.Helper()
	if status == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		client := dyn.Resource(resource).Namespace(ns)
		err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			u, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			token := u.GetAnnotations()[meta.ReconcileRequestAnnotation]
			if token == "" {
				return false, nil
			}
			st := (&unstructured.Unstructured{Object: status}).DeepCopy().Object
			st["lastHandledReconcileAt"] = token
			u.Object["status"] = st
			_, err = client.UpdateStatus(ctx, u, metav1.UpdateOptions{})
			// A conflict means the object moved on; read it again.
			return err == nil, ignoreConflict(err)
		})
		if err != nil && ctx.Err() == nil {
			t.Errorf("operator stand-in: %v", err)
		}
	}()
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// fixtureStatus is the status of a fixture.
func fixtureStatus(t *testing.T, fixture string) map[string]any {
	t.Helper()
	st, _ := readFixture(t, fixture).Object["status"].(map[string]any)
	return st
}

func TestReconcile(t *testing.T) {
	token := testNow.Format(time.RFC3339Nano)
	annotated := "► annotating OpenMedModel m in actions namespace\n✔ OpenMedModel annotated\n"
	waiting := annotated + "◎ waiting for OpenMedModel reconciliation\n"
	tests := []struct {
		name    string
		fixture string
		args    []string
		// handle is the status the operator stand-in writes; nil means no
		// operator.
		handle  map[string]any
		wantOut string
		wantErr string
		// within bounds the run time: a failure must end the wait at once.
		within time.Duration
	}{
		{name: "without waiting", fixture: "ready.yaml", wantOut: annotated},
		{name: "waits until Ready", fixture: "ready.yaml", args: []string{"--wait"}, handle: fixtureStatus(t, "ready.yaml"),
			wantOut: waiting + "✔ OpenMedModel reconciliation completed\n✔ serving version " + v3 + "\n"},
		{name: "kstatus Failed ends the wait at once", fixture: "ready.yaml", args: []string{"--wait", "--timeout", "1m"}, handle: fixtureStatus(t, "rolled_back.yaml"),
			wantOut: waiting, wantErr: "OpenMedModel actions/m reconciliation failed: Failed: Desired spec is held at a retained version.", within: 20 * time.Second},
		{name: "Current without Ready", fixture: "ready.yaml", args: []string{"--wait"}, handle: map[string]any{"observedGeneration": int64(1), "phase": "Pending"},
			wantOut: waiting, wantErr: "reconciliation failed: no Ready condition"},
		{name: "still in progress at the timeout", fixture: "ready.yaml", args: []string{"--wait", "--timeout", "500ms"}, handle: fixtureStatus(t, "rolling_out.yaml"),
			wantOut: waiting, wantErr: "timed out after 500ms waiting for OpenMedModel actions/m to finish reconciling"},
		{name: "nobody handles the request", fixture: "ready.yaml", args: []string{"--wait", "--timeout", "300ms"},
			wantOut: waiting, wantErr: "timed out after 300ms waiting for OpenMedModel actions/m to handle the request"},
		{name: "suspended", fixture: "suspended.yaml", args: []string{"--wait"},
			wantErr: "OpenMedModel actions/m is suspended: resume it first (kubectl openmed resume m)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			create(t, tc.fixture, "actions", "m")
			operator(t, "actions", "m", tc.handle)
			start := time.Now()
			res := runWith(t, Options{PollInterval: 50 * time.Millisecond},
				append([]string{"--kubeconfig", kubeconfigFile(t), "-n", "actions", "reconcile", "m"}, tc.args...)...)
			if tc.within > 0 && time.Since(start) > tc.within {
				t.Errorf("took %s, want under %s", time.Since(start), tc.within)
			}
			switch {
			case tc.wantErr == "" && res.err != nil:
				t.Fatal(res.err)
			case tc.wantErr != "" && (res.err == nil || !strings.Contains(res.err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", res.err, tc.wantErr)
			}
			if res.stdout != tc.wantOut {
				t.Errorf("stdout = %q, want %q", res.stdout, tc.wantOut)
			}
			want := ptr(token)
			if strings.HasPrefix(tc.name, "suspended") {
				want = nil
			}
			checkAnnotations(t, "actions", "m", map[string]*string{meta.ReconcileRequestAnnotation: want})
		})
	}
}

// TestRollbackPatchIsConditional shows the API server enforces the
// resourceVersion in a rollback patch: a choice made from a stale read is
// rejected with a conflict, which the command answers by choosing again.
func TestRollbackPatchIsConditional(t *testing.T) {
	u := create(t, "ready.yaml", "actions", "m")
	m, err := typed(u)
	if err != nil {
		t.Fatal(err)
	}
	patch, _, err := rollbackPatch(m, "")
	if err != nil {
		t.Fatal(err)
	}
	client := dyn.Resource(resource).Namespace("actions")
	// Another writer changes the object after it was read.
	if _, err := client.Patch(context.Background(), "m", types.MergePatchType, suspendPatch(true), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Patch(context.Background(), "m", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale rollback patch: error = %v, want a conflict", err)
	}
}
