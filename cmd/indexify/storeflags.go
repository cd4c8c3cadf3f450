package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/indexify-go/indexify/internal/dirlock"
	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/structured"
)

// storeFlags select the retrieval stores of an API server (`server` and
// `dev`): where embeddings (vector indexes) and extracted metadata (SQL
// tables) live. The embedded defaults keep files under <data-dir>; they
// serve one API server. Several API replicas need the shared stores
// (Weaviate and PostgreSQL), as they need S3 for blobs.
type storeFlags struct {
	vectorStore    string
	indexDir       string
	weaviateURL    string
	weaviateKey    string
	structuredKind string
	sqlDir         string
	postgresDSN    string
	sqlTimeout     time.Duration
}

func (f *storeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.vectorStore, "vector-store", "embedded", "where embeddings are indexed: embedded (files under --index-dir) or weaviate (--weaviate-url)")
	fs.StringVar(&f.indexDir, "index-dir", "", "directory of the embedded vector indexes (default: <data-dir>/indexes)")
	fs.StringVar(&f.weaviateURL, "weaviate-url", "", "Weaviate endpoint, e.g. http://weaviate:8080 (--vector-store weaviate)")
	fs.StringVar(&f.weaviateKey, "weaviate-api-key-file", "", "file holding the Weaviate API key, sent with every request (a Weaviate with AUTHENTICATION_APIKEY_ENABLED)")
	fs.StringVar(&f.structuredKind, "structured-store", "sqlite", "where extracted metadata is stored for SQL: sqlite (files under --sql-dir) or postgres (--postgres-dsn-file)")
	fs.StringVar(&f.sqlDir, "sql-dir", "", "directory of the SQLite structured-data files (default: <data-dir>/structured)")
	fs.StringVar(&f.postgresDSN, "postgres-dsn-file", "", "file holding the PostgreSQL connection string, e.g. postgres://user:pass@host/db (--structured-store postgres)")
	fs.DurationVar(&f.sqlTimeout, "sql-timeout", 5*time.Second, "a user's SQL query is cut off after this long")
}

func readSecretFile(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// open builds the selected stores. Both are required to exist at start:
// a shared store that is down at startup fails the start (a Kubernetes
// restart loop says so), unlike a later outage, which is a 503 per request.
func (f *storeFlags) open(dataDir string, log *slog.Logger) (index.Store, structured.Store, error) {
	var vec index.Store
	switch f.vectorStore {
	case "embedded":
		if f.weaviateURL != "" || f.weaviateKey != "" {
			return nil, nil, fmt.Errorf("--weaviate-url or --weaviate-api-key-file is set but --vector-store is embedded; add --vector-store weaviate")
		}
		dir := f.indexDir
		if dir == "" {
			dir = filepath.Join(dataDir, "indexes")
		}
		e, err := waitForDir(dir, log, index.OpenEmbedded)
		if err != nil {
			return nil, nil, fmt.Errorf("vector index: %w", err)
		}
		vec = e
	case "weaviate":
		if f.weaviateURL == "" {
			return nil, nil, fmt.Errorf("--vector-store weaviate needs --weaviate-url")
		}
		var opts []index.WeaviateOption
		if f.weaviateKey != "" {
			key, err := readSecretFile("--weaviate-api-key-file", f.weaviateKey)
			if err != nil {
				return nil, nil, err
			}
			if key == "" {
				return nil, nil, fmt.Errorf("--weaviate-api-key-file: %s is empty", f.weaviateKey)
			}
			opts = append(opts, index.WithAPIKey(key))
		}
		w, err := index.OpenWeaviate(f.weaviateURL, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("weaviate: %w", err)
		}
		vec = w
	default:
		return nil, nil, fmt.Errorf("--vector-store must be embedded or weaviate, got %q", f.vectorStore)
	}
	sql, err := f.openStructured(dataDir, log)
	if err != nil {
		vec.Close()
		return nil, nil, err
	}
	log.Info("retrieval stores", "vectors", f.vectorStore, "structured", f.structuredKind)
	return vec, sql, nil
}

// openStructured builds the selected structured-data store.
func (f *storeFlags) openStructured(dataDir string, log *slog.Logger) (structured.Store, error) {
	switch f.structuredKind {
	case "sqlite":
		if f.postgresDSN != "" {
			return nil, fmt.Errorf("--postgres-dsn-file is set but --structured-store is sqlite; add --structured-store postgres")
		}
		dir := f.sqlDir
		if dir == "" {
			dir = filepath.Join(dataDir, "structured")
		}
		s, err := waitForDir(dir, log, func(dir string) (*structured.SQLite, error) {
			return structured.OpenSQLite(dir, structured.Config{QueryTimeout: f.sqlTimeout})
		})
		if err != nil {
			return nil, fmt.Errorf("structured data: %w", err)
		}
		return s, nil
	case "postgres":
		if f.postgresDSN == "" {
			return nil, fmt.Errorf("--structured-store postgres needs --postgres-dsn-file")
		}
		dsn, err := readSecretFile("--postgres-dsn-file", f.postgresDSN)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := structured.OpenPostgres(ctx, dsn, structured.Config{QueryTimeout: f.sqlTimeout})
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		return p, nil
	default:
		return nil, fmt.Errorf("--structured-store must be sqlite or postgres, got %q", f.structuredKind)
	}
}

// storeLockWait bounds how long a starting server waits for an embedded
// store's directory that another process holds: on Kubernetes the pod that
// replaces a deleted API server starts while the old one is still in its
// termination grace period (30 s by default in the chart) on the same
// volume.
const storeLockWait = 2 * time.Minute

// waitForDir opens an embedded store's directory, waiting while another
// process holds it (internal/dirlock), and says once why start-up pauses.
func waitForDir[T any](dir string, log *slog.Logger, open func(string) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeLockWait)
	defer cancel()
	return dirlock.Wait(ctx, func() (T, error) { return open(dir) }, func(err error) {
		log.Warn("waiting for a store directory another process still holds (a previous server shutting down?)",
			"dir", dir, "for_at_most", storeLockWait)
	})
}
