package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/pkg/testenv"
)

// update rewrites the golden files under testdata/golden.
var update = flag.Bool("update", false, "rewrite golden files")

var (
	env *testenv.Environment
	dyn dynamic.Interface
	// kubeconfig is a kubeconfig for env with two contexts: "models"
	// (current, namespace models) and "lab" (namespace lab).
	kubeconfig []byte
)

// testNow is the plugin's clock in these tests: 10h30m after the start, so
// every object created by a test is "10h" old in tables.
var testNow = time.Now().Add(10*time.Hour + 30*time.Minute)

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Environment) {
		env = e
		var err error
		if dyn, err = dynamic.NewForConfig(e.Config); err != nil {
			panic(err)
		}
		if kubeconfig, err = kubeconfigFor(e.Config); err != nil {
			panic(err)
		}
	})
}

// kubeconfigFor writes cfg as a kubeconfig, so the tests go through the same
// loading rules and flags as a user.
func kubeconfigFor(cfg *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["models"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "models"}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "lab"}
	kc.CurrentContext = "models"
	return clientcmd.Write(*kc)
}

// kubeconfigFile writes the test kubeconfig into a fresh file.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is what one run of the plugin printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// run executes the plugin in-process with the test kubeconfig.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runWith(t, Options{}, append([]string{"--kubeconfig", kubeconfigFile(t)}, args...)...)
}

// runWith executes the plugin with opts (the clock defaults to testNow)
// and exactly args.
func runWith(t *testing.T, opts Options, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	opts.Out, opts.ErrOut = &out, &errOut
	if opts.Now == nil {
		opts.Now = func() time.Time { return testNow }
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, args, opts)
	return result{stdout: out.String(), stderr: errOut.String(), err: err}
}

// readFixture reads testdata/<name> as an object.
func readFixture(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return u
}

// create makes the fixture as an OpenMedModel ns/name with the fixture's
// status written through the status subresource, the way the operator
// writes it, and deletes it when the test ends.
func create(t *testing.T, fixture, ns, name string) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	ensureNamespace(t, ns)
	u := readFixture(t, fixture)
	st, hasStatus := u.Object["status"]
	delete(u.Object, "status")
	u.SetNamespace(ns)
	u.SetName(name)
	client := dyn.Resource(resource).Namespace(ns)
	created, err := client.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s from %s: %v", name, fixture, err)
	}
	t.Cleanup(func() {
		if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s/%s: %v", ns, name, err)
		}
	})
	if !hasStatus {
		return created
	}
	created.Object["status"] = st
	updated, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("write status of %s from %s: %v", name, fixture, err)
	}
	return updated
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// fetch reads ns/name directly.
func fetch(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := dyn.Resource(resource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// golden compares got with testdata/golden/<name>, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
