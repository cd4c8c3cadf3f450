package extractors

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/indexify-go/indexify/internal/embed"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Embedding embeds a text content as one embedding feature ("embedding",
// a JSON array of numbers) of that content. The vectors come from the
// embedder embed.FromParams builds for the same name and params, so the API
// server embeds search queries into the same space.
type Embedding struct {
	desc  *pb.ExtractorDescription
	build func(params json.RawMessage) (embed.Embedder, error)
}

// NewLexicalEmbedding returns the built-in lexical embedding extractor: no
// model, no network, deterministic.
func NewLexicalEmbedding() *Embedding {
	return &Embedding{
		desc: &pb.ExtractorDescription{
			Name: embed.LexicalExtractor,
			Description: "Embeds text with a deterministic lexical embedding (hashed words, word bigrams and " +
				"character trigrams, L2-normalised); needs no model. The declared dim is the default; " +
				"an index takes the dim of its policy's params.",
			InputParamsSchemaJson: mustJSON(embed.LexicalSchema()),
			InputMimeTypes:        []string{"text/*"},
			Outputs:               embeddingOutputs(embed.DefaultDim),
		},
		build: func(p json.RawMessage) (embed.Embedder, error) { return embed.FromParams(embed.LexicalExtractor, p) },
	}
}

// NewOpenAIEmbedding returns the extractor that calls an OpenAI-compatible
// /v1/embeddings endpoint. defaults (the executor's configuration) fill
// base_url, model and the key file where a policy's params leave them out,
// and the key directory a params' api_key_file is resolved in.
func NewOpenAIEmbedding(defaults embed.OpenAIDefaults) *Embedding {
	return &Embedding{
		desc: &pb.ExtractorDescription{
			Name: embed.OpenAIExtractor,
			Description: "Embeds text through any OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM, " +
				"text-embeddings-inference). The params' dim is required and checked on every response; " +
				"the declared dim is 0 because only the params know it.",
			InputParamsSchemaJson: mustJSON(embed.OpenAISchema()),
			InputMimeTypes:        []string{"text/*"},
			Outputs:               embeddingOutputs(0),
		},
		build: func(p json.RawMessage) (embed.Embedder, error) {
			return embed.FromParamsWith(embed.OpenAIExtractor, p, defaults)
		},
	}
}

func embeddingOutputs(dim int) map[string]*pb.ExtractorOutput {
	return map[string]*pb.ExtractorOutput{
		embed.Output: {Embedding: &pb.EmbeddingSchema{Dim: uint32(dim), Distance: embed.Distance}},
	}
}

// Describe implements Extractor.
func (e *Embedding) Describe() *pb.ExtractorDescription { return e.desc }

// Extract implements Extractor.
func (e *Embedding) Extract(ctx context.Context, in Input) (*Output, error) {
	if _, err := paramsObject(in.Params); err != nil {
		return nil, err
	}
	emb, err := e.build(in.Params)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(in.Data) {
		return nil, fmt.Errorf("content is not valid UTF-8 text")
	}
	vecs, err := emb.Embed(ctx, []string{string(in.Data)})
	if err != nil {
		return nil, err
	}
	if len(vecs) != 1 || len(vecs[0]) != emb.Dim() {
		return nil, fmt.Errorf("embedder returned %d vectors, want 1 of dimension %d", len(vecs), emb.Dim())
	}
	v, err := json.Marshal(vecs[0])
	if err != nil {
		return nil, fmt.Errorf("embedding is not representable as JSON: %v", err)
	}
	return &Output{Features: []*pb.Feature{{Name: embed.Output, Embedding: true, ValueJson: string(v)}}}, nil
}
