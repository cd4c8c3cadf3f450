package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/internal/tlsutil/tlstest"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"github.com/indexify-go/indexify/test/harness"
)

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// `indexify dev` with every protection on: TLS on the API, the coordinator
// gRPC API and Raft; API tokens; the embedded executor authenticating with
// its own token. The pipeline still runs end to end, and callers without
// TLS or the right token are refused.
func TestSecureDevEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "indexify")
	cert, key := ca.Issue(t, "dev").Write(t, dir, "dev")
	tokens := filepath.Join(dir, "tokens.yaml")
	tlstest.WriteFile(t, tokens, []byte(`
- {token: admin-token-0123456789, namespaces: ["*"]}
- {token: tenant-a-token-0123456789, namespaces: [tenant-a]}
- {token: executor-token-0123456789, namespaces: ["*"], role: executor}
`))
	execToken := filepath.Join(dir, "executor.token")
	tlstest.WriteFile(t, execToken, []byte("executor-token-0123456789\n"))
	secret := filepath.Join(dir, "cluster.secret")
	tlstest.WriteFile(t, secret, []byte("a-cluster-secret-of-enough-length\n"))

	port := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t, "127.0.0.1")) }
	apiAddr, grpcAddr := port(), port()
	proc := harness.Start(t, "indexify-dev-secure", "dev",
		"--data-dir", filepath.Join(dir, "data"), "--node-id", "dev-0",
		"--api-addr", apiAddr, "--coordinator-addr", grpcAddr,
		"--coordinator-http-addr", port(), "--raft-addr", port(),
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-file", ca.CAFile,
		"--api-tokens-file", tokens, "--api-token-file", execToken, "--cluster-secret-file", secret)

	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(ca.CAFile)
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	as := func(token string) *harness.HTTP {
		h := harness.NewHTTP("https://" + apiAddr)
		h.Client = &http.Client{Timeout: 30 * time.Second, Transport: bearer{token: token, base: tr}}
		return h
	}
	admin, tenantA, anonymous := as("admin-token-0123456789"), as("tenant-a-token-0123456789"), as("")

	harness.Eventually(t, 60*time.Second, "secure dev serves", func() error {
		if proc.Exited() {
			t.Fatalf("indexify dev exited:\n%s", proc.Output())
		}
		return createNamespace(admin, "tenant-a")
	})

	// Plain HTTP to the TLS listener gets no API answer.
	if code, _, err := harness.NewHTTP("http://"+apiAddr).JSON(http.MethodGet, "/namespaces", nil, nil); err == nil && code == http.StatusOK {
		t.Fatal("plain HTTP was served")
	}
	code, body, err := anonymous.JSON(http.MethodGet, "/namespaces/tenant-a/extraction_graphs", nil, nil)
	mustStatus(t, http.StatusUnauthorized, code, body, err, "no token")
	code, body, err = tenantA.JSON(http.MethodGet, "/namespaces/default/extraction_graphs", nil, nil)
	mustStatus(t, http.StatusForbidden, code, body, err, "tenant-a token on namespace default")

	// The whole pipeline runs with tenant A's token; the executor downloads
	// and uploads with its own token over TLS.
	harness.Eventually(t, 60*time.Second, "the executor registered over TLS", func() error {
		code, body, err := tenantA.Do(context.Background(), http.MethodPost, "/namespaces/tenant-a/extraction_graphs",
			"application/x-yaml", strings.NewReader(chunkGraph))
		if err == nil && code/100 != 2 {
			err = fmt.Errorf("create graph: %d %s", code, body)
		}
		return err
	})
	id := upload(t, tenantA, "tenant-a", "docs", "", []byte("abcdefghijklmnopqrstuvwxyz"), nil)
	waitContent(t, tenantA, "tenant-a", id)
	if chunks := contentTree(t, tenantA, "tenant-a", "docs", id, "chunks"); len(chunks) != 3 {
		t.Fatalf("got %d chunks, want 3", len(chunks))
	}

	// The coordinator's gRPC API does not talk to a client without TLS.
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := pb.NewCoordinatorServiceClient(cc).ListNamespaces(ctx, &pb.ListNamespacesRequest{}); err == nil {
		t.Fatal("coordinator answered a plaintext gRPC client")
	}
}
