// Package embed turns text into vectors. It is shared by the embedding
// extractors (which build an index) and the API server (which embeds a
// search query with the same extractor and parameters that built the
// index, so query and index vectors live in one space).
package embed

import "context"

// Embedder embeds texts; the result has one vector per text, in order.
// Implementations are safe for concurrent use.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dim is the length of every returned vector.
	Dim() int
}
