package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/structured"
)

// --weaviate-api-key-file is refused where it cannot apply or holds no
// key, before any connection is tried. (The key reaching a real Weaviate
// that requires it: test/e2e TestRetrievalOnCluster.)
func TestWeaviateAPIKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    storeFlags
		want string
	}{
		{"key with the embedded store", storeFlags{vectorStore: "embedded", weaviateKey: empty}, "--vector-store is embedded"},
		{"missing key file", storeFlags{vectorStore: "weaviate", weaviateURL: "http://127.0.0.1:1", weaviateKey: filepath.Join(dir, "nope")}, "--weaviate-api-key-file"},
		{"empty key file", storeFlags{vectorStore: "weaviate", weaviateURL: "http://127.0.0.1:1", weaviateKey: empty}, "is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := c.f.open(dir, slog.Default())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("open: %v, want an error with %q", err, c.want)
			}
		})
	}
}

// A server that starts while another process still has the embedded
// stores open (the old API server pod in its grace period, on the same
// volume) waits for them instead of opening the same files, and opens
// them as soon as the other one lets go.
func TestServerWaitsForItsEmbeddedStores(t *testing.T) {
	dir := t.TempDir()
	f := storeFlags{vectorStore: "embedded", structuredKind: "sqlite"}
	oldVec, oldSQL, err := f.open(dir, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	type opened struct {
		vec index.Store
		sql structured.Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		v, s, err := f.open(dir, slog.Default())
		done <- opened{v, s, err}
	}()
	select {
	case o := <-done:
		t.Fatalf("the second server opened the stores the first still holds: %v", o.err)
	case <-time.After(time.Second): // a bounded look that nothing happened, not synchronisation
	}
	oldVec.Close()
	oldSQL.Close()
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatalf("open after the first closed: %v", o.err)
		}
		o.vec.Close()
		o.sql.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the second server did not open the stores after the first closed them")
	}
}
