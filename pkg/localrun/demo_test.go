package localrun_test

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/openmed/openmed-operator/pkg/localrun"
)

func TestWriteImpersonatingKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "admin.kubeconfig")
	admin := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://127.0.0.1:6443"}, "other": {Server: "https://127.0.0.1:7443"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {Token: "t"}, "other": {Token: "o"}},
		Contexts:       map[string]*clientcmdapi.Context{"c": {Cluster: "c", AuthInfo: "admin"}, "other": {Cluster: "other", AuthInfo: "other"}},
		CurrentContext: "c",
	}
	if err := clientcmd.WriteToFile(admin, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "operator.kubeconfig")
	if err := localrun.WriteImpersonatingKubeconfig(src, dst, "openmed-system", "openmed-operator"); err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.LoadFromFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Contexts) != 1 || got.Clusters["c"] == nil || got.Clusters["c"].Server != "https://127.0.0.1:6443" {
		t.Fatalf("want only the current context, got %+v", got.Contexts)
	}
	auth := got.AuthInfos["admin"]
	if auth == nil || auth.Impersonate != "system:serviceaccount:openmed-system:openmed-operator" || auth.Token != "t" {
		t.Fatalf("auth = %+v", auth)
	}
	if want := []string{"system:serviceaccounts", "system:serviceaccounts:openmed-system"}; strings.Join(auth.ImpersonateGroups, ",") != strings.Join(want, ",") {
		t.Errorf("groups = %v, want %v", auth.ImpersonateGroups, want)
	}
}

func TestManifestHashOfSelectsVersion(t *testing.T) {
	m, err := localrun.ReadModel(filepath.Join(localrun.ExamplesDir(), localrun.ModelExample))
	if err != nil {
		t.Fatal(err)
	}
	a, err := localrun.ManifestHashOf(m, "OpenMed/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := localrun.ManifestHashOf(m, "OpenMed/b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("hashes %s and %s", a, b)
	}
	if _, err := localrun.ManifestHashOf(m, "/not a version"); err == nil {
		t.Error("an invalid version gave a hash")
	}
}
