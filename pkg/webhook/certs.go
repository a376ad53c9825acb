package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// The keys of the certificate Secret. tls.crt and tls.key are the names
// cert-manager and kubernetes.io/tls Secrets use; ca.crt is what the
// ValidatingWebhookConfiguration's caBundle holds.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
	CertKey   = "tls.crt"
	KeyKey    = "tls.key"
)

// Lifetimes. The CA outlives many serving certificates, so renewing one
// leaves the caBundle as it is: replicas that still serve the previous
// certificate stay trusted while they take the new one.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	CertLifetime = 365 * 24 * time.Hour
)

// Certificates are a CA and a serving certificate it signed, PEM-encoded,
// as the certificate Secret holds them.
type Certificates struct {
	CACert, CAKey, Cert, Key []byte
}

// FromData reads the certificates from a Secret's data; missing keys give
// empty fields (which Check refuses).
func FromData(data map[string][]byte) Certificates {
	return Certificates{CACert: data[CACertKey], CAKey: data[CAKeyKey], Cert: data[CertKey], Key: data[KeyKey]}
}

// Data is the Secret data of c.
func (c Certificates) Data() map[string][]byte {
	return map[string][]byte{CACertKey: c.CACert, CAKeyKey: c.CAKey, CertKey: c.Cert, KeyKey: c.Key}
}

// Equal reports whether c and o hold the same bytes.
func (c Certificates) Equal(o Certificates) bool {
	return bytes.Equal(c.CACert, o.CACert) && bytes.Equal(c.CAKey, o.CAKey) && bytes.Equal(c.Cert, o.Cert) && bytes.Equal(c.Key, o.Key)
}

// Check says why c cannot serve hosts at now until at least now+margin:
// a part missing or unreadable, a serving certificate the CA did not sign,
// one for other hosts, or one (or a CA) that expires within margin. Nil
// means c can be served as it is.
func (c Certificates) Check(hosts []string, now time.Time, margin time.Duration) error {
	ca, err := c.ca()
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("serving certificate for %s: %w", h, err)
		}
	}
	if until := now.Add(margin); leaf.NotAfter.Before(until) || ca.cert.NotAfter.Before(until) {
		return fmt.Errorf("serving certificate or CA expires before %s", until.UTC().Format(time.RFC3339))
	}
	return nil
}

// KeyPair is the serving certificate and key for a TLS server.
func (c Certificates) KeyPair() (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	return &pair, nil
}

// Renew returns c with a new serving certificate for hosts, signed by c's
// CA when that CA is readable and valid until after the new certificate
// expires, by a new CA otherwise.
func (c Certificates) Renew(hosts []string, now time.Time) (Certificates, error) {
	ca, err := c.ca()
	if err != nil || ca.cert.NotAfter.Before(now.Add(CertLifetime)) {
		if ca, err = newCA(now); err != nil {
			return Certificates{}, err
		}
	}
	cert, key, err := ca.issue(hosts, now)
	if err != nil {
		return Certificates{}, err
	}
	return Certificates{CACert: ca.certPEM, CAKey: ca.keyPEM, Cert: cert, Key: key}, nil
}

// authority is a parsed CA.
type authority struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

// ca parses c's CA.
func (c Certificates) ca() (*authority, error) {
	certBlock, _ := pem.Decode(c.CACert)
	keyBlock, _ := pem.Decode(c.CAKey)
	if certBlock == nil || keyBlock == nil {
		return nil, errors.New("no CA certificate or key")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the CA certificate is not a CA's, or not the key's")
	}
	return &authority{cert: cert, key: key, certPEM: c.CACert, keyPEM: c.CAKey}, nil
}

// newCA makes a self-signed CA valid from now for CALifetime.
func newCA(now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "openmed-operator-webhook-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// issue signs a serving certificate for hosts (DNS names or IP addresses),
// valid from now for CertLifetime.
func (a *authority) issue(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("a serving certificate needs at least one host")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range slices.Compact(slices.Sorted(slices.Values(hosts))) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// serial is a random 128-bit serial number, as RFC 5280 recommends.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		// crypto/rand does not fail on the platforms Go supports.
		panic(err)
	}
	return n
}
