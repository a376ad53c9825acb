package minicluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// certValidity is long enough for a local cluster left running for months;
// the PKI is made anew on every Start anyway.
const certValidity = 365 * 24 * time.Hour

// Users of the API server that get a client certificate. The names are the
// ones the built-in RBAC bootstrap policy grants permissions to; admin and
// kwok are cluster administrators through the system:masters group.
var (
	adminUser     = pkix.Name{CommonName: "minicluster-admin", Organization: []string{"system:masters"}}
	kcmUser       = pkix.Name{CommonName: "system:kube-controller-manager"}
	schedulerUser = pkix.Name{CommonName: "system:kube-scheduler"}
	kwokUser      = pkix.Name{CommonName: "kwok-controller", Organization: []string{"system:masters"}}
)

// apiServerSANs are the names clients use for the API server: loopback from
// the host, and the in-cluster Service names and first service IP from pods.
var (
	apiServerDNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	apiServerIPs      = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)}
)

// keyPair is a certificate and its private key, PEM encoded.
type keyPair struct {
	Cert []byte
	Key  []byte
}

// pki is everything the components need to trust each other.
type pki struct {
	CA        keyPair
	APIServer keyPair
	Admin     keyPair
	KCM       keyPair
	Scheduler keyPair
	Kwok      keyPair
	// SAKey signs service-account tokens; SAPub verifies them.
	SAKey []byte
	SAPub []byte
}

// certAuthority signs leaf certificates.
type certAuthority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// newPKI makes a CA, the API server's serving certificate, a client
// certificate per user and a service-account key pair. ECDSA P-256 keys are
// used throughout: every component accepts them and they take microseconds
// to generate, where RSA keys would add about a second to every start.
func newPKI(now time.Time) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "minicluster-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := createCert(caTmpl, caTmpl, caKey.Public(), caKey, now)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := encodeKey(caKey)
	if err != nil {
		return nil, err
	}
	ca := certAuthority{cert: caCert, key: caKey}
	p := &pki{CA: keyPair{Cert: encodeCert(caDER), Key: caKeyPEM}}

	if p.APIServer, err = ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    apiServerDNSNames,
		IPAddresses: apiServerIPs,
	}, now); err != nil {
		return nil, fmt.Errorf("create kube-apiserver serving certificate: %w", err)
	}
	for _, c := range []struct {
		dst  *keyPair
		user pkix.Name
	}{
		{&p.Admin, adminUser},
		{&p.KCM, kcmUser},
		{&p.Scheduler, schedulerUser},
		{&p.Kwok, kwokUser},
	} {
		if *c.dst, err = ca.issue(&x509.Certificate{
			Subject:     c.user,
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, now); err != nil {
			return nil, fmt.Errorf("create client certificate for %s: %w", c.user.CommonName, err)
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if p.SAKey, err = encodeKey(saKey); err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	p.SAPub = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})
	return p, nil
}

// issue signs a new key for tmpl with the CA.
func (ca certAuthority) issue(tmpl *x509.Certificate, now time.Time) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	der, err := createCert(tmpl, ca.cert, key.Public(), ca.key, now)
	if err != nil {
		return keyPair{}, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{Cert: encodeCert(der), Key: keyPEM}, nil
}

// createCert fills in serial number and validity and signs tmpl. NotBefore
// lies an hour back so a clock that moves backwards a little does not make
// fresh certificates invalid.
func createCert(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certValidity)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// pkiFiles are the paths of the PKI files the components read.
type pkiFiles struct {
	CACert, CAKey               string
	APIServerCert, APIServerKey string
	SAKey, SAPub                string
}

// write stores the files the components read by path under dir. Client
// certificates are not written on their own: they live in the kubeconfigs.
func (p *pki) write(dir string) (pkiFiles, error) {
	f := pkiFiles{
		CACert:        filepath.Join(dir, "ca.crt"),
		CAKey:         filepath.Join(dir, "ca.key"),
		APIServerCert: filepath.Join(dir, "apiserver.crt"),
		APIServerKey:  filepath.Join(dir, "apiserver.key"),
		SAKey:         filepath.Join(dir, "sa.key"),
		SAPub:         filepath.Join(dir, "sa.pub"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, err
	}
	for path, data := range map[string][]byte{
		f.CACert:        p.CA.Cert,
		f.CAKey:         p.CA.Key,
		f.APIServerCert: p.APIServer.Cert,
		f.APIServerKey:  p.APIServer.Key,
		f.SAKey:         p.SAKey,
		f.SAPub:         p.SAPub,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// restConfig reaches the API server at host as the owner of client.
func (p *pki) restConfig(host string, client keyPair) *rest.Config {
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   p.CA.Cert,
			CertData: client.Cert,
			KeyData:  client.Key,
		},
	}
}

// writeKubeconfig writes a kubeconfig for client with the CA, certificate and
// key embedded, so the file still works when copied elsewhere.
func (p *pki) writeKubeconfig(path, host, user string, client keyPair) error {
	const name = "minicluster"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: p.CA.Cert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: client.Cert, ClientKeyData: client.Key}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}
