// Package tlsutil builds TLS configurations from certificate files that are
// re-read when they change, so a rotated certificate (cert-manager renewing a
// Secret mounted into the pod) takes effect on the next handshake without a
// restart. Every process uses one set of files: its own certificate and key
// (served to clients and presented to servers that ask for one) and the CA
// bundle that peers' certificates must chain to.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Client authentication modes of Files.ClientAuth.
const (
	ClientAuthNone    = "none"    // servers do not ask for client certificates
	ClientAuthRequire = "require" // clients must present a certificate from the CA (mutual TLS)
)

// Files names the PEM files of one process. Cert and Key go together; CA is
// the bundle peers are verified against (the system roots when empty).
type Files struct {
	Cert       string
	Key        string
	CA         string
	ClientAuth string // "none" (default) or "require"
	ServerName string // clients: name expected in servers' certificates (default: the dialled host)
}

// Enabled reports whether any file is configured, i.e. whether TLS is on.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// stamp identifies one version of a file. Kubernetes swaps a Secret volume's
// files through a symlink, so besides mtime and size the identity of the
// file (os.SameFile) is compared.
type stamp struct {
	info os.FileInfo
}

func (s stamp) same(o stamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil
	}
	return os.SameFile(s.info, o.info) && s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size()
}

func statFile(path string) (stamp, error) {
	if path == "" {
		return stamp{}, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{info: fi}, nil
}

// material is one loaded generation of the files.
type material struct {
	cert   *tls.Certificate // nil without Cert/Key
	pool   *x509.CertPool   // nil without CA: system roots
	stamps [3]stamp         // cert, key, CA
}

// Reloader hands out TLS configurations whose certificate and CA pool are
// those of the files' current content. It checks the files' stamps at every
// handshake (three stat calls, cheap next to the handshake itself) and
// re-reads them when one changed. A half-rotated set (new certificate, old
// key) fails to load; the previous generation stays in use and the next
// handshake tries again, so a rotation in progress never breaks serving.
type Reloader struct {
	files Files
	log   *slog.Logger

	mu      sync.Mutex
	cur     *material
	failed  [3]stamp // stamps of the last generation that failed to load
	reloads int      // successful reloads after the first load (tests, metrics)
}

// New loads the files once; a missing or invalid file is an error here
// (misconfiguration must stop the process at start, not at first use).
func New(files Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	switch files.ClientAuth {
	case "":
		files.ClientAuth = ClientAuthNone
	case ClientAuthNone, ClientAuthRequire:
	default:
		return nil, fmt.Errorf("tls client auth %q: want %q or %q", files.ClientAuth, ClientAuthNone, ClientAuthRequire)
	}
	if (files.Cert == "") != (files.Key == "") {
		return nil, errors.New("tls: a certificate file needs its key file and vice versa")
	}
	if files.ClientAuth == ClientAuthRequire && files.CA == "" {
		return nil, errors.New("tls: requiring client certificates needs a CA file to verify them against")
	}
	r := &Reloader{files: files, log: log.With("component", "tls")}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur = m
	return r, nil
}

// Files returns the configured file set.
func (r *Reloader) Files() Files { return r.files }

// Reloads counts successful reloads since New.
func (r *Reloader) Reloads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloads
}

func (r *Reloader) load() (*material, error) {
	var m material
	var err error
	for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		if m.stamps[i], err = statFile(p); err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	if r.files.Cert != "" {
		c, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: load certificate %s / key %s: %w", r.files.Cert, r.files.Key, err)
		}
		if c.Leaf == nil && len(c.Certificate) > 0 {
			c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		m.cert = &c
	}
	if r.files.CA != "" {
		pem, err := os.ReadFile(r.files.CA)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", r.files.CA)
		}
	}
	return &m, nil
}

// current returns the generation matching the files now, reloading if they
// changed since it was loaded.
func (r *Reloader) current() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	var now [3]stamp
	for i, p := range []string{r.files.Cert, r.files.Key, r.files.CA} {
		s, err := statFile(p)
		if err != nil {
			return r.cur // file briefly absent during a swap: keep serving
		}
		now[i] = s
	}
	if sameStamps(now, r.cur.stamps) || sameStamps(now, r.failed) {
		return r.cur
	}
	m, err := r.load()
	if err != nil {
		r.failed = now
		r.log.Warn("certificate files changed but do not load; keeping the previous ones", "err", err)
		return r.cur
	}
	r.cur = m
	r.reloads++
	r.failed = [3]stamp{}
	if m.cert != nil && m.cert.Leaf != nil {
		r.log.Info("certificate files reloaded", "subject", m.cert.Leaf.Subject.String(), "not_after", m.cert.Leaf.NotAfter.Format(time.RFC3339))
	} else {
		r.log.Info("certificate files reloaded")
	}
	return m
}

func sameStamps(a, b [3]stamp) bool {
	for i := range a {
		if !a[i].same(b[i]) {
			return false
		}
	}
	return true
}

// errNoCert is returned to a handshake when this process has no certificate.
var errNoCert = errors.New("tls: no certificate configured (--tls-cert-file)")

// ServerConfig is the configuration of a TLS server. The certificate comes
// from GetCertificate; with ClientAuth "require" every client must present a
// certificate that chains to the current CA pool (verified in
// VerifyPeerCertificate, because ClientCAs cannot change after the config is
// handed to a listener).
func (r *Reloader) ServerConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := r.current().cert; c != nil {
				return c, nil
			}
			return nil, errNoCert
		},
	}
	if r.files.ClientAuth == ClientAuthRequire {
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, r.current().pool, x509.ExtKeyUsageClientAuth)
		}
	}
	return cfg
}

// verifyChain checks a peer's certificate chain against pool for usage.
func verifyChain(raw [][]byte, pool *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(raw) == 0 {
		return errors.New("tls: peer presented no certificate")
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return fmt.Errorf("tls: peer certificate: %w", err)
		}
		certs = append(certs, c)
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := certs[0].Verify(opts); err != nil {
		return fmt.Errorf("tls: peer certificate not trusted: %w", err)
	}
	return nil
}

// ClientConfig is a configuration for one client connection to serverName
// (a host name or IP; Files.ServerName overrides it). It is built from the
// current files, so build one per dial. The client certificate (for servers
// that require one) is fetched at handshake time.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	if r.files.ServerName != "" {
		serverName = r.files.ServerName
	}
	m := r.current()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		RootCAs:    m.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := r.current().cert; c != nil {
				return c, nil
			}
			// An empty certificate lets the server decide (and refuse).
			return &tls.Certificate{}, nil
		},
	}
}
