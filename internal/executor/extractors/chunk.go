package extractors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// ChunkerName is the registered name of the text chunker.
const ChunkerName = "tensorlake/chunk-extractor"

const (
	defaultChunkSize = 100
	defaultOverlap   = 0
	// MaxChunkSize bounds chunk_size (code points). The schema says so, so a
	// graph asking for more is refused when it is created, not by every task.
	MaxChunkSize = 1_000_000
	// MaxChunks bounds the chunks made from one content; input that would
	// make more fails the task with a message saying how to fix the params.
	// It equals state.MaxChildrenPerContent, the coordinator's bound on the
	// children of one content (a test checks they agree).
	MaxChunks = 10_000
)

// chunkerSchema states every bound the chunker enforces, so the coordinator
// refuses bad params when the graph is created: ranges in JSON schema, and
// overlap < chunk_size in the x-indexify-less-than keyword (state's
// validateParams applies it; JSON schema cannot compare two fields).
var chunkerSchema = mustJSON(map[string]any{
	"type": "object",
	"properties": map[string]any{
		"chunk_size": map[string]any{
			"type": "integer", "minimum": 1, "maximum": MaxChunkSize, "default": defaultChunkSize,
			"description": "characters (Unicode code points) per chunk",
		},
		"overlap": map[string]any{
			"type": "integer", "minimum": 0, "maximum": MaxChunkSize - 1, "default": defaultOverlap,
			"description": "characters shared by consecutive chunks; must be less than chunk_size",
		},
	},
	"additionalProperties": false,
	"x-indexify-less-than": map[string]any{"overlap": "chunk_size"},
})

// Chunker splits text into fixed-size, optionally overlapping chunks, one
// child content per chunk labelled with its chunk_index.
type Chunker struct{}

// NewChunker returns the built-in text chunker.
func NewChunker() *Chunker { return &Chunker{} }

// Describe implements Extractor.
func (*Chunker) Describe() *pb.ExtractorDescription {
	return &pb.ExtractorDescription{
		Name:                  ChunkerName,
		Description:           "Splits text into chunks of chunk_size characters with overlap characters shared between neighbours.",
		InputParamsSchemaJson: chunkerSchema,
		InputMimeTypes:        []string{"text/plain", "text/markdown", "text/csv", "application/json"},
	}
}

// ChunkParams are the chunker's input params.
type ChunkParams struct {
	ChunkSize int `json:"chunk_size"`
	Overlap   int `json:"overlap"`
}

// ParseChunkParams applies defaults and enforces the schema, including the
// cross-field rule overlap < chunk_size that JSON schema cannot express; the
// API server's schema check is not relied upon because params may come from
// anywhere.
func ParseChunkParams(raw json.RawMessage) (ChunkParams, error) {
	p := ChunkParams{ChunkSize: defaultChunkSize, Overlap: defaultOverlap}
	obj, err := paramsObject(raw)
	if err != nil {
		return p, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(obj, &fields); err != nil {
		return p, fmt.Errorf("input params: %v", err)
	}
	for k, v := range fields {
		switch k {
		case "chunk_size":
			n, err := jsonInt(v)
			if err != nil || n < 1 || n > MaxChunkSize {
				return p, fmt.Errorf("chunk_size must be an integer from 1 to %d, got %s", MaxChunkSize, v)
			}
			p.ChunkSize = n
		case "overlap":
			n, err := jsonInt(v)
			if err != nil || n < 0 || n >= MaxChunkSize {
				return p, fmt.Errorf("overlap must be an integer from 0 to %d, got %s", MaxChunkSize-1, v)
			}
			p.Overlap = n
		default:
			return p, fmt.Errorf("unknown input param %q (allowed: chunk_size, overlap)", k)
		}
	}
	if p.Overlap >= p.ChunkSize {
		return p, fmt.Errorf("overlap (%d) must be less than chunk_size (%d)", p.Overlap, p.ChunkSize)
	}
	return p, nil
}

// jsonInt accepts a JSON number with no fractional part (10 or 10.0, as JSON
// schema's "integer" does) that fits an int.
func jsonInt(v json.RawMessage) (int, error) {
	// json.Number also decodes quoted strings; params must be real numbers.
	if t := bytes.TrimSpace(v); len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return 0, fmt.Errorf("not a number")
	}
	var num json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&num); err != nil {
		return 0, err
	}
	if n, err := strconv.ParseInt(num.String(), 10, 64); err == nil {
		if n > math.MaxInt32 || n < math.MinInt32 {
			return 0, fmt.Errorf("out of range")
		}
		return int(n), nil
	}
	f, err := num.Float64()
	if err != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, fmt.Errorf("not an integer")
	}
	return int(f), nil
}

// Extract implements Extractor.
func (*Chunker) Extract(ctx context.Context, in Input) (*Output, error) {
	p, err := ParseChunkParams(in.Params)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(in.Data) {
		return nil, fmt.Errorf("content is not valid UTF-8 text")
	}
	if n := ChunkCount(utf8.RuneCount(in.Data), p.ChunkSize, p.Overlap); n > MaxChunks {
		return nil, fmt.Errorf("%d characters with chunk_size %d and overlap %d make %d chunks; at most %d chunks per content are allowed (raise chunk_size or lower overlap)",
			utf8.RuneCount(in.Data), p.ChunkSize, p.Overlap, n, MaxChunks)
	}
	chunks := ChunkText(in.Data, p.ChunkSize, p.Overlap)
	out := &Output{Contents: make([]OutContent, 0, len(chunks))}
	for i, c := range chunks {
		// Large inputs make many chunks; honour cancellation between them.
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		out.Contents = append(out.Contents, OutContent{
			Data:     c,
			MimeType: "text/plain",
			Labels:   map[string]json.RawMessage{"chunk_index": json.RawMessage(strconv.Itoa(i))},
		})
	}
	return out, nil
}

// ChunkCount is how many chunks ChunkText makes from n code points.
func ChunkCount(n, size, overlap int) int {
	if n == 0 || size < 1 || overlap < 0 || overlap >= size {
		return 0
	}
	if n <= size {
		return 1
	}
	step := size - overlap
	return 1 + (n-size+step-1)/step
}

// ChunkText splits UTF-8 text into chunks of size code points, consecutive
// chunks sharing overlap code points (0 <= overlap < size). The last chunk may
// be shorter; no chunk is emitted for empty text, and no trailing chunk is
// emitted that would lie entirely inside the previous one. Chunks alias data.
func ChunkText(data []byte, size, overlap int) [][]byte {
	if len(data) == 0 || size < 1 || overlap < 0 || overlap >= size {
		return nil
	}
	// Byte offsets of every rune start plus len(data), so chunks slice the
	// original bytes exactly.
	offs := make([]int, 0, utf8.RuneCount(data)+1)
	for i := range string(data) {
		offs = append(offs, i)
	}
	n := len(offs)
	offs = append(offs, len(data))
	step := size - overlap
	var chunks [][]byte
	for start := 0; ; start += step {
		end := min(start+size, n)
		chunks = append(chunks, data[offs[start]:offs[end]])
		if end == n {
			break
		}
	}
	return chunks
}
