package extractors

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func chunkStrings(t *testing.T, text string, params string) []string {
	t.Helper()
	out, err := NewChunker().Extract(context.Background(), Input{Data: []byte(text), MimeType: "text/plain", Params: json.RawMessage(params)})
	if err != nil {
		t.Fatalf("Extract(%q, %s): %v", text, params, err)
	}
	var got []string
	for i, c := range out.Contents {
		if c.MimeType != "text/plain" {
			t.Errorf("chunk %d mime %q", i, c.MimeType)
		}
		if idx := string(c.Labels["chunk_index"]); idx != strings.TrimSpace(mustJSON(i)) {
			t.Errorf("chunk %d has chunk_index %s", i, idx)
		}
		got = append(got, string(c.Data))
	}
	if len(out.Features) != 0 {
		t.Errorf("chunker produced features: %v", out.Features)
	}
	return got
}

func TestChunkerSizesAndOverlap(t *testing.T) {
	cases := []struct {
		text, params string
		want         []string
	}{
		{"abcdefghij", `{"chunk_size":4}`, []string{"abcd", "efgh", "ij"}},
		{"abcdefgh", `{"chunk_size":4}`, []string{"abcd", "efgh"}},
		{"abcdefghij", `{"chunk_size":4,"overlap":2}`, []string{"abcd", "cdef", "efgh", "ghij"}},
		{"abcdefghijk", `{"chunk_size":4,"overlap":2}`, []string{"abcd", "cdef", "efgh", "ghij", "ijk"}},
		{"abc", `{"chunk_size":10,"overlap":9}`, []string{"abc"}},
		{"abcde", `{"chunk_size":1}`, []string{"a", "b", "c", "d", "e"}},
		{"abcde", `{"chunk_size":2.0,"overlap":1}`, []string{"ab", "bc", "cd", "de"}},
		{"", `{"chunk_size":3}`, nil},
	}
	for _, c := range cases {
		got := chunkStrings(t, c.text, c.params)
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("chunk(%q, %s) = %q, want %q", c.text, c.params, got, c.want)
		}
	}
}

func TestChunkerDefaults(t *testing.T) {
	text := strings.Repeat("x", 250)
	for _, params := range []string{"", "null", "{}"} {
		got := chunkStrings(t, text, params)
		if len(got) != 3 || len(got[0]) != 100 || len(got[1]) != 100 || len(got[2]) != 50 {
			t.Errorf("params %q: chunk lengths wrong: %d chunks", params, len(got))
		}
	}
}

func TestChunkerUnicodeCountsCharacters(t *testing.T) {
	// Multi-byte runes must never be split: sizes count code points.
	got := chunkStrings(t, "héllo wörld 日本語テキスト🙂!", `{"chunk_size":5,"overlap":1}`)
	want := []string{"héllo", "o wör", "rld 日", "日本語テキ", "キスト🙂!"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q want %q", got, want)
	}
	if _, err := NewChunker().Extract(context.Background(), Input{Data: []byte{'a', 0xff, 'b'}}); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("invalid UTF-8 accepted: %v", err)
	}
}

func TestChunkerBadParams(t *testing.T) {
	bad := map[string]string{
		`{"chunk_size":0}`:             "chunk_size",
		`{"chunk_size":-3}`:            "chunk_size",
		`{"chunk_size":2.5}`:           "chunk_size",
		`{"chunk_size":"10"}`:          "chunk_size",
		`{"chunk_size":1e30}`:          "chunk_size",
		`{"overlap":-1}`:               "overlap",
		`{"chunk_size":5,"overlap":5}`: "less than chunk_size",
		`{"chunk_size":5,"overlap":9}`: "less than chunk_size",
		`{"overlap":100}`:              "less than chunk_size",
		`{"chunk_sz":5}`:               "unknown input param",
		`[1,2]`:                        "JSON object",
		`{"chunk_size":`:               "not valid JSON",
	}
	for params, want := range bad {
		_, err := NewChunker().Extract(context.Background(), Input{Data: []byte("hello"), Params: json.RawMessage(params)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("params %s: err %v, want mention of %q", params, err, want)
		}
	}
}

func TestChunkerDescription(t *testing.T) {
	d := NewChunker().Describe()
	if d.GetName() != ChunkerName {
		t.Fatalf("name %q", d.GetName())
	}
	var schema struct {
		Properties map[string]struct {
			Type    string `json:"type"`
			Minimum *int   `json:"minimum"`
			Default *int   `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(d.GetInputParamsSchemaJson()), &schema); err != nil {
		t.Fatal(err)
	}
	cs, ov := schema.Properties["chunk_size"], schema.Properties["overlap"]
	if cs.Type != "integer" || *cs.Minimum != 1 || *cs.Default != 100 || ov.Type != "integer" || *ov.Minimum != 0 || *ov.Default != 0 {
		t.Fatalf("schema %s", d.GetInputParamsSchemaJson())
	}
	if _, err := compileSchema([]byte(d.GetInputParamsSchemaJson())); err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	want := map[string]bool{"text/plain": true, "text/markdown": true, "text/csv": true, "application/json": true}
	for _, m := range d.GetInputMimeTypes() {
		delete(want, m)
	}
	if len(want) != 0 {
		t.Fatalf("missing mime types %v", want)
	}
}

// chunk_size 1e18 used to fail every task with "must be an integer >= 1,
// got 1e+18", which it is: the message now states the real bounds.
func TestChunkParamsBoundsMessage(t *testing.T) {
	for params, want := range map[string]string{
		`{"chunk_size":1e18}`:                "chunk_size must be an integer from 1 to 1000000, got 1e18",
		`{"chunk_size":1000001}`:             "chunk_size must be an integer from 1 to 1000000",
		`{"chunk_size":9223372036854775808}`: "from 1 to 1000000",
		`{"chunk_size":10,"overlap":1e29}`:   "overlap must be an integer from 0 to 999999",
		`{"chunk_size":10,"overlap":10}`:     "overlap (10) must be less than chunk_size (10)",
	} {
		_, err := ParseChunkParams(json.RawMessage(params))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", params, err, want)
		}
	}
	if p, err := ParseChunkParams(json.RawMessage(`{"chunk_size":1000000,"overlap":999999}`)); err != nil || p.ChunkSize != MaxChunkSize {
		t.Errorf("largest params: %+v %v", p, err)
	}
}

// overlap 39 / size 40 made 67 chunks from 106 bytes; a big input would
// make millions. More than MaxChunks fails the task, saying why.
func TestChunkerCapsChunksPerContent(t *testing.T) {
	in := func(n int, params string) (*Output, error) {
		return NewChunker().Extract(context.Background(), Input{Data: []byte(strings.Repeat("x", n)), MimeType: "text/plain", Params: json.RawMessage(params)})
	}
	// size 40, overlap 39: n code points make n-39 chunks.
	if out, err := in(MaxChunks+39, `{"chunk_size":40,"overlap":39}`); err != nil || len(out.Contents) != MaxChunks {
		t.Fatalf("exactly MaxChunks: %v (%d chunks)", err, len(out.Contents))
	}
	_, err := in(MaxChunks+40, `{"chunk_size":40,"overlap":39}`)
	if err == nil || !strings.Contains(err.Error(), "at most 10000 chunks") {
		t.Fatalf("one chunk too many: %v", err)
	}
}

func TestChunkCountMatchesChunkText(t *testing.T) {
	for n := 0; n < 60; n++ {
		for size := 1; size < 12; size++ {
			for overlap := 0; overlap < size; overlap++ {
				text := []byte(strings.Repeat("é", n))
				if got, want := ChunkCount(n, size, overlap), len(ChunkText(text, size, overlap)); got != want {
					t.Fatalf("ChunkCount(%d,%d,%d) = %d, ChunkText made %d", n, size, overlap, got, want)
				}
			}
		}
	}
}
