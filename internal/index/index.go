// Package index holds the vector indexes that make extracted embeddings
// searchable: one index per embedding output of a policy, named
// "<graph>.<policy>.<output>" inside a namespace (the original's naming).
//
// Two implementations stand behind Store: the embedded one (files in the
// data dir, for `indexify dev` and a single API server) and Weaviate (a
// shared, distributed vector database, for several API servers). Both run
// the same conformance suite against the real thing.
//
// The index list itself is not kept here: it follows from the Raft state
// (graphs and their extractors' declared outputs). A Store only holds
// vectors, and creates an index's storage on EnsureIndex.
package index

import (
	"context"
	"errors"
)

// Distances an index may use; higher Score is always the better match.
const (
	Cosine    = "cosine"    // Score = cosine similarity in [-1, 1]
	Dot       = "dot"       // Score = dot product
	Euclidean = "euclidean" // Score = -euclidean distance
)

// Schema is an index's vector shape, from the extractor's declared output.
type Schema struct {
	Dim      int
	Distance string // Cosine | Dot | Euclidean
}

// Point is one indexed vector. An index holds at most one Point per
// ContentID: Upsert of the same ContentID replaces it (a retried task never
// duplicates a row).
type Point struct {
	ContentID     string
	RootContentID string
	MimeType      string
	Text          string            // the content's text (bounded by the caller), returned by search
	Labels        map[string]string // label -> raw JSON value, as labels.Filter.Match takes them
	Vector        []float32
}

// Hit is a search result.
type Hit struct {
	Point
	Score float32
}

// ErrNoIndex is returned by Search/Upsert on an index that EnsureIndex never created.
var ErrNoIndex = errors.New("index does not exist")

// ErrDim is returned (wrapped) when a vector's length differs from the index's Dim.
var ErrDim = errors.New("vector dimension does not match the index")

// Store is a set of vector indexes, addressed by namespace and index name.
// Implementations are safe for concurrent use.
type Store interface {
	// EnsureIndex creates the index if missing; with a different schema
	// than an existing one it returns an error.
	EnsureIndex(ctx context.Context, ns, name string, s Schema) error
	// DropIndex removes an index and its vectors; missing is not an error.
	DropIndex(ctx context.Context, ns, name string) error
	// Upsert writes points, all or none (nothing half-written is visible).
	Upsert(ctx context.Context, ns, name string, pts []Point) error
	// Delete removes the points of these contents from every index of the
	// namespace (garbage collection of deleted or superseded content).
	Delete(ctx context.Context, ns string, contentIDs []string) error
	// Search returns up to k points nearest to q, best first. keep, when
	// not nil, filters candidates (label filters): the result is the k best
	// of the points keep accepts, not a filtered top-k.
	Search(ctx context.Context, ns, name string, q []float32, k int, keep func(*Point) bool) ([]Hit, error)
	Close() error
}
