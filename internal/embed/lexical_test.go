package embed

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"strings"
	"testing"
)

func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot
}

func norm2(v []float32) float64 { return math.Sqrt(cosine(v, v)) }

func TestLexicalDeterministicAndUnitNorm(t *testing.T) {
	l := NewLexical(DefaultDim)
	texts := []string{"The quick brown fox", "", "   ...   ", "Ünïcödé façade 数据 123", strings.Repeat("word ", 10000)}
	a, err := l.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLexical(DefaultDim).Embed(context.Background(), texts)
	for i := range texts {
		if len(a[i]) != DefaultDim {
			t.Fatalf("text %d: dim %d", i, len(a[i]))
		}
		if n := norm2(a[i]); math.Abs(n-1) > 1e-5 {
			t.Fatalf("text %q: norm %v, want 1", texts[i], n)
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				t.Fatalf("text %d differs between runs at %d", i, j)
			}
		}
	}
}

// TestLexicalGolden pins the vectors: indexes built by one version must be
// searchable by the next, so any change to tokenising, hashing or weights
// must be deliberate (and then needs a re-index; see DESIGN.md).
const goldenLexical = uint64(0xe38862c6cd81c496)

func TestLexicalGolden(t *testing.T) {
	v := NewLexical(64).Vector("Indexify extracts, then indexes, then retrieves.")
	h := fnv.New64a()
	for _, x := range v {
		bits := math.Float32bits(x)
		h.Write([]byte{byte(bits), byte(bits >> 8), byte(bits >> 16), byte(bits >> 24)})
	}
	if got := h.Sum64(); got != goldenLexical {
		t.Fatalf("lexical embedding changed: fingerprint %#x, want %#x", got, goldenLexical)
	}
}

func TestLexicalSimilarity(t *testing.T) {
	l := NewLexical(DefaultDim)
	q := l.Vector("how do I reset my password")
	related := l.Vector("To reset your password, open settings and choose reset password.")
	unrelated := l.Vector("The annual rainfall in the Amazon basin exceeds two metres.")
	if cr, cu := cosine(q, related), cosine(q, unrelated); cr <= cu+0.2 {
		t.Fatalf("cos(related)=%.3f should clearly exceed cos(unrelated)=%.3f", cr, cu)
	}
	// Normalisation: case, NFKC compatibility forms and punctuation do not matter.
	a := l.Vector("ＨＥＬＬＯ, World!")
	b := l.Vector("hello world")
	if c := cosine(a, b); c < 0.9999 {
		t.Fatalf("normalised texts should embed identically, cos=%v", c)
	}
	// Inflections overlap through character trigrams.
	if c := cosine(l.Vector("indexing"), l.Vector("indexes")); c < 0.2 {
		t.Fatalf("cos(indexing, indexes)=%.3f, want some overlap", c)
	}
	// Word order matters a little (bigrams), never fully.
	ab, ba := l.Vector("new york city"), l.Vector("city york new")
	if c := cosine(ab, ba); c >= 0.9999 || c < 0.5 {
		t.Fatalf("cos(reordered)=%.3f, want in [0.5, 1)", c)
	}
}

func TestTokens(t *testing.T) {
	got := Tokens("Café-au-lait, ﬁne: 3.14 naïve\tΣΊΣΥΦΟΣ")
	want := []string{"café", "au", "lait", "fine", "3", "14", "naïve", "σίσυφοσ"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Tokens = %q, want %q", got, want)
	}
}

func TestParseLexicalParams(t *testing.T) {
	for _, tc := range []struct {
		in      string
		dim     int
		wantErr string
	}{
		{"", DefaultDim, ""},
		{"null", DefaultDim, ""},
		{"{}", DefaultDim, ""},
		{`{"dim": 8}`, 8, ""},
		{`{"dim": 4096.0}`, 4096, ""},
		{`{"dim": 7}`, 0, "dim must be an integer in [8, 4096]"},
		{`{"dim": 4097}`, 0, "dim must be an integer"},
		{`{"dim": 10.5}`, 0, "dim must be an integer"},
		{`{"dim": "64"}`, 0, "dim must be an integer"},
		{`{"dims": 64}`, 0, `unknown input param "dims"`},
		{`[1]`, 0, "must be a JSON object"},
		{`{"dim":`, 0, "not valid JSON"},
	} {
		p, err := ParseLexicalParams(json.RawMessage(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p.Dim != tc.dim {
			t.Errorf("%s: got %+v, %v; want dim %d", tc.in, p, err, tc.dim)
		}
	}
}

func TestFromParams(t *testing.T) {
	e, err := FromParams(LexicalExtractor, json.RawMessage(`{"dim":32}`))
	if err != nil || e.Dim() != 32 {
		t.Fatalf("lexical: %v, %v", e, err)
	}
	// The embedder built from params is the one the extractor uses: same vector.
	v, _ := e.Embed(context.Background(), []string{"same space"})
	if w := NewLexical(32).Vector("same space"); cosine(v[0], w) < 0.99999 {
		t.Fatal("FromParams lexical embeds differently from NewLexical")
	}
	if _, err := FromParams("acme/other", nil); err == nil || !strings.Contains(err.Error(), "not an embedding extractor") {
		t.Fatalf("unknown extractor: %v", err)
	}
	if d, err := ParamsDim(LexicalExtractor, nil); err != nil || d != DefaultDim {
		t.Fatalf("ParamsDim lexical = %d, %v", d, err)
	}
	if d, err := ParamsDim(OpenAIExtractor, json.RawMessage(`{"base_url":"http://127.0.0.1:1","model":"m","dim":1536,"api_key_file":"openai.key"}`)); err != nil || d != 1536 {
		t.Fatalf("ParamsDim openai = %d, %v (must not read the key file)", d, err)
	}
	if _, err := ParamsDim(OpenAIExtractor, json.RawMessage(`{"base_url":"http://127.0.0.1:1","model":"m"}`)); err == nil || !strings.Contains(err.Error(), "dim is required") {
		t.Fatalf("ParamsDim openai without dim: %v", err)
	}
	// base_url and model may come from a server's configuration: the dim
	// is the params' own, known without that configuration.
	if d, err := ParamsDim(OpenAIExtractor, json.RawMessage(`{"dim":768}`)); err != nil || d != 768 {
		t.Fatalf("ParamsDim openai with only dim = %d, %v", d, err)
	}
	for params, want := range map[string]string{
		`{"dim":768,"base_url":"ftp://x"}`: "must be an http or https URL",
		`{"dim":768,"modle":"m"}`:          "unknown input param",
		`{"dim":0}`:                        "dim must be an integer",
	} {
		if _, err := ParamsDim(OpenAIExtractor, json.RawMessage(params)); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ParamsDim openai %s: %v, want %q", params, err, want)
		}
	}
}

func BenchmarkLexical(b *testing.B) {
	l := NewLexical(DefaultDim)
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 12) // ~100 words, a chunk
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		l.Vector(text)
	}
}

// TestLexicalRetrievesTheAnsweringChunk: the user story in small. Among
// chunks on different topics, the one that contains the answer ranks first.
func TestLexicalRetrievesTheAnsweringChunk(t *testing.T) {
	chunks := []string{
		"The invoice total is due within thirty days of the billing date.",
		"Raft elects a leader; followers replicate the leader's log entries.",
		"To rotate the API token, run indexify token rotate and restart the executors.",
		"PostgreSQL stores the structured metadata extracted from documents.",
		"The warranty covers manufacturing defects for two years after purchase.",
		"Chunks overlap by a configurable number of characters.",
	}
	l := NewLexical(DefaultDim)
	for q, want := range map[string]int{
		"how do I rotate the api token?":      2,
		"when is the invoice due":             0,
		"which database keeps the metadata":   3,
		"how long is the warranty":            4,
		"who replicates log entries in raft?": 1,
	} {
		qv := l.Vector(q)
		best, bestScore := -1, -2.0
		for i, c := range chunks {
			if s := cosine(qv, l.Vector(c)); s > bestScore {
				best, bestScore = i, s
			}
		}
		if best != want {
			t.Errorf("query %q: top chunk %d (%q), want %d", q, best, chunks[best], want)
		}
	}
}
