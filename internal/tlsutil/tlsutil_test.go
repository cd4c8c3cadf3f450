package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/tlsutil/tlstest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// tlsServer accepts connections with cfg; each handshake's outcome is
// reported, and a connection that handshakes is answered with one byte.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := tls.Server(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				if tc.Handshake() == nil {
					tc.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects with cfg and returns the server certificate's CN after
// reading the server's byte (so a client-certificate refusal surfaces).
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestServerCertificateRotatesWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	cert, key := ca.Issue(t, "gen-1").Write(t, dir, "server")
	srv, err := New(Files{Cert: cert, Key: key, CA: ca.CAFile}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, srv.ServerConfig())
	cli, err := New(Files{CA: ca.CAFile}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if cn, err := dial(addr, cli.ClientConfig("127.0.0.1")); err != nil || cn != "gen-1" {
		t.Fatalf("first connection: cn %q err %v", cn, err)
	}

	// cert-manager renews: new certificate and key appear in the same files.
	ca.Issue(t, "gen-2").Write(t, dir, "server")
	if cn, err := dial(addr, cli.ClientConfig("127.0.0.1")); err != nil || cn != "gen-2" {
		t.Fatalf("after rotation: cn %q err %v, want gen-2", cn, err)
	}
	if srv.Reloads() != 1 {
		t.Fatalf("reloads = %d, want 1", srv.Reloads())
	}
}

func TestHalfRotatedFilesKeepThePreviousCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	cert, key := ca.Issue(t, "gen-1").Write(t, dir, "server")
	srv, err := New(Files{Cert: cert, Key: key}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, srv.ServerConfig())
	cli, _ := New(Files{CA: ca.CAFile}, quiet())

	next := ca.Issue(t, "gen-2")
	tlstest.WriteFile(t, cert, next.Cert) // key not yet replaced: mismatch
	if cn, err := dial(addr, cli.ClientConfig("localhost")); err != nil || cn != "gen-1" {
		t.Fatalf("mid-rotation: cn %q err %v, want the old gen-1", cn, err)
	}
	tlstest.WriteFile(t, key, next.Key)
	if cn, err := dial(addr, cli.ClientConfig("localhost")); err != nil || cn != "gen-2" {
		t.Fatalf("after the key arrived: cn %q err %v, want gen-2", cn, err)
	}
}

func TestMutualTLSRefusesForeignAndMissingClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	other := tlstest.NewCA(t, dir, "other")
	cert, key := ca.Issue(t, "server").Write(t, dir, "server")
	srv, err := New(Files{Cert: cert, Key: key, CA: ca.CAFile, ClientAuth: ClientAuthRequire}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsServer(t, srv.ServerConfig())

	noCert, _ := New(Files{CA: ca.CAFile}, quiet())
	if _, err := dial(addr, noCert.ClientConfig("127.0.0.1")); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	rc, rk := other.Issue(t, "rogue").Write(t, dir, "rogue")
	rogue, _ := New(Files{Cert: rc, Key: rk, CA: ca.CAFile}, quiet())
	if _, err := dial(addr, rogue.ClientConfig("127.0.0.1")); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	gc, gk := ca.Issue(t, "member").Write(t, dir, "member")
	good, _ := New(Files{Cert: gc, Key: gk, CA: ca.CAFile}, quiet())
	if cn, err := dial(addr, good.ClientConfig("127.0.0.1")); err != nil || cn != "server" {
		t.Fatalf("member client: cn %q err %v", cn, err)
	}

	// The server's CA bundle is rotated to the other CA: the old member is
	// refused from now on, the other CA's client accepted, no restart.
	tlstest.WriteFile(t, ca.CAFile, mustRead(t, other.CAFile))
	if _, err := dial(addr, good.ClientConfig("127.0.0.1")); err == nil {
		t.Fatal("client of the retired CA still accepted after the CA file changed")
	}
	// The other CA's client must still trust the server's (unchanged)
	// certificate, so it gets a pool with the server's CA.
	trustServer := rogue.ClientConfig("127.0.0.1")
	trustServer.RootCAs = x509.NewCertPool()
	trustServer.RootCAs.AddCert(ca.Cert)
	if _, err := dial(addr, trustServer); err != nil {
		t.Fatalf("client of the new CA refused: %v", err)
	}
}

func TestClientVerifiesServerNameAndCA(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	other := tlstest.NewCA(t, dir, "other")
	cert, key := ca.Issue(t, "server", "coordinator-0.coordinator-headless").Write(t, dir, "server")
	srv, _ := New(Files{Cert: cert, Key: key}, quiet())
	addr := tlsServer(t, srv.ServerConfig())

	wrongCA, _ := New(Files{CA: other.CAFile}, quiet())
	if _, err := dial(addr, wrongCA.ClientConfig("127.0.0.1")); err == nil {
		t.Fatal("server certificate of an untrusted CA accepted")
	}
	cli, _ := New(Files{CA: ca.CAFile}, quiet())
	if _, err := dial(addr, cli.ClientConfig("not-the-server")); err == nil {
		t.Fatal("certificate accepted for a name it does not carry")
	}
	byName, _ := New(Files{CA: ca.CAFile, ServerName: "coordinator-0.coordinator-headless"}, quiet())
	if _, err := dial(addr, byName.ClientConfig("10.1.2.3")); err != nil {
		t.Fatalf("ServerName override: %v", err)
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "cluster")
	cert, key := ca.Issue(t, "x").Write(t, dir, "x")
	garbage := filepath.Join(dir, "garbage.pem")
	tlstest.WriteFile(t, garbage, []byte("not pem"))
	for name, f := range map[string]Files{
		"cert without key":     {Cert: cert},
		"key without cert":     {Key: key},
		"require without CA":   {Cert: cert, Key: key, ClientAuth: ClientAuthRequire},
		"unknown client auth":  {Cert: cert, Key: key, ClientAuth: "optional"},
		"missing file":         {Cert: cert, Key: filepath.Join(dir, "nope")},
		"CA without PEM":       {CA: garbage},
		"key of another cert":  {Cert: cert, Key: ca.CAFile},
		"cert file is garbage": {Cert: garbage, Key: key},
	} {
		if _, err := New(f, quiet()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
