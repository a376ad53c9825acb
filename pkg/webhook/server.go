package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options say how the operator serves the webhook.
type Options struct {
	// Addr is the host:port the server listens on.
	Addr string
	// CertDir holds a serving certificate the user provides (tls.crt,
	// tls.key, reloaded when they change), e.g. from cert-manager, whose
	// CA injector then fills the caBundle. Empty: the Provisioner issues
	// and shares one through the Secret SecretName.
	CertDir string
	// Namespace is the operator's own namespace, of the Secret and the
	// Service.
	Namespace string
	// SecretName is the certificate Secret the Provisioner keeps.
	SecretName string
	// ServiceName is the Service the API server reaches the webhook
	// through; its in-cluster DNS names are the certificate's hosts.
	ServiceName string
	// URL, when set, is the base URL (https://host:port) the API server
	// reaches an operator outside the cluster at: the certificate is for
	// its host and the configuration's clientConfig becomes this URL.
	URL string
}

// Add registers the webhook server, its readiness check (ready once it
// completes a TLS handshake, so with a certificate) and, without CertDir,
// the Provisioner with mgr.
func Add(mgr ctrl.Manager, o Options) error {
	host, portText, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("webhook address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 {
		return fmt.Errorf("webhook address %q: the port must be a positive number", o.Addr)
	}
	serverOpts := ctrlwebhook.Options{
		Host: host,
		Port: port,
		// HTTP/1.1 only, as kubebuilder scaffolds it (CVE-2023-44487,
		// CVE-2023-39325), like the metrics endpoint.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if o.CertDir != "" {
		serverOpts.CertDir, serverOpts.CertName, serverOpts.KeyName = o.CertDir, CertKey, KeyKey
	} else {
		p, err := o.provisioner(mgr)
		if err != nil {
			return err
		}
		if err := mgr.Add(p); err != nil {
			return err
		}
		serverOpts.TLSOpts = append(serverOpts.TLSOpts, func(c *tls.Config) { c.GetCertificate = p.GetCertificate })
	}
	srv := ctrlwebhook.NewServer(serverOpts)
	srv.Register(Path, &ctrlwebhook.Admission{Handler: Validator{}})
	if err := mgr.Add(srv); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", srv.StartedChecker())
}

// provisioner is the Provisioner of o: for the Service's DNS names, or
// for URL's host.
func (o Options) provisioner(mgr ctrl.Manager) (*Provisioner, error) {
	if o.Namespace == "" || o.SecretName == "" {
		return nil, errors.New("the webhook's certificate Secret needs the operator's namespace and a Secret name")
	}
	hosts := []string{o.ServiceName + "." + o.Namespace + ".svc", o.ServiceName + "." + o.Namespace + ".svc.cluster.local"}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("webhook URL %q: want https://host[:port]", o.URL)
		}
		hosts = []string{u.Hostname()}
	} else if o.ServiceName == "" {
		return nil, errors.New("the webhook needs a Service name or a URL")
	}
	return &Provisioner{
		Client: mgr.GetClient(),
		Reader: mgr.GetAPIReader(),
		Secret: types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		Hosts:  hosts,
		URL:    strings.TrimSuffix(o.URL, "/"),
		Log:    mgr.GetLogger().WithName("webhook-certificate"),
	}, nil
}
