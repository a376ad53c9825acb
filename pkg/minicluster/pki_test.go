package minicluster

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestPKI(t *testing.T) {
	now := time.Now()
	p, err := newPKI(now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CA.Cert) {
		t.Fatal("CA certificate does not parse")
	}
	for _, tc := range []struct {
		name     string
		pair     keyPair
		usage    x509.ExtKeyUsage
		cn       string
		groups   []string
		dnsNames []string
		ips      []string
	}{
		{
			name: "apiserver", pair: p.APIServer, usage: x509.ExtKeyUsageServerAuth, cn: "kube-apiserver",
			dnsNames: []string{"localhost", "kubernetes.default.svc.cluster.local"},
			ips:      []string{"127.0.0.1", "10.96.0.1"},
		},
		{name: "admin", pair: p.Admin, usage: x509.ExtKeyUsageClientAuth, cn: "minicluster-admin", groups: []string{"system:masters"}},
		{name: "controller-manager", pair: p.KCM, usage: x509.ExtKeyUsageClientAuth, cn: "system:kube-controller-manager"},
		{name: "scheduler", pair: p.Scheduler, usage: x509.ExtKeyUsageClientAuth, cn: "system:kube-scheduler"},
		{name: "kwok", pair: p.Kwok, usage: x509.ExtKeyUsageClientAuth, cn: "kwok-controller", groups: []string{"system:masters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.X509KeyPair(tc.pair.Cert, tc.pair.Key)
			if err != nil {
				t.Fatalf("certificate and key do not belong together: %v", err)
			}
			cert := pair.Leaf
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now}); err != nil {
				t.Errorf("does not verify against the CA for %v: %v", tc.usage, err)
			}
			// A clock a little behind must not make the certificate invalid.
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now.Add(-30 * time.Minute)}); err != nil {
				t.Errorf("not valid half an hour ago: %v", err)
			}
			if cert.Subject.CommonName != tc.cn || !slices.Equal(cert.Subject.Organization, tc.groups) {
				t.Errorf("subject CN=%q O=%q, want CN=%q O=%q", cert.Subject.CommonName, cert.Subject.Organization, tc.cn, tc.groups)
			}
			for _, name := range tc.dnsNames {
				if err := cert.VerifyHostname(name); err != nil {
					t.Errorf("not valid for %s: %v", name, err)
				}
			}
			for _, ip := range tc.ips {
				if !slices.ContainsFunc(cert.IPAddresses, net.ParseIP(ip).Equal) {
					t.Errorf("no IP SAN %s in %v", ip, cert.IPAddresses)
				}
			}
		})
	}

	t.Run("service-account keys", func(t *testing.T) {
		keyBlock, _ := pem.Decode(p.SAKey)
		pubBlock, _ := pem.Decode(p.SAPub)
		if keyBlock == nil || pubBlock == nil {
			t.Fatal("service-account key files are not PEM")
		}
		key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.ParsePKIXPublicKey(pubBlock.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !key.PublicKey.Equal(pub.(*ecdsa.PublicKey)) {
			t.Error("sa.pub does not belong to sa.key")
		}
	})
}

func TestWriteKubeconfig(t *testing.T) {
	p, err := newPKI(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	const host = "https://127.0.0.1:6443"
	if err := p.writeKubeconfig(path, host, "admin", p.Admin); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	want := p.restConfig(host, p.Admin)
	if cfg.Host != want.Host ||
		string(cfg.CAData) != string(want.CAData) ||
		string(cfg.CertData) != string(want.CertData) ||
		string(cfg.KeyData) != string(want.KeyData) {
		t.Errorf("kubeconfig gives host %q and other credentials than RESTConfig", cfg.Host)
	}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		t.Error("kubeconfig refers to files instead of embedding the credentials")
	}
}
