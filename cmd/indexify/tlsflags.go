package main

// Security flags: one TLS file set per process (its certificate and key,
// the CA bundle peers are verified against, whether clients must present a
// certificate, the server name to expect), the cluster secret, and API
// tokens. `dev` shares one set between its three parts.

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/indexify-go/indexify/internal/api"
	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordproc"
	"github.com/indexify-go/indexify/internal/tlsutil"
)

type securityFlags struct {
	files             tlsutil.Files
	clusterSecretFile string
	apiTokensFile     string
	apiTokenFile      string

	reloader *tlsutil.Reloader // built once, shared by every use
}

// ensureSecurity returns s, or a new set when nil (standalone commands).
func ensureSecurity(s *securityFlags) *securityFlags {
	if s == nil {
		return &securityFlags{}
	}
	return s
}

// registerTLS adds the TLS flags unless fs has them already (dev registers
// three components on one flag set).
func (s *securityFlags) registerTLS(fs *pflag.FlagSet) {
	if fs.Lookup("tls-cert-file") != nil {
		return
	}
	fs.StringVar(&s.files.Cert, "tls-cert-file", "", "PEM certificate of this process: served by its TLS servers (gRPC, Raft, HTTP API) and presented as client certificate for mutual TLS; re-read when it changes")
	fs.StringVar(&s.files.Key, "tls-key-file", "", "PEM private key of --tls-cert-file; re-read when it changes")
	fs.StringVar(&s.files.CA, "tls-ca-file", "", "PEM CA bundle that peers' certificates must chain to; setting it (or --tls-cert-file) turns TLS on for every connection of this process; re-read when it changes")
	fs.StringVar(&s.files.ClientAuth, "tls-client-auth", tlsutil.ClientAuthNone, "client certificates on this process's TLS servers: none, or require (mutual TLS: only certificates from --tls-ca-file are accepted)")
	fs.StringVar(&s.files.ServerName, "tls-server-name", "", "name expected in servers' certificates (default: the host of the address dialled)")
}

func (s *securityFlags) registerClusterSecret(fs *pflag.FlagSet) {
	if fs.Lookup("cluster-secret-file") != nil {
		return
	}
	fs.StringVar(&s.clusterSecretFile, "cluster-secret-file", "", "file holding the cluster's shared secret (at least 16 bytes); when set, Raft connections and cluster calls without it are refused; the same file on every coordinator")
}

func (s *securityFlags) registerAPITokens(fs *pflag.FlagSet) {
	if fs.Lookup("api-tokens-file") != nil {
		return
	}
	fs.StringVar(&s.apiTokensFile, "api-tokens-file", "", "YAML list of API tokens [{token, namespaces: [..] or [\"*\"], role: user|executor}]; when set every HTTP request needs 'Authorization: Bearer <token>'; re-read when it changes")
}

func (s *securityFlags) registerAPIToken(fs *pflag.FlagSet) {
	if fs.Lookup("api-token-file") != nil {
		return
	}
	fs.StringVar(&s.apiTokenFile, "api-token-file", "", "file holding this executor's API token (role executor), sent with content downloads and result uploads")
}

func (s *securityFlags) tlsEnabled() bool { return s.files.Enabled() }

// tls returns the shared reloader, or nil when TLS is off.
func (s *securityFlags) tls(log *slog.Logger) (*tlsutil.Reloader, error) {
	if !s.tlsEnabled() {
		return nil, nil
	}
	if s.reloader == nil {
		r, err := tlsutil.New(s.files, log)
		if err != nil {
			return nil, fmt.Errorf("--tls-*: %w", err)
		}
		s.reloader = r
	}
	return s.reloader, nil
}

// serverTLS is tls for processes that serve TLS: a certificate is required.
func (s *securityFlags) serverTLS(log *slog.Logger) (*tlsutil.Reloader, error) {
	r, err := s.tls(log)
	if err != nil || r == nil {
		return r, err
	}
	if s.files.Cert == "" {
		return nil, fmt.Errorf("--tls-cert-file and --tls-key-file are required to serve TLS (only --tls-ca-file was given)")
	}
	return r, nil
}

func (s *securityFlags) clusterSecret() ([]byte, error) {
	if s.clusterSecretFile == "" {
		return nil, nil
	}
	b, err := cluster.LoadSecretFile(s.clusterSecretFile)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret-file: %w", err)
	}
	return b, nil
}

// dialOptions are the gRPC client options towards coordinators.
func (s *securityFlags) dialOptions(log *slog.Logger, withSecret bool) ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	r, err := s.tls(log)
	if err != nil {
		return nil, err
	}
	if r != nil {
		opts = append(opts, r.DialOption())
	}
	if withSecret {
		secret, err := s.clusterSecret()
		if err != nil {
			return nil, err
		}
		opts = append(opts, cluster.AuthDialOptions(secret)...)
	}
	return opts, nil
}

// secureCoordinator adds TLS (gRPC server and peers, Raft) and the cluster
// secret to a coordinator's configuration.
func (s *securityFlags) secureCoordinator(cfg *coordproc.Config, log *slog.Logger) error {
	r, err := s.serverTLS(log)
	if err != nil {
		return err
	}
	if r != nil {
		cfg.Server.GRPCServerOptions = append(cfg.Server.GRPCServerOptions, grpc.Creds(r.ServerCredentials()))
		cfg.Cluster.DialOptions = append(cfg.Cluster.DialOptions, r.DialOption())
		cfg.Cluster.RaftTLS = &cluster.TransportTLS{Server: r.ServerConfig(), Client: r.ClientConfig}
	}
	cfg.Cluster.ClusterSecret, err = s.clusterSecret()
	return err
}

// secureAPI adds TLS and tokens to an API server's configuration.
func (s *securityFlags) secureAPI(cfg *api.Config, log *slog.Logger) error {
	r, err := s.serverTLS(log)
	if err != nil {
		return err
	}
	if r != nil {
		cfg.TLS = r.ServerConfig()
	}
	if s.apiTokensFile != "" {
		if cfg.Tokens, err = api.LoadTokensFile(s.apiTokensFile, log); err != nil {
			return fmt.Errorf("--api-tokens-file: %w", err)
		}
	}
	return nil
}

// scheme is the API server's URL scheme under these settings.
func (s *securityFlags) scheme() string {
	if s.tlsEnabled() {
		return "https://"
	}
	return "http://"
}

// httpClient is the executor's client for the API server: TLS from the
// shared files, and its token on every request.
func (s *securityFlags) httpClient(log *slog.Logger) (*http.Client, error) {
	var base http.RoundTripper = http.DefaultTransport
	r, err := s.tls(log)
	if err != nil {
		return nil, err
	}
	if r != nil {
		base = r.HTTPTransport()
	}
	if s.apiTokenFile != "" {
		tok, err := api.LoadTokenFile(s.apiTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--api-token-file: %w", err)
		}
		base = &bearerTransport{token: tok, base: base}
	}
	return &http.Client{Transport: base}, nil
}

// bearerTransport adds the executor's token to each request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(req)
}

// checkDevExposure refuses a `dev` whose API tokens would be bypassed: the
// coordinator's gRPC API (and, without the cluster secret, Raft) takes no
// API tokens, so with tokens on it must either be reachable only from this
// host or require client certificates (mutual TLS).
func (s *securityFlags) checkDevExposure(grpcAddr, raftAddr string) error {
	if s.apiTokensFile == "" || (s.tlsEnabled() && s.files.ClientAuth == tlsutil.ClientAuthRequire) {
		return nil
	}
	if !loopbackListen(grpcAddr) {
		return fmt.Errorf("refusing to start: --api-tokens-file protects only the HTTP API, but the coordinator gRPC API on %q would answer callers without a token; "+
			"listen on loopback (--coordinator-addr 127.0.0.1:8950) or require client certificates (--tls-client-auth require)", grpcAddr)
	}
	if s.clusterSecretFile == "" && !loopbackListen(raftAddr) {
		return fmt.Errorf("refusing to start: --api-tokens-file protects only the HTTP API, but the Raft transport on %q would accept any peer; "+
			"listen on loopback (--raft-addr 127.0.0.1:8970), set --cluster-secret-file, or require client certificates (--tls-client-auth require)", raftAddr)
	}
	return nil
}

// warnCoordinatorExposure is checkDevExposure's counterpart for `server`,
// which cannot see how its coordinators are protected: with API tokens on,
// it warns at start unless every coordinator is on loopback or this server
// presents a client certificate (so the coordinators can require mutual
// TLS). Without one, the coordinators' gRPC API, which takes no API tokens,
// necessarily accepts callers without a certificate: anyone who reaches it
// bypasses the tokens. A warning, not a refusal: a network policy that
// admits only API servers and executors to the coordinators' port is a
// documented protection this process cannot observe (docs/security.md).
func (s *securityFlags) warnCoordinatorExposure(log *slog.Logger, targets []string) {
	if msg := s.coordinatorExposure(targets); msg != "" {
		log.Warn(msg, "coordinators", strings.Join(targets, ","))
	}
}

func (s *securityFlags) coordinatorExposure(targets []string) string {
	if s.apiTokensFile == "" || (s.tlsEnabled() && s.files.Cert != "") {
		return ""
	}
	local := true
	for _, t := range targets {
		if name, ok := strings.CutPrefix(t, "dns:"); ok {
			t = name
		}
		local = local && loopbackListen(t)
	}
	if local {
		return ""
	}
	how := "in plaintext"
	if s.tlsEnabled() {
		how = "over TLS without a client certificate"
	}
	return "SECURITY: --api-tokens-file protects only the HTTP API; this server dials its coordinators " + how +
		", so their gRPC API accepts callers without a token or certificate, and anyone who reaches them bypasses the tokens. " +
		"Require client certificates on the coordinators (--tls-client-auth require) and give this server --tls-cert-file, --tls-key-file and --tls-ca-file, " +
		"or admit only API servers and executors to the coordinators' gRPC port (a network policy)"
}

// loopbackListen reports whether a listen address accepts only local
// connections: a loopback IP or "localhost" (not a wildcard, not a name).
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
