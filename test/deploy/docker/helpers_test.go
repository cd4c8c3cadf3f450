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
	"github.com/indexify-go/indexify/test/harness"
)

// The API server's port as the chart declares it.
const apiPort = 8900

const chunkGraph = `name: docs
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 10, overlap: 0}
`

func mustOK(t *testing.T, code int, body []byte, err error, what string) {
	t.Helper()
	if err != nil || code/100 != 2 {
		t.Fatalf("%s: %d %v %s", what, code, err, body)
	}
}

func createNamespaceAndGraph(t *testing.T, api *harness.HTTP, ns string) {
	t.Helper()
	code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: ns}, nil)
	mustOK(t, code, body, err, "create namespace")
	// A graph names extractors that some executor must offer: wait for the
	// executor pod to have registered.
	harness.Eventually(t, 60*time.Second, "an executor offers the chunk extractor", func() error {
		code, body, err := api.Do(context.Background(), http.MethodGet, "/extractors", "", nil)
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), "tensorlake/chunk-extractor") {
			return fmt.Errorf("extractors: %d %v %s", code, err, body)
		}
		return nil
	})
	code, body, err = api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs", "application/x-yaml", strings.NewReader(chunkGraph))
	mustOK(t, code, body, err, "create graph")
}

// uploadOnce sends one file; it returns the content id or the failure.
func uploadOnce(api *harness.HTTP, ns, text string) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.txt")
	_, _ = fw.Write([]byte(text))
	_ = mw.Close()
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/docs/extract", mw.FormDataContentType(), &buf)
	if err != nil {
		return "", err
	}
	if code/100 != 2 {
		return "", fmt.Errorf("upload: %d %s", code, body)
	}
	var out wire.ContentID
	if err := json.Unmarshal(body, &out); err != nil || out.ContentID == "" {
		return "", fmt.Errorf("upload answer %s: %v", body, err)
	}
	return out.ContentID, nil
}

func upload(t *testing.T, api *harness.HTTP, ns, text string) string {
	t.Helper()
	id, err := uploadOnce(api, ns, text)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// chunksOf waits for the content's tasks and returns its chunks' texts in
// chunk order.
func chunksOf(t *testing.T, api *harness.HTTP, ns, id string) []string {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "content "+id+" extracted", func() error {
		code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/wait", nil, nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("wait: %d %v %s", code, err, body)
		}
		return nil
	})
	var tree wire.ContentTree
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/extraction_graphs/docs/content/"+id+"/extraction_policies/chunks", nil, &tree)
	mustOK(t, code, body, err, "content tree")
	var out []string
	for _, c := range tree.ContentTreeMetadata {
		if c.Source != "chunks" {
			continue
		}
		var idx int
		if err := json.Unmarshal(c.Labels["chunk_index"], &idx); err != nil {
			t.Fatalf("chunk %s: chunk_index %s", c.ID, c.Labels["chunk_index"])
		}
		for len(out) <= idx {
			out = append(out, "")
		}
		code, b, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+c.ID+"/download", "", nil)
		mustOK(t, code, b, err, "download chunk")
		out[idx] = string(b)
	}
	return out
}

func clientFor(api *Pod) *harness.HTTP { return harness.NewHTTP("http://" + api.Addr(apiPort)) }
