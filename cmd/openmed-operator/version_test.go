package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/controllers"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// TestVersionFlag: `openmed-operator --version` prints one line, the
// version and commit the linker set, the Go toolchain and the platform,
// and exits 0 before acting on anything else: the kubeconfig it is given
// does not exist and the metrics address is not one.
func TestVersionFlag(t *testing.T) {
	cmd := exec.Command(binary, "--version", "--kubeconfig=/nonexistent/kubeconfig", "--metrics-addr=not-an-address")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent/kubeconfig")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("--version: %v\n%s", err, stderr.String())
	}
	want := fmt.Sprintf("openmed-operator %s (commit %s, %s, %s/%s)\n", testVersion, testCommit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if stdout.String() != want || stderr.Len() > 0 {
		t.Errorf("--version printed %q (stderr %q), want %q", stdout.String(), stderr.String(), want)
	}
}

// TestBuildInfoAndUserAgent runs the binary the linker stamped as a user
// the API server's audit log records, with leader election, a model whose
// writes impersonate its ServiceAccount and a scrape of /metrics (whose
// token the operator has the API server review):
//   - /metrics has one openmed_build_info series, 1, labelled with the
//     stamped version and commit and the Go toolchain;
//   - every request the API server received from the process, through
//     each of its clients (the manager's, the impersonating writer, the
//     metrics endpoint's reviews, leader election's), carries the
//     User-Agent "openmed-operator/<version> (<os>/<arch>) <commit>",
//     leader election's followed by "/leader-election";
//   - the field manager the API server names after the User-Agent (for the
//     finalizer patch, which sets none) is still "openmed-operator".
func TestBuildInfoAndUserAgent(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "version")
	objs, err := localrun.TenantRole(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := env.AddUser(auditedUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}

	p := startOperator(t, "stamped", kcPath, ns, "--enable-leader-election", "--watch-all-namespaces=false")
	createTarget(t, ns, "svc")
	m := &v1alpha1.OpenMedModel{}
	fixture(t, "model.yaml", m)
	m.Namespace, m.Name = ns, "svc"
	m.Spec.ServiceAccountName = "openmed-deployer"
	if err := env.Client.Create(ctx, m, client.FieldValidation("Strict")); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "svc", v1alpha1.PhaseRollingOut)
	completeRollout(t, ns, "svc")
	waitPhase(t, ns, "svc", v1alpha1.PhaseReady)

	var infos []sample
	for _, s := range p.scrape(t) {
		if s.name == controllers.MetricBuildInfo {
			infos = append(infos, s)
		}
	}
	wantLabels := fmt.Sprintf(`commit=%q,goversion=%q,version=%q}`, testCommit, runtime.Version(), testVersion)
	if len(infos) != 1 || infos[0].labels != wantLabels || infos[0].value != 1 {
		t.Errorf("%s series %+v, want one {%s 1", controllers.MetricBuildInfo, infos, wantLabels)
	}

	var manager string
	for _, e := range getModel(t, ns, "svc").ManagedFields {
		if e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), `"f:finalizers"`) {
			manager = e.Manager
		}
	}
	if manager != controllers.ControllerName {
		t.Errorf("the finalizer's field manager is %q, want %q", manager, controllers.ControllerName)
	}
	// The Lease is released at the graceful stop: leader election's last
	// request.
	p.terminate(t)

	agent := fmt.Sprintf("openmed-operator/%s (%s/%s) %s", testVersion, runtime.GOOS, runtime.GOARCH, testCommit)
	seen := map[string]int{}
	for _, e := range readAudit(t) {
		switch e.UserAgent {
		case agent:
		case agent + "/leader-election":
			if e.ObjectRef.Resource == "leases" {
				seen["leader election"]++
			}
			continue
		default:
			t.Errorf("%s %s: User-Agent %q, want %q", e.Verb, e.RequestURI, e.UserAgent, agent)
			continue
		}
		switch {
		case e.ImpersonatedUser.Username == "system:serviceaccount:"+ns+":openmed-deployer":
			seen["impersonated write"]++
		case e.ObjectRef.Resource == "tokenreviews" || e.ObjectRef.Resource == "subjectaccessreviews":
			seen["metrics review"]++
		default:
			seen["manager"]++
		}
	}
	for _, client := range []string{"manager", "impersonated write", "metrics review", "leader election"} {
		if seen[client] == 0 {
			t.Errorf("the audit log has no request of the operator's %s client (seen: %v)", client, seen)
		}
	}
	t.Logf("requests with the User-Agent, by client: %v", seen)
}

// auditEvent is what TestBuildInfoAndUserAgent reads of an audit event.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
}

// readAudit returns the audit log's events of auditedUser.
func readAudit(t *testing.T) []auditEvent {
	t.Helper()
	data, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if e.User.Username == auditedUser {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("the audit log has no request of %s", auditedUser)
	}
	return out
}
