package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/indexify-go/indexify/internal/tlsutil"
)

// TestDevRefusesTokensWithOpenGRPC (issue 18 item 10): with API tokens on,
// dev does not start when its coordinator gRPC API (which takes no tokens)
// or its unauthenticated Raft transport listens beyond loopback.
func TestDevRefusesTokensWithOpenGRPC(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokens, []byte("- token: admin-token-0123456789\n  namespaces: [\"*\"]\n"), 0o600)
	data := filepath.Join(dir, "data")

	_, _, err := runCLI(t, "dev", "--data-dir", data, "--api-tokens-file", tokens, "--coordinator-addr", ":0")
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "coordinator gRPC") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("dev with tokens and gRPC on :0: %v", err)
	}
	_, _, err = runCLI(t, "dev", "--data-dir", data, "--api-tokens-file", tokens, "--coordinator-addr", "127.0.0.1:0", "--raft-addr", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "Raft") {
		t.Fatalf("dev with tokens and Raft on 0.0.0.0: %v", err)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused dev created its data directory (%v)", err)
	}

	for _, c := range []struct {
		name string
		s    securityFlags
		grpc string
		raft string
	}{
		{"no tokens", securityFlags{}, ":8950", ":8970"},
		{"loopback", securityFlags{apiTokensFile: tokens}, "127.0.0.1:8950", "[::1]:8970"},
		{"localhost + secret", securityFlags{apiTokensFile: tokens, clusterSecretFile: "s"}, "localhost:8950", ":8970"},
		{"mutual TLS", securityFlags{apiTokensFile: tokens, files: tlsutil.Files{CA: "ca.pem", ClientAuth: tlsutil.ClientAuthRequire}}, ":8950", ":8970"},
	} {
		if err := c.s.checkDevExposure(c.grpc, c.raft); err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
	}
	for _, a := range []string{":1", "0.0.0.0:1", "[::]:1", "10.0.0.1:1", "example.com:1", "garbage"} {
		if loopbackListen(a) {
			t.Errorf("loopbackListen(%q) = true", a)
		}
	}
}

// `server` with API tokens cannot see how its coordinators are protected;
// when it dials a coordinator beyond loopback without a client certificate
// (so that coordinator cannot be requiring mutual TLS, and its gRPC API,
// which takes no tokens, answers anyone), it says so at WARN at start.
func TestServerWarnsWhenTokensCanBeBypassedThroughTheCoordinator(t *testing.T) {
	tokens := "tokens.yaml"
	mtls := tlsutil.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}
	for _, c := range []struct {
		name    string
		s       securityFlags
		targets []string
		warn    string // "" = no warning; else a word of it
	}{
		{"no tokens", securityFlags{}, []string{"coordinator:8950"}, ""},
		{"loopback", securityFlags{apiTokensFile: tokens}, []string{"localhost:8950", "127.0.0.1:8951", "[::1]:8952"}, ""},
		{"client certificate", securityFlags{apiTokensFile: tokens, files: mtls}, []string{"dns:coordinator-headless:8950"}, ""},
		{"plaintext", securityFlags{apiTokensFile: tokens}, []string{"coordinator:8950"}, "in plaintext"},
		{"one remote among local", securityFlags{apiTokensFile: tokens}, []string{"127.0.0.1:8950", "10.0.0.7:8950"}, "in plaintext"},
		{"dns name", securityFlags{apiTokensFile: tokens}, []string{"dns:coordinator-headless:8950"}, "in plaintext"},
		{"TLS without a certificate", securityFlags{apiTokensFile: tokens, files: tlsutil.Files{CA: "ca.pem"}}, []string{"coordinator:8950"}, "without a client certificate"},
	} {
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, nil))
		c.s.warnCoordinatorExposure(log, c.targets)
		got := buf.String()
		switch {
		case c.warn == "" && got != "":
			t.Errorf("%s: warned: %s", c.name, got)
		case c.warn != "" && (!strings.Contains(got, "level=WARN") || !strings.Contains(got, c.warn) ||
			!strings.Contains(got, "--tls-client-auth require") || strings.Count(got, "\n") != 1):
			t.Errorf("%s: want one WARN line saying %q and the fix, got %q", c.name, c.warn, got)
		}
	}
}
