// Package structured holds the metadata that extractors produce, as SQL
// tables a user can query: one table per extraction graph in a namespace,
// with a content_id and policy_name column plus one column per metadata key
// seen so far (new keys add columns).
//
// Two implementations stand behind Store: SQLite (embedded, files in the data
// dir) and PostgreSQL (shared by several API servers). Both run the same
// conformance suite against the real thing.
package structured

import (
	"context"
	"errors"
)

// Row is one content's metadata from one policy. A table holds at most one
// row per (ContentID, Policy): Upsert replaces it (retries never duplicate).
type Row struct {
	ContentID string
	Policy    string
	Extractor string
	Metadata  map[string]any // decoded JSON object; keys become columns
}

// Column is one column of a graph's table.
type Column struct {
	Type    string // "text" | "integer" | "real" | "boolean" | "json"
	Comment string
}

// Schema describes one graph's table.
type Schema struct {
	Namespace string
	Graph     string
	Columns   map[string]Column
	DDL       string // CREATE TABLE statement, as a user would write it
}

// ErrQuery wraps every refusal of a user query (a write, a second
// statement, a table outside the namespace, a system table, a syntax
// error, a timeout): the API answers it with 400.
var ErrQuery = errors.New("query refused")

// Store is the structured-data store. Implementations are safe for
// concurrent use.
type Store interface {
	// Upsert writes rows into the graph's table (created on first use,
	// columns added for new keys), all or none.
	Upsert(ctx context.Context, ns, graph string, rows []Row) error
	// Delete removes these contents' rows from every table of the namespace.
	Delete(ctx context.Context, ns string, contentIDs []string) error
	// DropGraph removes a graph's table; missing is not an error.
	DropGraph(ctx context.Context, ns, graph string) error
	// Rows returns one content's rows across the namespace's tables.
	Rows(ctx context.Context, ns, contentID string) ([]Row, error)
	// Schemas lists the namespace's tables.
	Schemas(ctx context.Context, ns string) ([]Schema, error)
	// Query runs one read-only SELECT over the namespace's tables, which it
	// names by graph name; each row maps column -> value. Anything else
	// returns an error wrapping ErrQuery and never runs.
	Query(ctx context.Context, ns, sql string) ([]map[string]any, error)
	Close() error
}
