package embed

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Feature weights of the lexical embedding. Words carry most of the signal;
// bigrams reward shared phrases; character trigrams let inflections
// ("index", "indexing") and typos overlap a little.
const (
	wordWeight    = 1.0
	bigramWeight  = 0.5
	trigramWeight = 0.25
)

// LexicalParams are the lexical-embedding extractor's input params.
type LexicalParams struct {
	Dim int `json:"dim"`
}

// ParseLexicalParams applies the default dim and enforces its bounds.
func ParseLexicalParams(raw json.RawMessage) (LexicalParams, error) {
	m, err := fields(raw, "dim")
	if err != nil {
		return LexicalParams{}, err
	}
	d, err := intField(m, "dim", DefaultDim, MinDim, MaxDim)
	return LexicalParams{Dim: d}, err
}

// LexicalSchema is the JSON schema of LexicalParams.
func LexicalSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"dim": map[string]any{
				"type": "integer", "minimum": MinDim, "maximum": MaxDim, "default": DefaultDim,
				"description": "length of the embedding vectors",
			},
		},
		"additionalProperties": false,
	}
}

// Lexical is a deterministic embedding that needs no model: feature hashing
// of normalised words, word bigrams and character trigrams into Dim signed
// buckets, L2-normalised. The same text always yields the same vector, on
// any machine and in any version that keeps these constants.
type Lexical struct{ dim int }

// NewLexical returns a lexical embedder of dimension dim (clamped to
// [MinDim, MaxDim]; callers validate params with ParseLexicalParams).
func NewLexical(dim int) *Lexical {
	return &Lexical{dim: min(max(dim, MinDim), MaxDim)}
}

// Dim implements Embedder.
func (l *Lexical) Dim() int { return l.dim }

// Embed implements Embedder; it fails only when ctx is done.
func (l *Lexical) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = l.Vector(t)
	}
	return out, nil
}

// Tokens normalises text (Unicode NFKC, lower case) and splits it into
// words: maximal runs of letters, digits and combining marks.
func Tokens(text string) []string {
	text = strings.ToLower(norm.NFKC.String(text))
	return strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.Is(unicode.Mn, r)
	})
}

// Vector embeds one text. A text with no words gets the unit vector of a
// reserved feature, so every vector has norm 1 (a zero vector has no cosine).
func (l *Lexical) Vector(text string) []float32 {
	acc := make([]float64, l.dim)
	words := Tokens(text)
	for i, w := range words {
		l.add(acc, wordWeight, "w", w)
		if i > 0 {
			l.add(acc, bigramWeight, "b", words[i-1], w)
		}
		// Character trigrams of the word between boundary marks \x02 and \x03,
		// sliced out of one string by rune offsets.
		padded := "\x02" + w + "\x03"
		offs := runeOffsets(padded)
		for j := 0; j+3 < len(offs); j++ {
			l.add(acc, trigramWeight, "c", padded[offs[j]:offs[j+3]])
		}
	}
	var sum float64
	for _, v := range acc {
		sum += v * v
	}
	if sum == 0 { // no words, or every feature cancelled out by opposite signs
		clear(acc)
		l.add(acc, 1, "e", "")
		sum = 1
	}
	vec := make([]float32, l.dim)
	inv := 1 / math.Sqrt(sum)
	for i, v := range acc {
		vec[i] = float32(v * inv)
	}
	return vec
}

// FNV-1a 64-bit constants.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// add hashes the feature (its parts joined by NUL) with 64-bit FNV-1a: the
// low bits pick the bucket, the top bit the sign, so collisions cancel out on
// average instead of adding up.
func (l *Lexical) add(acc []float64, w float64, parts ...string) {
	h := uint64(fnvOffset)
	for i, p := range parts {
		if i > 0 {
			h = (h ^ 0) * fnvPrime
		}
		for j := 0; j < len(p); j++ {
			h = (h ^ uint64(p[j])) * fnvPrime
		}
	}
	if h>>63 == 1 {
		w = -w
	}
	acc[h%uint64(len(acc))] += w
}

// runeOffsets returns the byte offset of every rune of s, plus len(s).
func runeOffsets(s string) []int {
	offs := make([]int, 0, utf8.RuneCountInString(s)+1)
	for i := range s {
		offs = append(offs, i)
	}
	return append(offs, len(s))
}
