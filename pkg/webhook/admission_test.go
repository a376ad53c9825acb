package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/testenv"
	"github.com/openmed/openmed-operator/pkg/validation"
	"github.com/openmed/openmed-operator/pkg/webhook"
)

// bundle installs the default overlay without its Deployment, as a local
// run does, once for the package.
var bundle = sync.OnceValues(func() (localrun.Bundle, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return localrun.InstallBundle(ctx, env.Client, filepath.Join(kustomize.Dir(), kustomize.DefaultOverlay))
})

// webhookOperator runs the webhook (webhook.Add) in a manager of its own,
// as the bundle's ServiceAccount, on a free loopback port the
// configuration is pointed at (webhook.Options.URL), until the test ends.
func webhookOperator(t *testing.T) {
	t.Helper()
	b, err := bundle()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: localrun.ServiceAccountUser(b.ServiceAccount.Namespace, b.ServiceAccount.Name)}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	if err := webhook.Add(mgr, webhook.Options{
		Addr: addr, URL: "https://" + addr,
		Namespace: b.ServiceAccount.Namespace, SecretName: "openmed-operator-webhook-cert", ServiceName: "openmed-operator-webhook",
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// freeAddr returns a free loopback address for the webhook server to bind.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := minicluster.FreeLoopbackAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// inNamespace is model(cond) named name in ns.
func inNamespace(ns, name, cond string) *v1alpha1.OpenMedModel {
	m := model(cond)
	m.Namespace, m.Name = ns, name
	return m
}

// goOnlyCases are pkg/validation's testdata/goonly.yaml: the
// verifications the CRD accepts and the Go validator refuses.
func goOnlyCases(t *testing.T) map[string]*v1alpha1.Verification {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "pkg", "validation", "testdata", "goonly.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name string                     `json:"name"`
		Set  map[string]json.RawMessage `json:"set"`
	}
	if err := yaml.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	out := map[string]*v1alpha1.Verification{}
	for _, c := range cases {
		v := &v1alpha1.Verification{}
		if len(c.Set) != 1 || c.Set["verification"] == nil {
			t.Fatalf("goonly.yaml case %q sets %v, want spec.verification only", c.Name, c.Set)
		}
		dec := json.NewDecoder(bytes.NewReader(c.Set["verification"]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("goonly.yaml case %q: %v", c.Name, err)
		}
		out[c.Name] = v
	}
	if len(out) == 0 {
		t.Fatal("goonly.yaml has no case")
	}
	return out
}

// refusedByWebhook checks that err is the webhook's refusal: an Invalid
// status naming spec.verification.successCondition, whose message has
// the Go validator's complaints about obj, CEL's included.
func refusedByWebhook(t *testing.T, err error, obj *v1alpha1.OpenMedModel) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v, want Invalid", err)
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	if !strings.Contains(msg, `admission webhook "`+webhook.Name+`" denied the request`) {
		t.Errorf("%s: not the webhook's refusal", msg)
	}
	d := obj.DeepCopy()
	d.Default()
	want := validation.ValidateOpenMedModel(d)
	if len(want) == 0 {
		t.Fatalf("the Go validator accepts %+v", obj.Spec.Verification)
	}
	for _, e := range want {
		if !strings.Contains(msg, e.Error()) || !strings.Contains(msg, validation.MsgSuccessCondition) {
			t.Errorf("%s\nlacks the Go validator's complaint %q", msg, e.Error())
		}
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 ||
		status.Status().Details.Causes[0].Field != "spec.verification.successCondition" {
		t.Errorf("the status's causes do not name the field: %+v", status)
	}
}

// TestAdmission runs the webhook against a real kube-apiserver, through
// the bundle's ValidatingWebhookConfiguration and RBAC: a success
// condition that does not compile is refused on create and update with
// CEL's complaint; a valid one is accepted; an object stored before the
// webhook ran keeps taking changes that do not touch its bad condition,
// and one being deleted can always lose its finalizer.
func TestAdmission(t *testing.T) {
	ctx := context.Background()
	if _, err := bundle(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)

	// Stored while no operator serves the webhook: failurePolicy Ignore
	// lets the API server accept them.
	legacy := inNamespace(ns, "legacy", badCondition)
	if err := env.Client.Create(ctx, legacy); err != nil {
		t.Fatalf("with no operator serving, the API server refuses a bad condition: %v", err)
	}
	finalized := inNamespace(ns, "finalized", badCondition)
	finalized.Finalizers = []string{v1alpha1.Finalizer}
	if err := env.Client.Create(ctx, finalized); err != nil {
		t.Fatal(err)
	}

	webhookOperator(t)
	probe := inNamespace(ns, "probe", badCondition)
	testenv.Eventually(t, 30*time.Second, "the webhook refuses a bad condition", func() (bool, string) {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err), fmt.Sprint(err)
	})

	t.Run("a condition that does not compile is refused on create", func(t *testing.T) {
		for name, v := range goOnlyCases(t) {
			m := inNamespace(ns, "bad", "")
			m.Spec.Verification = v
			refusedByWebhook(t, env.Client.Create(ctx, m), m)
			if t.Failed() {
				t.Fatalf("case %q", name)
			}
		}
	})
	t.Run("a dry run is refused too", func(t *testing.T) {
		refusedByWebhook(t, env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll), probe)
	})
	t.Run("a valid condition is accepted, and a change to a bad one refused", func(t *testing.T) {
		m := inNamespace(ns, "good", goodCondition)
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		bad := m.DeepCopy()
		bad.Spec.Verification.SuccessCondition = otherCondition
		refusedByWebhook(t, env.Client.Update(ctx, bad), bad)
		if err := env.Client.Create(ctx, inNamespace(ns, "plain", "")); err != nil {
			t.Fatalf("a model without verification: %v", err)
		}
	})
	t.Run("a stored bad condition ratchets", func(t *testing.T) {
		patch := client.MergeFrom(legacy.DeepCopy())
		legacy.Labels = map[string]string{"team": "a"}
		if err := env.Client.Patch(ctx, legacy, patch); err != nil {
			t.Fatalf("a label on a model stored with a bad condition: %v", err)
		}
		legacy.Status.Phase = v1alpha1.PhaseFailed
		if err := env.Client.Status().Update(ctx, legacy); err != nil {
			t.Fatalf("a status write: %v", err)
		}
		other := legacy.DeepCopy()
		other.Spec.Verification.SuccessCondition = otherCondition
		refusedByWebhook(t, env.Client.Update(ctx, other), other)
		fixed := legacy.DeepCopy()
		fixed.Spec.Verification.SuccessCondition = goodCondition
		if err := env.Client.Update(ctx, fixed); err != nil {
			t.Fatalf("fixing the condition: %v", err)
		}
	})
	t.Run("an object being deleted loses its finalizer", func(t *testing.T) {
		if err := env.Client.Delete(ctx, finalized); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(finalized), finalized); err != nil {
			t.Fatal(err)
		}
		// A change to another bad condition, then the finalizer's
		// removal: neither is refused on an object being deleted.
		finalized.Spec.Verification.SuccessCondition = otherCondition
		if err := env.Client.Update(ctx, finalized); err != nil {
			t.Fatalf("an update of a model being deleted: %v", err)
		}
		finalized.Finalizers = nil
		if err := env.Client.Update(ctx, finalized); err != nil {
			t.Fatalf("the finalizer's removal: %v", err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(finalized), finalized); !apierrors.IsNotFound(err) {
			t.Errorf("the model is still there: %v", err)
		}
	})
	t.Run("the configuration trusts the Secret's CA", func(t *testing.T) {
		var s corev1.Secret
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "openmed-system", Name: "openmed-operator-webhook-cert"}, &s); err != nil {
			t.Fatal(err)
		}
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := env.Client.Get(ctx, types.NamespacedName{Name: webhook.ConfigurationName}, &vwc); err != nil {
			t.Fatal(err)
		}
		cc := vwc.Webhooks[0].ClientConfig
		if len(s.Data[webhook.CACertKey]) == 0 || !bytes.Equal(cc.CABundle, s.Data[webhook.CACertKey]) {
			t.Errorf("caBundle is not the Secret's ca.crt")
		}
		if cc.Service != nil || cc.URL == nil || !strings.HasSuffix(*cc.URL, webhook.Path) {
			t.Errorf("clientConfig %+v, want the operator's URL", cc)
		}
	})
}

// TestReplicasShareOneCertificate: replicas starting together on an empty
// Secret write it once between them and serve the same certificate; one
// that finds it for other hosts issues a new certificate from the same CA,
// so the caBundle does not change under the replicas that still serve
// the previous one.
func TestReplicasShareOneCertificate(t *testing.T) {
	ctx := context.Background()
	if _, err := bundle(); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-cert"}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	replica := func(hosts []string) *webhook.Provisioner {
		return &webhook.Provisioner{Client: env.Client, Reader: env.Client, Secret: client.ObjectKeyFromObject(secret), Hosts: hosts}
	}
	replicas := []*webhook.Provisioner{replica(serviceHosts), replica(serviceHosts), replica(serviceHosts)}
	var wg sync.WaitGroup
	errs := make([]error, len(replicas))
	for i, p := range replicas {
		wg.Go(func() { errs[i] = p.Sync(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	stored := webhook.FromData(secret.Data)
	for i, p := range replicas {
		served, err := p.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(served.Certificate[0], mustDER(t, stored.Cert)) {
			t.Errorf("replica %d serves a certificate that is not the Secret's", i)
		}
	}

	moved := replica(loopback)
	if err := moved.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	renewed := webhook.FromData(secret.Data)
	if !bytes.Equal(renewed.CACert, stored.CACert) || bytes.Equal(renewed.Cert, stored.Cert) {
		t.Error("a certificate for other hosts did not keep the CA, or was not renewed")
	}
	if err := renewed.Check(loopback, time.Now(), webhook.CertLifetime/3); err != nil {
		t.Error(err)
	}
}

// mustDER is the DER of the first certificate of a PEM block.
func mustDER(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	return block.Bytes
}
