package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// oneCluster polls GET /cluster until it shows exactly the voters want,
// all healthy, with a leader among them; it returns that view.
func oneCluster(t *testing.T, api *harness.HTTP, timeout time.Duration, want []string) wire.ClusterStatus {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var v wire.ClusterStatus
	harness.Eventually(t, timeout, fmt.Sprintf("GET /cluster shows one cluster of voters %v", want), func() error {
		v = wire.ClusterStatus{}
		code, body, err := api.JSON(http.MethodGet, "/cluster", nil, &v)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		if v.ClusterID == "" || !slices.Contains(want, v.LeaderID) {
			return fmt.Errorf("cluster %q leader %q", v.ClusterID, v.LeaderID)
		}
		var voters []string
		for _, m := range v.Members {
			if m.Suffrage != "voter" || !m.Healthy {
				return fmt.Errorf("member %s: %s healthy=%v", m.ID, m.Suffrage, m.Healthy)
			}
			voters = append(voters, m.ID)
		}
		if slices.Sort(voters); !slices.Equal(voters, want) {
			return fmt.Errorf("voters %v", voters)
		}
		return nil
	})
	return v
}

func mustOK(t testing.TB, code int, body []byte, err error, what string) {
	t.Helper()
	if err != nil || code/100 != 2 {
		t.Fatalf("%s: %d %v %s", what, code, err, body)
	}
}

const chunkGraph = `name: docs
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 10, overlap: 0}
`

// createGraph makes a namespace with the chunking graph "docs", once an
// executor offers the extractor.
func createGraph(t *testing.T, api *harness.HTTP, ns string) {
	t.Helper()
	code, body, err := api.JSON(http.MethodPost, "/namespaces", map[string]any{"name": ns}, nil)
	mustOK(t, code, body, err, "create namespace")
	harness.Eventually(t, 90*time.Second, "an executor offers the chunk extractor", func() error {
		code, body, err := api.Do(context.Background(), http.MethodGet, "/extractors", "", nil)
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), "tensorlake/chunk-extractor") {
			return fmt.Errorf("extractors: %d %v %s", code, err, body)
		}
		return nil
	})
	code, body, err = api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs", "application/x-yaml", strings.NewReader(chunkGraph))
	mustOK(t, code, body, err, "create graph")
}

// uploadOnce sends one file to the graph; it returns the content id.
func uploadOnce(api *harness.HTTP, ns, text string) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.txt")
	_, _ = fw.Write([]byte(text))
	_ = mw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code, body, err := api.Do(ctx, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/docs/extract", mw.FormDataContentType(), &buf)
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

// chunksOf waits until the content is extracted and returns its chunks'
// texts in chunk order.
func chunksOf(t *testing.T, api *harness.HTTP, ns, id string) []string {
	t.Helper()
	harness.Eventually(t, 90*time.Second, "content "+id+" extracted", func() error {
		code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/wait", nil, nil)
		if err != nil || code != http.StatusOK {
			// The tasks of the policy say where the content is stuck
			// (unassigned, assigned to which executor, failed and why).
			_, tasks, terr := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/extraction_graphs/docs/extraction_policies/chunks/tasks", "", nil)
			return fmt.Errorf("wait: %d %v %s; tasks of the policy: %s %v", code, err, body, tasks, terr)
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

// contentIDs lists the graph's uploaded content, read at the leader's
// commit index (no stale answer).
func contentIDs(t *testing.T, api *harness.HTTP, ns string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	var total uint64
	// Pages of the API's largest size (1,000), each starting after the
	// last id of the one before (start_id), as apiclient.ContentAll does.
	for start := ""; ; {
		var out wire.ContentList
		path := "/namespaces/" + ns + "/extraction_graphs/docs/content?source=ingestion&consistency=linearizable&limit=1000"
		if start != "" {
			path += "&start_id=" + start
		}
		code, body, err := api.JSON(http.MethodGet, path, nil, &out)
		mustOK(t, code, body, err, "list content")
		for _, c := range out.ContentList {
			ids[c.ID] = true
		}
		total = out.Total
		if len(out.ContentList) < 1000 {
			break
		}
		start = out.ContentList[len(out.ContentList)-1].ID
	}
	if uint64(len(ids)) != total {
		t.Fatalf("list content: %d ids listed in pages, total %d", len(ids), total)
	}
	return ids
}
