package webhook_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/openmed/openmed-operator/pkg/webhook"
)

var (
	serviceHosts = []string{"openmed-operator-webhook.openmed-system.svc", "openmed-operator-webhook.openmed-system.svc.cluster.local"}
	loopback     = []string{"127.0.0.1"}
	t0           = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
)

// TestCertificates: what makes the Provisioner keep, renew or replace the
// Secret's certificates.
func TestCertificates(t *testing.T) {
	margin := webhook.CertLifetime / 3
	if err := (webhook.Certificates{}).Check(serviceHosts, t0, margin); err == nil {
		t.Fatal("an empty Secret passes the check")
	}
	first, err := webhook.Certificates{}.Renew(serviceHosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Check(serviceHosts, t0, margin); err != nil {
		t.Fatalf("a fresh certificate fails the check: %v", err)
	}
	if _, err := first.KeyPair(); err != nil {
		t.Fatal(err)
	}
	if round := webhook.FromData(first.Data()); !round.Equal(first) {
		t.Error("the Secret's data does not give back the certificates")
	}

	// Other hosts, or two thirds of the lifetime gone: a new serving
	// certificate from the same CA, so the caBundle stays.
	for name, check := range map[string]func() error{
		"other hosts":     func() error { return first.Check(loopback, t0, margin) },
		"near its expiry": func() error { return first.Check(serviceHosts, t0.Add(webhook.CertLifetime-margin+time.Hour), margin) },
		"expired":         func() error { return first.Check(serviceHosts, t0.Add(webhook.CertLifetime+time.Hour), margin) },
		"not yet valid":   func() error { return first.Check(serviceHosts, t0.Add(-2*time.Hour), margin) },
	} {
		if check() == nil {
			t.Errorf("%s: the certificate passes the check", name)
		}
	}
	renewed, err := first.Renew(loopback, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(renewed.CACert, first.CACert) || bytes.Equal(renewed.Cert, first.Cert) {
		t.Error("renewing the serving certificate changed the CA, or not the certificate")
	}
	if err := renewed.Check(loopback, t0.Add(time.Hour), margin); err != nil {
		t.Errorf("the renewed certificate fails the check: %v", err)
	}

	// A CA that would expire before the new certificate is replaced.
	late := t0.Add(webhook.CALifetime - webhook.CertLifetime/2)
	if err := first.Check(serviceHosts, late, margin); err == nil {
		t.Error("a CA near its expiry passes the check")
	}
	replaced, err := first.Renew(serviceHosts, late)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(replaced.CACert, first.CACert) {
		t.Error("a CA near its expiry was kept")
	}

	// A certificate signed by another CA than the Secret's is refused.
	other, err := webhook.Certificates{}.Renew(serviceHosts, t0)
	if err != nil {
		t.Fatal(err)
	}
	mixed := webhook.Certificates{CACert: first.CACert, CAKey: first.CAKey, Cert: other.Cert, Key: other.Key}
	if err := mixed.Check(serviceHosts, t0, margin); err == nil {
		t.Error("a certificate of another CA passes the check")
	}
}
