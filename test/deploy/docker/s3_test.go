package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/deploy/chart"
	"github.com/indexify-go/indexify/test/harness"
)

// bearer adds an API token to every request of a harness client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

const (
	apiDeploy  = chart.ReleaseName + "-api"
	execDeploy = chart.ReleaseName + "-executor-default"
)

func tokenClient(api *Pod, token string) *harness.HTTP {
	h := clientFor(api)
	h.Client.Transport = bearer{token: token, base: http.DefaultTransport}
	return h
}

// Issue 9 point 6: the API server Deployment with two replicas needs a
// blob store both share. The chart's s3 values run them against an S3
// server (versitygw, one more container on the release's network); content
// uploaded through one replica is read, extracted and downloaded through
// the other, and the executor's results land on whichever replica the
// service name resolves to. Two replicas also need the shared retrieval
// stores, so Weaviate and PostgreSQL run as containers too, and the
// PostgreSQL DSN reaches the API servers as a mounted Secret file. The
// release also has the security values on
// (cluster secret, API tokens, the executor's token), so the Secrets the
// chart mounts are exercised by real processes.
func TestTwoAPIServersShareS3(t *testing.T) {
	const (
		bucket      = "indexify-blobs"
		userToken   = "user-token-0123456789abcdef"
		execToken   = "executor-token-0123456789abcdef"
		clusterSecr = "cluster-secret-0123456789abcdef"
	)
	values := chart.Values(
		"coordinator.replicas", 1,
		"server.replicas", 2,
		"blobStorage.type", "s3",
		"blobStorage.s3.bucket", bucket,
		"blobStorage.s3.endpoint", fmt.Sprintf("http://s3:%d", s3Port),
		"blobStorage.s3.pathStyle", true,
		"blobStorage.s3.createBucket", true,
		"blobStorage.s3.credentialsSecret.name", "indexify-s3",
		// More than one API replica needs the shared retrieval stores too.
		"vectorStore.type", "weaviate",
		"vectorStore.weaviate.url", fmt.Sprintf("http://weaviate:%d", weaviatePort),
		"structuredStore.type", "postgres",
		"structuredStore.postgres.dsnSecret.name", "indexify-postgres",
		"clusterSecret.secretName", "indexify-cluster",
		"apiTokens.secretName", "indexify-tokens",
		"executors", []any{map[string]any{"name": "default", "apiTokenSecret": "indexify-executor-token"}},
	)
	k := New(t, values)
	if n := *k.Rendered().Deployments[apiDeploy].Spec.Replicas; n != 2 {
		t.Fatalf("API Deployment renders %d replicas, want 2", n)
	}
	k.CreateSecret("indexify-s3", map[string]string{
		"access-key-id": harness.S3AccessKey, "secret-access-key": harness.S3SecretKey})
	k.CreateSecret("indexify-cluster", map[string]string{"cluster-secret": clusterSecr})
	k.CreateSecret("indexify-tokens", map[string]string{"tokens.yaml": fmt.Sprintf(
		"- token: %s\n  namespaces: [\"*\"]\n  role: user\n- token: %s\n  namespaces: [\"*\"]\n  role: executor\n",
		userToken, execToken)})
	k.CreateSecret("indexify-executor-token", map[string]string{"token": execToken})

	k.StartS3("s3", harness.S3AccessKey, harness.S3SecretKey)
	k.StartWeaviate("weaviate")
	k.CreateSecret("indexify-postgres", map[string]string{"dsn": k.StartPostgres("postgres")})
	coord := k.StartCoordinator(0)
	podA := k.StartDeploymentPod(apiDeploy, "5f7d9c-s3aaa")
	podB := k.StartDeploymentPod(apiDeploy, "5f7d9c-s3bbb")
	k.StartDeploymentPod(execDeploy, "6b8c4d-s3ccc")
	k.WaitReady(90*time.Second, coord, podA, podB)
	a, b := tokenClient(podA, userToken), tokenClient(podB, userToken)

	// The token Secret is in force, and the cluster Secret reached the API
	// server (GET /cluster calls ClusterService, which refuses callers
	// without it).
	if code, body, err := clientFor(podA).Do(context.Background(), http.MethodGet, "/namespaces", "", nil); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("GET /namespaces without a token: %d %v %s", code, err, body)
	}
	harness.Eventually(t, 30*time.Second, "GET /cluster through the API server", func() error {
		code, body, err := b.Do(context.Background(), http.MethodGet, "/cluster", "", nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		return nil
	})

	createNamespaceAndGraph(t, a, "shared")
	for _, c := range []struct {
		via, read *harness.HTTP
		text      string
	}{
		{a, b, "uploaded through replica A, read through replica B"},
		{b, a, "uploaded through replica B, read through replica A"},
	} {
		id := upload(t, c.via, "shared", c.text)
		code, body, err := c.read.Do(context.Background(), http.MethodGet, "/namespaces/shared/content/"+id+"/download", "", nil)
		mustOK(t, code, body, err, "download through the other replica")
		if string(body) != c.text {
			t.Fatalf("downloaded %q, want %q", body, c.text)
		}
		var meta wire.ContentMetadata
		code, body, err = c.read.JSON(http.MethodGet, "/namespaces/shared/content/"+id+"/metadata", nil, &meta)
		mustOK(t, code, body, err, "metadata")
		if !strings.HasPrefix(meta.ContentMetadata.StorageURL, "s3://"+bucket+"/") {
			t.Fatalf("storage url %q is not in bucket %s", meta.ContentMetadata.StorageURL, bucket)
		}
		if got := strings.Join(chunksOf(t, c.read, "shared", id), ""); got != c.text {
			t.Fatalf("chunks read through the other replica reassemble to %q, want %q", got, c.text)
		}
	}
	// Chunk blobs were stored by the executor through the service name,
	// which resolves to both replicas; chunksOf read every chunk through
	// one replica in one round and through the other in the next.

	// Retrieval through the chart's store wiring: embeddings land in the
	// Weaviate container and rows in the PostgreSQL one, whichever replica
	// took the executor's results, so the other replica finds them.
	code, body, err := a.Do(context.Background(), http.MethodPost, "/namespaces/shared/extraction_graphs", "application/x-yaml",
		strings.NewReader(retrievalGraph))
	mustOK(t, code, body, err, "create retrieval graph")
	var up wire.ContentID
	code, body, err = uploadTo(a, "shared", "notes", "Olympus Mons on Mars is the tallest volcano in the solar system.")
	mustOK(t, code, body, err, "upload to the retrieval graph")
	if err := json.Unmarshal(body, &up); err != nil || up.ContentID == "" {
		t.Fatalf("upload answer %s: %v", body, err)
	}
	code, body, err = a.JSON(http.MethodGet, "/namespaces/shared/content/"+up.ContentID+"/wait", nil, nil)
	mustOK(t, code, body, err, "wait")
	var found wire.SearchResponse
	one := 1
	code, body, err = b.JSON(http.MethodPost, "/namespaces/shared/indexes/notes.embeddings.embedding/search",
		wire.SearchRequest{Query: "tallest volcano", K: &one}, &found)
	mustOK(t, code, body, err, "search through the other replica")
	if len(found.Results) != 1 || !strings.Contains(found.Results[0].Text, "Olympus Mons") {
		t.Fatalf("search through B: %s", body)
	}
	var rows wire.SQLResult
	code, body, err = b.JSON(http.MethodPost, "/namespaces/shared/sql_query", wire.SQLQuery{Query: "select words from notes"}, &rows)
	mustOK(t, code, body, err, "SQL through the other replica")
	if len(rows.Rows) != 1 {
		t.Fatalf("SQL through B: %s", body)
	}
}

const retrievalGraph = `name: notes
extraction_policies:
  - extractor: tensorlake/lexical-embedding
    name: embeddings
  - extractor: tensorlake/attributes
    name: stats
`

// uploadTo sends text as a file into graph.
func uploadTo(api *harness.HTTP, ns, graph, text string) (int, []byte, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.txt")
	_, _ = fw.Write([]byte(text))
	_ = mw.Close()
	return api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/extract", mw.FormDataContentType(), &buf)
}
