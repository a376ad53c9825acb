package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Provisioner keeps the webhook server's serving certificate. At start,
// and every Interval after, it reads the certificate Secret; when the
// Secret holds no certificate for Hosts valid for a third of its lifetime
// still, it issues one (from the Secret's CA when it can) and updates the
// Secret, with the version it read, so of replicas starting together one
// writes and the others, refused, read and serve what it wrote. It then
// serves the Secret's certificate and writes the Secret's CA into the
// webhook's caBundle (and URL, when set, into its clientConfig), by a
// patch of that one field, so a bundle re-applied leaves it alone.
//
// A Provisioner runs on every replica, leader or not: each serves the
// webhook. Its rights (kustomize/webhook/rbac.yaml) are get and update on
// the one Secret, which the bundle ships empty (so no create, which RBAC
// cannot limit to a name), and patch on the one configuration.
type Provisioner struct {
	// Client updates the Secret and patches the configuration.
	Client client.Client
	// Reader reads the Secret from the API server (never from a cache,
	// which would list and watch every Secret).
	Reader client.Reader
	// Secret is the certificate Secret.
	Secret types.NamespacedName
	// Hosts are the names (or IP addresses) the API server reaches the
	// server by; the serving certificate is valid for each.
	Hosts []string
	// URL, when set, is the server's base URL (https://host:port): the
	// configuration's clientConfig becomes URL+Path instead of the
	// Service, for an operator run outside the cluster.
	URL string
	// Interval is how often the certificate is checked again; 10 minutes
	// when zero.
	Interval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log receives what the Provisioner did.
	Log logr.Logger

	serving atomic.Pointer[tls.Certificate]
}

// DefaultInterval is Provisioner.Interval's default.
const DefaultInterval = 10 * time.Minute

// GetCertificate is the server's tls.Config.GetCertificate: the
// certificate served now, or an error (a failed handshake) before the
// first one is read.
func (p *Provisioner) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := p.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the webhook's serving certificate is not provisioned yet")
}

// NeedLeaderElection is false: every replica serves the webhook.
func (p *Provisioner) NeedLeaderElection() bool { return false }

// Start provisions until ctx ends, retrying a failed attempt after at
// most 30 seconds.
func (p *Provisioner) Start(ctx context.Context) error {
	interval := p.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	retry := time.Second
	for {
		wait := interval
		if err := p.Sync(ctx); err != nil {
			p.Log.Error(err, "cannot provision the webhook's certificate; retrying", "secret", p.Secret.String(), "after", retry.String())
			wait, retry = retry, min(2*retry, 30*time.Second)
		} else {
			retry = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Sync is one round: make sure the Secret holds a valid certificate,
// serve it, and write its CA into the configuration.
func (p *Provisioner) Sync(ctx context.Context) error {
	certs, err := p.ensureSecret(ctx)
	if err != nil {
		return err
	}
	pair, err := certs.KeyPair()
	if err != nil {
		return fmt.Errorf("Secret %s: %w", p.Secret, err)
	}
	p.serving.Store(pair)
	return p.patchConfiguration(ctx, certs.CACert)
}

// ensureSecret returns the Secret's certificates, renewed first when they
// cannot serve Hosts for a third of a certificate's lifetime.
func (p *Provisioner) ensureSecret(ctx context.Context) (Certificates, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	for {
		var s corev1.Secret
		if err := p.Reader.Get(ctx, p.Secret, &s); err != nil {
			// No create: the bundle ships the Secret, so the operator
			// needs rights on that one Secret only.
			return Certificates{}, fmt.Errorf("read the webhook's certificate Secret %s: %w", p.Secret, err)
		}
		certs := FromData(s.Data)
		why := certs.Check(p.Hosts, now(), CertLifetime/3)
		if why == nil {
			return certs, nil
		}
		renewed, err := certs.Renew(p.Hosts, now())
		if err != nil {
			return Certificates{}, err
		}
		s.Data = renewed.Data()
		err = p.Client.Update(ctx, &s)
		if apierrors.IsConflict(err) {
			// Another replica wrote first: serve what it wrote.
			continue
		}
		if err != nil {
			return Certificates{}, fmt.Errorf("write the webhook's certificate to Secret %s: %w", p.Secret, err)
		}
		p.Log.Info("issued the webhook's serving certificate", "secret", p.Secret.String(), "hosts", p.Hosts,
			"newCA", !bytes.Equal(renewed.CACert, certs.CACert), "reason", why.Error())
		return renewed, nil
	}
}

// patchConfiguration writes caBundle (and the URL) into the webhook of
// the ValidatingWebhookConfiguration, by a strategic merge patch keyed on
// the webhook's name: a patch that does not change it is not a write.
func (p *Provisioner) patchConfiguration(ctx context.Context, caBundle []byte) error {
	cc := map[string]any{"caBundle": caBundle}
	if p.URL != "" {
		cc["url"] = p.URL + Path
		cc["service"] = nil
	}
	patch, err := json.Marshal(map[string]any{"webhooks": []map[string]any{{"name": Name, "clientConfig": cc}}})
	if err != nil {
		return err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName}}
	if err := p.Client.Patch(ctx, vwc, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("write the CA into ValidatingWebhookConfiguration %s: %w", ConfigurationName, err)
	}
	return nil
}
