package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// s3Flags are the flags that put an API server's blobs into bucket on srv,
// with credentials from a shared-credentials file (as a mounted Secret
// would provide) and short timeouts so an outage is noticed quickly.
func s3Flags(srv *harness.S3Server, bucket string) []string {
	return []string{
		"--blob-store", "s3",
		"--s3-bucket", bucket,
		"--s3-endpoint", srv.Endpoint(),
		"--s3-path-style",
		"--s3-create-bucket",
		"--s3-prefix", "blobs/",
		"--s3-credentials-file", srv.CredentialsFile(),
		"--s3-timeout", "2s",
		"--s3-max-attempts", "2",
	}
}

const attrGraph = `name: g
extraction_policies:
  - extractor: tensorlake/attributes
    name: stats
`

// s3Object maps an s3:// storage url to the file versitygw keeps it in.
func s3Object(t *testing.T, srv *harness.S3Server, storageURL string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(storageURL, "s3://")
	bucket, obj, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || !strings.HasPrefix(obj, "blobs/") {
		t.Fatalf("storage url %q is not an s3 url under the prefix", storageURL)
	}
	return srv.ObjectPath(bucket, obj)
}

// createGraphWhenOffered creates a graph once an executor offering its
// extractors has registered (executors start concurrently with the test).
func createGraphWhenOffered(t *testing.T, api *harness.HTTP, ns, spec string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "graph created", func() error {
		code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs",
			"application/x-yaml", strings.NewReader(spec))
		if err != nil {
			return err
		}
		if code/100 != 2 {
			return fmt.Errorf("create graph: %d %s", code, body)
		}
		return nil
	})
}

func listContent(t *testing.T, api *harness.HTTP, ns, graph string) []content {
	t.Helper()
	var out wire.ContentList
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/extraction_graphs/"+graph+"/content", nil, &out)
	mustStatus(t, http.StatusOK, code, body, err, "list content")
	return out.ContentList
}

// The whole pipeline with blobs in S3: upload, extraction by the executor
// (which downloads the input and uploads chunks through the API), download,
// and GC of superseded and deleted content removing the S3 objects.
func TestS3Pipeline(t *testing.T) {
	srv := harness.StartS3(t)
	dev := harness.StartDev(t, t.TempDir(), append([]string{"--executor-timeout", "3s"}, s3Flags(srv, "pipeline")...)...)
	api := dev.API
	ns := newNamespace(t, api, "s3")
	createGraphWhenOffered(t, api, ns, chunkGraph)

	text := "abcdefghijklmnopqrstuvwxyz0123456789"
	id := upload(t, api, ns, "docs", "doc-1", []byte(text), nil)
	waitContent(t, api, ns, id)
	root := metadata(t, api, ns, id)
	rootObj := s3Object(t, srv, root.StorageURL)
	if b, err := os.ReadFile(rootObj); err != nil || string(b) != text {
		t.Fatalf("S3 object of the upload: %q %v", b, err)
	}
	chunks := contentTree(t, api, ns, "docs", id, "chunks")
	if len(chunks) != 4 {
		t.Fatalf("got %d chunks, want 4", len(chunks))
	}
	got := make([]string, len(chunks))
	var chunkObjs []string
	for _, c := range chunks {
		var idx int
		if err := json.Unmarshal(c.Labels["chunk_index"], &idx); err != nil || idx < 0 || idx >= len(got) {
			t.Fatalf("chunk %s: bad chunk_index %s", c.ID, c.Labels["chunk_index"])
		}
		got[idx] = download(t, api, ns, c.ID)
		chunkObjs = append(chunkObjs, s3Object(t, srv, metadata(t, api, ns, c.ID).StorageURL))
	}
	if strings.Join(got, "") != text {
		t.Fatalf("chunks %q do not reassemble the input", got)
	}

	// A new version supersedes the old one: GC deletes its object and its
	// chunks' objects from the bucket.
	code, body, err := uploadRaw(api, http.MethodPut, "/namespaces/"+ns+"/content/"+id, "", []byte("second version"), nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("new version: %d %v %s", code, err, body)
	}
	waitContent(t, api, ns, id)
	if got := download(t, api, ns, id); got != "second version" {
		t.Fatalf("download after new version = %q", got)
	}
	harness.Eventually(t, 30*time.Second, "superseded S3 objects collected", func() error {
		for _, p := range append([]string{rootObj}, chunkObjs...) {
			if err := fileGone(p); err != nil {
				return err
			}
		}
		return nil
	})

	// Deleting the content removes the current object too.
	cur := s3Object(t, srv, metadata(t, api, ns, id).StorageURL)
	code, body, err = api.JSON(http.MethodDelete, "/namespaces/"+ns+"/content", wire.ContentIDs{ContentIDs: []string{id}}, nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("delete: %d %v %s", code, err, body)
	}
	harness.Eventually(t, 30*time.Second, "deleted content's S3 object removed", func() error { return fileGone(cur) })
}

// Two API servers (as two pods) share one bucket and one coordinator: what
// one stores, the other serves, and either one's GC can delete it.
func TestS3TwoAPIServersShareBucket(t *testing.T) {
	srv := harness.StartS3(t)
	c := harness.NewCluster(t, 1, 47)
	c.Start(0)
	c.WaitLeader(60 * time.Second)
	c.WaitReady(0, 60*time.Second)
	flags := s3Flags(srv, "shared")
	_, a := harness.StartAPIServer(t, c.Targets(), filepath.Join(t.TempDir(), "a"), flags...)
	_, b := harness.StartAPIServer(t, c.Targets(), filepath.Join(t.TempDir(), "b"), flags...)

	ns := newNamespace(t, a, "shared")
	// The executor talks to server B: it downloads what A stored and
	// uploads its results through B.
	harness.Start(t, "executor", "executor", "--coordinator-addr", c.Targets(), "--api-server", b.Base)
	createGraphWhenOffered(t, a, ns, attrGraph)
	var ids []string
	for i := range 3 {
		data := []byte(fmt.Sprintf("payload %d stored via server A", i))
		ids = append(ids, upload(t, a, ns, "g", fmt.Sprintf("doc-%d", i), data, nil))
	}
	for i, id := range ids {
		waitContent(t, a, ns, id) // extracted by the executor via B
		if len(metadata(t, a, ns, id).ExtractedMetadata) == 0 {
			t.Fatalf("content %s was not extracted", id)
		}
		want := fmt.Sprintf("payload %d stored via server A", i)
		if got := download(t, b, ns, id); got != want {
			t.Fatalf("download via B = %q, want %q", got, want)
		}
	}
	obj := s3Object(t, srv, metadata(t, b, ns, ids[0]).StorageURL)
	code, body, err := b.JSON(http.MethodDelete, "/namespaces/"+ns+"/content", wire.ContentIDs{ContentIDs: []string{ids[0]}}, nil)
	if err != nil || code/100 != 2 {
		t.Fatalf("delete via B: %d %v %s", code, err, body)
	}
	harness.Eventually(t, 30*time.Second, "shared bucket object collected", func() error { return fileGone(obj) })
	if got := download(t, a, ns, ids[1]); got != "payload 1 stored via server A" {
		t.Fatalf("other content damaged: %q", got)
	}
}

// S3 down: uploads answer 503 with the JSON error shape and write no
// metadata; downloads of stored content answer 503 too. S3 back: uploads
// work again without restarting anything.
func TestS3OutageAnswers503(t *testing.T) {
	srv := harness.StartS3(t)
	dev := harness.StartDev(t, t.TempDir(), s3Flags(srv, "outage")...)
	api := dev.API
	ns := newNamespace(t, api, "outage")
	createGraphWhenOffered(t, api, ns, attrGraph)
	before := upload(t, api, ns, "g", "before", []byte("stored before the outage"), nil)
	waitContent(t, api, ns, before)

	srv.Stop()
	for _, id := range []string{"during-1", "during-2"} {
		code, body, err := uploadRaw(api, http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/g/extract", id, []byte("lost"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var e wire.Error
		if code != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Code != "unavailable" || e.Error == "" {
			t.Fatalf("upload during outage: %d %s, want 503 with code unavailable", code, body)
		}
	}
	code, body, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+before+"/download", "", nil)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"unavailable"`) {
		t.Fatalf("download during outage: %d %v %s, want 503", code, err, body)
	}
	if list := listContent(t, api, ns, "g"); len(list) != 1 || list[0].ID != before {
		t.Fatalf("content after failed uploads: %+v, want only %q", list, before)
	}

	srv.Start()
	after := upload(t, api, ns, "g", "after", []byte("stored after the outage"), nil)
	waitContent(t, api, ns, after)
	if got := download(t, api, ns, after); got != "stored after the outage" {
		t.Fatalf("download after recovery = %q", got)
	}
	if got := download(t, api, ns, before); got != "stored before the outage" {
		t.Fatalf("old content after recovery = %q", got)
	}
}
