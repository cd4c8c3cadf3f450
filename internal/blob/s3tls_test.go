package blob

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/test/harness"
)

// writeTestPKI makes a private CA and a server certificate for 127.0.0.1
// signed by it; it returns the CA, certificate and key files.
func writeTestPKI(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "indexify test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", leafDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// A server with a certificate from a private CA is trusted through
// --s3-ca-file, and refused (not reported as unavailable) without it.
func TestS3CustomCA(t *testing.T) {
	caFile, certFile, keyFile := writeTestPKI(t)
	srv := harness.StartS3TLS(t, certFile, keyFile)
	testCreds(t)
	cfg := S3Config{Bucket: newBucketName(t), Endpoint: srv.Endpoint(), PathStyle: true, CreateBucket: true, MaxRetries: 1}

	if _, err := NewS3(context.Background(), cfg); err == nil || errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: err = %v, want a certificate error", err)
	}
	cfg.CAFile = caFile
	s, err := NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Put(context.Background(), "ns/c/tls", strings.NewReader("over tls"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, info.URL); string(got) != "over tls" {
		t.Fatalf("read %q", got)
	}
	bad := cfg
	bad.CAFile = keyFile // no certificate in it
	if _, err := NewS3(context.Background(), bad); err == nil {
		t.Fatal("a CA file without certificates was accepted")
	}
}
