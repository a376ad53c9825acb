package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
)

// argocdDirEnv names the directory `make argocdbin` builds Argo CD into: the
// argocd binary, its CRDs and git-verify-wrapper.sh.
const argocdDirEnv = "OPENMED_ARGOCD_DIR"

// argocdNamespace is where Argo CD's configuration and Applications live.
const argocdNamespace = "argocd"

// reconciliation is Argo CD's timeout.reconciliation in the suite (the
// installed manifests pass it to the controller and the repo server as
// ARGOCD_RECONCILIATION_TIMEOUT): how often an Application is compared with
// Git, and how long the repo server keeps a branch resolved. The default is
// 120 s plus up to 60 s of jitter, so without a Git webhook a commit is
// seen within about three minutes instead.
const reconciliation = 10 * time.Second

var applicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// argoRig is a real Argo CD out of cluster: Debian's redis-server, the
// repo server, the application controller and the API server, all from the
// argocd binary `make argocdbin` builds, against the suite's cluster, with
// Git served over smart HTTP on loopback.
type argoRig struct {
	dir        string
	work       string
	kubeconfig string
	server     string // argocd-server's address, for the CLI
	git        *gitServer
	// passwords of Argo CD's admin and the local accounts of
	// examples/argocd/argocd-rbac-cm.yaml.
	passwords map[string]string
	// receiver is the loopback webhook argocd-notifications posts to.
	receiver *receiver
	// repoServer is argocd-repo-server's address.
	repoServer string
}

// The local accounts of examples/argocd/argocd-rbac-cm.yaml: one may run
// the rollback action only, the other no action.
const (
	argoAdmin      = "admin"
	argoRollbacker = "model-rollbacker"
	argoViewer     = "model-viewer"
)

func startArgoCD(t *testing.T) *argoRig {
	t.Helper()
	dir := os.Getenv(argocdDirEnv)
	if dir == "" {
		t.Fatalf("%s is not set: run `make argocdbin` and point it at the directory (make test does both)", argocdDirEnv)
	}
	if _, err := os.Stat(filepath.Join(dir, "argocd")); err != nil {
		t.Fatalf("Argo CD missing, run `make argocdbin`: %v", err)
	}
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed; `make argocdbin` installs Debian's: %v", err)
	}
	rig := &argoRig{dir: dir, work: t.TempDir(), receiver: startReceiver(t)}
	installCRDs(t, filepath.Join(dir, "crds"))
	rig.configure(t)
	rig.git = startGitServer(t)

	redisAddr := freeAddr(t)
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	rig.start(t, "redis", exec.Command(redis, "--bind", "127.0.0.1", "--port", redisPort, "--save", "", "--appendonly", "no",
		"--dir", rig.work, "--protected-mode", "yes"))
	waitListening(t, "redis", redisAddr)

	repoAddr := freeAddr(t)
	rig.repoServer = repoAddr
	_, repoPort, _ := net.SplitHostPort(repoAddr)
	rig.argocd(t, "argocd-repo-server", []string{"--address", "127.0.0.1", "--port", repoPort,
		"--metrics-address", "127.0.0.1", "--metrics-port", freePort(t), "--redis", redisAddr, "--disable-tls", "--client-ca-path=",
		"--loglevel", "info"}, "ARGOCD_ASK_PASS_SOCK="+filepath.Join(rig.work, "askpass.sock"), "ARGOCD_GPG_ENABLED=false",
		"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	waitListening(t, "argocd-repo-server", repoAddr)

	// argocd-notifications with the catalog and examples/argocd/notifications.yaml.
	rig.argocd(t, "argocd-notifications", []string{"--argocd-repo-server", repoAddr, "--argocd-repo-server-plaintext",
		"--metrics-port", freePort(t), "--loglevel", "info"})

	// The controller's metrics listener has no address flag: it binds
	// every interface, on a port of the suite's choosing.
	rig.argocd(t, "argocd-application-controller", []string{"--redis", redisAddr, "--repo-server", repoAddr, "--repo-server-plaintext",
		"--metrics-port", freePort(t), "--persist-resource-health", "--loglevel", "info",
		"--self-heal-timeout-seconds", "0"})

	rig.server = freeAddr(t)
	_, serverPort, _ := net.SplitHostPort(rig.server)
	rig.argocd(t, "argocd-server", []string{"--address", "127.0.0.1", "--port", serverPort, "--metrics-address", "127.0.0.1",
		"--metrics-port", freePort(t), "--redis", redisAddr, "--repo-server", repoAddr, "--repo-server-plaintext",
		"--insecure", "--dex-server", "", "--loglevel", "info"})
	waitListening(t, "argocd-server", rig.server)
	// Authentication is on: each account logs in with its password, as a
	// user of the CLI does, into a CLI configuration of its own.
	for account := range rig.passwords {
		eventually(t, "argocd login as "+account, func() (bool, string) {
			out, err := rig.cliAs(t, account, "login", rig.server, "--username", account, "--password", rig.passwords[account])
			return err == nil, out
		})
	}
	return rig
}

// startApplicationSets starts argocd-applicationset-controller with
// progressive syncs on, against the rig's repo server, its webhook, metrics
// and probe listeners on loopback.
func (r *argoRig) startApplicationSets(t *testing.T) {
	t.Helper()
	// The controller reads the kubeconfig from $KUBECONFIG (the
	// manager's config), its namespace from --namespace.
	r.argocd(t, "argocd-applicationset-controller", []string{"--namespace", argocdNamespace, "--enable-progressive-syncs",
		"--argocd-repo-server", r.repoServer, "--repo-server-plaintext",
		"--metrics-addr", freeAddr(t), "--probe-addr", freeAddr(t), "--webhook-addr", freeAddr(t), "--loglevel", "info"})
}

// configure writes Argo CD's settings: argocd-cm with the published health
// check and actions (examples/argocd/argocd-cm.yaml) as it ships, the other
// ConfigMaps and the Secret Argo CD reads, and a kubeconfig whose context
// namespace is Argo CD's.
func (r *argoRig) configure(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: argocdNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "argocd", "argocd-cm.yaml"))
	if err != nil || len(objs) != 1 {
		t.Fatalf("examples/argocd/argocd-cm.yaml: %v", err)
	}
	rbac, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "argocd", "argocd-rbac-cm.yaml"))
	if err != nil || len(rbac) != 1 {
		t.Fatalf("examples/argocd/argocd-rbac-cm.yaml: %v", err)
	}
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	random := func(n int) string {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(b)
	}
	// The local accounts the policy names, with logins; passwords go into
	// argocd-secret as Argo CD keeps them (bcrypt).
	cm := objs[0]
	now := time.Now().UTC().Format(time.RFC3339)
	secretData := map[string]string{"server.secretkey": random(32)}
	r.passwords = map[string]string{}
	for _, account := range []string{argoAdmin, argoRollbacker, argoViewer} {
		r.passwords[account] = random(12)
		hash, err := bcrypt.GenerateFromPassword([]byte(r.passwords[account]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		prefix := "accounts." + account + "."
		if account == argoAdmin {
			prefix = "admin."
		} else if err := unstructured.SetNestedField(cm.Object, "login", "data", "accounts."+account); err != nil {
			t.Fatal(err)
		}
		secretData[prefix+"password"], secretData[prefix+"passwordMtime"] = string(hash), now
	}
	notifications := r.notificationsConfig(t)
	for _, o := range []client.Object{
		cm,
		rbac[0],
		notifications,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-notifications-secret", Namespace: argocdNamespace, Labels: partOf}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cmd-params-cm", Namespace: argocdNamespace, Labels: partOf}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: argocdNamespace, Labels: partOf},
			StringData: secretData},
	} {
		o.SetNamespace(argocdNamespace)
		// Another test's Argo CD, stopped by now, may have left its own.
		err := k8s.Create(ctx, o)
		if apierrors.IsAlreadyExists(err) {
			if err = k8s.Delete(ctx, o); err == nil {
				err = k8s.Create(ctx, o)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(cluster.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Contexts {
		c.Namespace = argocdNamespace
	}
	r.kubeconfig = filepath.Join(r.work, "argocd.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, r.kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// notificationsConfig is argocd-notifications-cm as a user installs it:
// Argo CD's catalog as it ships, with the keys of
// examples/argocd/notifications.yaml merged in, the receiver's URL in
// place of the example's. The example's templates are the catalog's with
// a webhook body added, nothing changed: checked here.
func (r *argoRig) notificationsConfig(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	catalog, err := localrun.ReadObjects(filepath.Join(r.dir, "notifications-catalog.yaml"))
	if err != nil || len(catalog) != 1 {
		t.Fatalf("Argo CD's notification catalog (make argocdbin): %v", err)
	}
	example, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), "argocd", "notifications.yaml"))
	if err != nil || len(example) != 1 {
		t.Fatalf("examples/argocd/notifications.yaml: %v", err)
	}
	cm := catalog[0]
	cm.SetNamespace(argocdNamespace)
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	ours, _, _ := unstructured.NestedStringMap(example[0].Object, "data")
	for k, v := range ours {
		if strings.HasPrefix(k, "trigger.") {
			t.Errorf("examples/argocd/notifications.yaml sets %s: the catalog's triggers are used as they ship", k)
		}
		if catalogTemplate, ok := data[k]; strings.HasPrefix(k, "template.") && (!ok || !strings.HasPrefix(v, catalogTemplate)) {
			t.Errorf("examples/argocd/notifications.yaml: %s is not the catalog's template with a webhook added", k)
		}
		data[k] = strings.ReplaceAll(v, "http://openmed-receiver.example.com/argocd", r.receiver.url+"/argocd")
	}
	if err := unstructured.SetNestedStringMap(cm.Object, data, "data"); err != nil {
		t.Fatal(err)
	}
	return cm
}

// notification is one delivery of argocd-notifications to the receiver,
// the body of examples/argocd/notifications.yaml's webhook.
type notification struct {
	At       time.Time `json:"-"`
	Event    string    `json:"event"`
	App      string    `json:"app"`
	Health   string    `json:"health"`
	Revision string    `json:"revision"`
	Models   []struct {
		Namespace, Name, Health, Message string
	} `json:"models"`
}

// receiver is a webhook on loopback that keeps what it is sent.
type receiver struct {
	url string
	mu  sync.Mutex
	got []notification
	bad []string
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{url: "http://" + l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var n notification
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if err := json.Unmarshal(body, &n); err != nil {
			rc.bad = append(rc.bad, string(body))
		} else {
			n.At = time.Now()
			rc.got = append(rc.got, n)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rc
}

// of returns the notifications of app with event ("" for any) received
// at or after from.
func (rc *receiver) of(app, event string, from time.Time) []notification {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []notification
	for _, n := range rc.got {
		if n.App == app && (event == "" || n.Event == event) && !n.At.Before(from) {
			out = append(out, n)
		}
	}
	return out
}

// unreadable are the bodies the receiver got that were not the example's
// JSON (a template that did not render as JSON).
func (rc *receiver) unreadable() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.bad...)
}

// before keeps the notifications received before t.
func (rc *receiver) before(ns []notification, t time.Time) []notification {
	var out []notification
	for _, n := range ns {
		if n.At.Before(t) {
			out = append(out, n)
		}
	}
	return out
}

// argocd starts the argocd binary as component with args.
func (r *argoRig) argocd(t *testing.T, component string, args []string, env ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(r.dir, "argocd"), args...)
	cmd.Env = append(os.Environ(),
		"ARGOCD_BINARY_NAME="+component,
		"KUBECONFIG="+r.kubeconfig,
		// https://kubernetes.default.svc means the kubeconfig's cluster,
		// as argo-cd's own Procfile runs it locally.
		"ARGOCD_FAKE_IN_CLUSTER=true",
		"ARGOCD_RECONCILIATION_TIMEOUT="+reconciliation.String(),
		"ARGOCD_RECONCILIATION_JITTER=1s",
		"ARGOCD_TLS_DATA_PATH="+filepath.Join(r.work, "tls"),
		"ARGOCD_SSH_DATA_PATH="+filepath.Join(r.work, "ssh"),
		"ARGOCD_GNUPGHOME="+filepath.Join(r.work, "gpg"),
		"HOME="+r.work,
	)
	cmd.Env = append(cmd.Env, env...)
	r.start(t, component, cmd)
}

// start runs cmd as a child that cannot outlive the test process (see
// startChild), logging to the rig's directory; with OPENMED_ARGOCD_LOGS set
// the log is copied there when it stops.
func (r *argoRig) start(t *testing.T, name string, cmd *exec.Cmd) {
	t.Helper()
	startChild(t, name, r.work, cmd, func(logPath string) {
		if dir := os.Getenv("OPENMED_ARGOCD_LOGS"); dir != "" {
			if data, err := os.ReadFile(logPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, name+".log"), data, 0o644)
			}
		}
	})
}

// startChild runs cmd as a child that cannot outlive the test process
// (minicluster.StartChild), logging to dir/name.log, and stops it at the end
// of the test: SIGTERM to its process group, SIGKILL after 10 s. stopped, if
// set, gets the log's path once it has stopped; a failed test shows the
// log's tail.
func startChild(t *testing.T, name, dir string, cmd *exec.Cmd, stopped func(logPath string)) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	waited, err := minicluster.StartChild(cmd)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-waited
		}
		logFile.Close()
		if stopped != nil {
			stopped(logPath)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, localrun.Tail(logPath, 40))
		}
	})
}

// cli runs the argocd CLI against argocd-server as Argo CD's admin and
// returns its output.
func (r *argoRig) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return r.cliAs(t, argoAdmin, args...)
}

// cliAs runs the argocd CLI as account (logged in by startArgoCD).
func (r *argoRig) cliAs(t *testing.T, account string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args = append(args, "--plaintext", "--config", filepath.Join(r.work, "cli-config-"+account))
	if args[0] != "login" {
		args = append(args, "--server", r.server)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(r.dir, "argocd"), args...)
	cmd.Env = append(os.Environ(), "ARGOCD_BINARY_NAME=argocd", "HOME="+r.work)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// freeAddr returns a loopback address for a child to bind
// (minicluster.FreeLoopbackAddrs: outside the kernel's ephemeral range, so
// no outgoing connection takes it before the child binds).
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := minicluster.FreeLoopbackAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

func freePort(t *testing.T) string {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	return port
}

func waitListening(t *testing.T, what, addr string) {
	t.Helper()
	eventually(t, what+" listening on "+addr, func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// gitServer serves bare repositories over smart HTTP on loopback with
// git's own http-backend (behind net/http/cgi), and pushes commits to them
// as a user does.
type gitServer struct {
	root string
	url  string
	srv  *http.Server
	mu   sync.Mutex
}

func startGitServer(t *testing.T) *gitServer {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	g := &gitServer{root: t.TempDir()}
	handler := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.url = "http://" + l.Addr().String()
	g.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = g.srv.Serve(l) }()
	t.Cleanup(func() { _ = g.srv.Close() })
	return g
}

// repo creates the bare repository name and a clone to commit from, and
// returns the URL Argo CD clones.
func (g *gitServer) repo(t *testing.T, name string) string {
	t.Helper()
	bare := filepath.Join(g.root, name+".git")
	g.git(t, "", "init", "--bare", "--initial-branch=main", bare)
	g.git(t, bare, "config", "http.receivepack", "true")
	g.git(t, "", "clone", g.url+"/"+name+".git", filepath.Join(g.root, "work-"+name))
	return g.url + "/" + name + ".git"
}

// commit writes files into the clone of name, commits and pushes, and
// returns the new commit.
func (g *gitServer) commit(t *testing.T, name, message string, files map[string][]byte) string {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	work := filepath.Join(g.root, "work-"+name)
	for path, data := range files {
		full := filepath.Join(work, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g.git(t, work, "add", "-A")
	g.git(t, work, "-c", "user.name=Platform Team", "-c", "user.email=platform@example.com", "commit", "-q", "-m", message)
	g.git(t, work, "push", "-q", "origin", "HEAD:main")
	return strings.TrimSpace(g.git(t, work, "rev-parse", "HEAD"))
}

func (g *gitServer) git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "HOME="+g.root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// application reads the Application name.
func application(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(applicationGVK)
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: argocdNamespace, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// createApplication creates examples/argocd/application.yaml as published,
// pointed at repoURL and path, deploying to ns, with mutate's changes.
func createApplication(t *testing.T, name, repoURL, path, ns string, mutate func(spec map[string]any)) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(localrun.ExamplesDir(), "argocd", "application.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetName(name)
	spec := u.Object["spec"].(map[string]any)
	spec["source"] = map[string]any{"repoURL": repoURL, "targetRevision": "main", "path": path}
	spec["destination"].(map[string]any)["namespace"] = ns
	if mutate != nil {
		mutate(spec)
	}
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
}

// appState is what an Application says of itself and of the model.
type appState struct {
	sync, health, healthMessage string
	modelHealth, modelMessage   string
	revision                    string
	operationStarted            string
	operationPhase              string
}

func readApp(t *testing.T, name, model string) appState {
	t.Helper()
	u := application(t, name)
	s := appStateOf(u)
	s.operationStarted, _, _ = unstructured.NestedString(u.Object, "status", "operationState", "startedAt")
	s.operationPhase, _, _ = unstructured.NestedString(u.Object, "status", "operationState", "phase")
	resources, _, _ := unstructured.NestedSlice(u.Object, "status", "resources")
	for _, item := range resources {
		r, ok := item.(map[string]any)
		if !ok || r["kind"] != "OpenMedModel" || r["name"] != model {
			continue
		}
		s.modelHealth, _, _ = unstructured.NestedString(r, "health", "status")
		s.modelMessage, _, _ = unstructured.NestedString(r, "health", "message")
	}
	return s
}

// appStateOf is what a version of an Application says of itself: sync and
// health, and the revision it was compared with.
func appStateOf(u *unstructured.Unstructured) appState {
	var s appState
	s.sync, _, _ = unstructured.NestedString(u.Object, "status", "sync", "status")
	s.revision, _, _ = unstructured.NestedString(u.Object, "status", "sync", "revision")
	s.health, _, _ = unstructured.NestedString(u.Object, "status", "health", "status")
	s.healthMessage, _, _ = unstructured.NestedString(u.Object, "status", "health", "message")
	return s
}

func (s appState) String() string {
	return fmt.Sprintf("sync=%s health=%s (%s) model=%s (%s) revision=%.8s", s.sync, s.health, s.healthMessage, s.modelHealth, s.modelMessage, s.revision)
}
