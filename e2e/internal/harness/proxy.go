package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Faults is the mix a FaultProxy injects, each a fraction of the requests.
type Faults struct {
	// Seed makes a run repeatable.
	Seed uint64
	// TooMany answers 429 with Retry-After; Unavailable answers 503.
	TooMany, Unavailable float64
	// Internal answers 500; InternalAfter of them only after the request
	// took effect on the API server.
	Internal, InternalAfter float64
	// ResetBefore and ResetAfter reset the stream before forwarding, or
	// after the API server answered.
	ResetBefore, ResetAfter float64
	// MaxLatency is added to every request (uniform from 0).
	MaxLatency time.Duration
	// WatchMin and WatchMax bound how long a watch lives before the proxy
	// cuts it.
	WatchMin, WatchMax time.Duration
}

// FaultProxy is a TLS proxy on loopback between the operator and the API
// server. It authenticates upstream as the operator (with the operator's
// client certificate), so the audit log still names the operator, and
// injects Faults while enabled.
type FaultProxy struct {
	URL string
	ca  []byte
	srv *http.Server
	up  http.RoundTripper
	to  *url.URL

	mu      sync.Mutex
	faults  Faults
	rnd     *mrand.Rand
	enabled bool
	counts  map[string]int
}

// StartProxy starts a proxy to the API server the operator kubeconfig
// reaches.
func StartProxy(t *testing.T, operatorKubeconfig []byte, f Faults) *FaultProxy {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(operatorKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	up, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	to, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	cert, caPEM, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{URL: "https://" + ln.Addr().String(), ca: caPEM, up: up, to: to, faults: f,
		rnd: mrand.New(mrand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15)), enabled: true, counts: map[string]int{}}
	p.srv = &http.Server{Handler: p, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		ErrorLog: nil, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p
}

// Kubeconfig writes a kubeconfig that reaches the API server through the
// proxy.
func (p *FaultProxy) Kubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.ca}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "operator"}
	cfg.CurrentContext = "proxy"
	return clientcmd.WriteToFile(*cfg, path)
}

// SetEnabled switches the faults on or off; the proxy keeps forwarding.
func (p *FaultProxy) SetEnabled(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enabled = on
}

// Counts returns how many faults of each kind were injected.
func (p *FaultProxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// Close stops the proxy.
func (p *FaultProxy) Close() { _ = p.srv.Close() }

// fault picks what happens to one request.
func (p *FaultProxy) fault(watch bool) (kind string, latency, watchFor time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled {
		return "", 0, 0
	}
	f := p.faults
	if f.MaxLatency > 0 {
		latency = time.Duration(p.rnd.Int64N(int64(f.MaxLatency)))
	}
	if watch && f.WatchMax > 0 {
		watchFor = f.WatchMin + time.Duration(p.rnd.Int64N(int64(f.WatchMax-f.WatchMin)+1))
	}
	x := p.rnd.Float64()
	for _, c := range []struct {
		kind string
		p    float64
	}{
		{"429", f.TooMany}, {"503", f.Unavailable},
		{"500-before", f.Internal * (1 - f.InternalAfter)}, {"500-after", f.Internal * f.InternalAfter},
		{"reset-before", f.ResetBefore}, {"reset-after", f.ResetAfter},
	} {
		if x < c.p {
			kind = c.kind
			break
		}
		x -= c.p
	}
	if watch && kind != "" && kind != "429" && kind != "503" && kind != "500-before" && kind != "reset-before" {
		// A watch has no answer to lose after the fact; it is cut instead.
		kind = ""
	}
	if kind != "" {
		p.counts[kind]++
	}
	if watchFor > 0 {
		p.counts["watch-cut"]++
	}
	return kind, latency, watchFor
}

// ServeHTTP forwards one request, with the fault fault picks.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	kind, latency, watchFor := p.fault(watch)
	time.Sleep(latency)
	switch kind {
	case "429":
		w.Header().Set("Retry-After", "1")
		status(w, http.StatusTooManyRequests, "TooManyRequests")
		return
	case "503":
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable")
		return
	case "500-before":
		status(w, http.StatusInternalServerError, "InternalError")
		return
	case "reset-before":
		panic(http.ErrAbortHandler)
	}
	ctx := r.Context()
	if watchFor > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, watchFor)
		defer cancel()
	}
	out := r.Clone(ctx)
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = p.to.Scheme, p.to.Host, p.to.Host, ""
	resp, err := p.up.RoundTrip(out)
	if err != nil {
		if watchFor > 0 && ctx.Err() != nil {
			return
		}
		status(w, http.StatusBadGateway, "BadGateway")
		return
	}
	defer resp.Body.Close()
	switch kind {
	case "500-after":
		_, _ = io.Copy(io.Discard, resp.Body)
		status(w, http.StatusInternalServerError, "InternalError")
		return
	case "reset-after":
		_, _ = io.Copy(io.Discard, resp.Body)
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func status(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the fault proxy","reason":%q,"code":%s}`,
		reason, strconv.Itoa(code))
}

// selfSigned is a certificate for 127.0.0.1 and its PEM, for the proxy.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "openmed-fault-proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	return cert, certPEM, err
}
