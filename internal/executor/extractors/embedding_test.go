package extractors

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/indexify-go/indexify/internal/embed"
)

func embeddingOf(t *testing.T, e *Embedding, text, params string) []float32 {
	t.Helper()
	out, err := e.Extract(context.Background(), Input{Data: []byte(text), MimeType: "text/plain", Params: json.RawMessage(params)})
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if len(out.Contents) != 0 || len(out.Features) != 1 {
		t.Fatalf("want exactly one feature and no content, got %+v", out)
	}
	f := out.Features[0]
	if f.GetName() != embed.Output || !f.GetEmbedding() {
		t.Fatalf("feature %+v: want embedding feature %q", f, embed.Output)
	}
	var v []float32
	if err := json.Unmarshal([]byte(f.GetValueJson()), &v); err != nil {
		t.Fatalf("value_json is not a number array: %v", err)
	}
	return v
}

func TestLexicalEmbeddingExtractor(t *testing.T) {
	x := NewLexicalEmbedding()
	v := embeddingOf(t, x, "retrieval augmented generation", "")
	if len(v) != embed.DefaultDim {
		t.Fatalf("dim %d", len(v))
	}
	// The query side (API server) builds the same embedder from the same params.
	q, err := embed.FromParams(x.Describe().GetName(), json.RawMessage(`{"dim":16}`))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := q.Embed(context.Background(), []string{"retrieval augmented generation"})
	got := embeddingOf(t, x, "retrieval augmented generation", `{"dim":16}`)
	if len(got) != 16 {
		t.Fatalf("dim %d, want 16", len(got))
	}
	for i := range got {
		if got[i] != want[0][i] {
			t.Fatalf("extractor and FromParams disagree at %d: %v vs %v", i, got[i], want[0][i])
		}
	}
	for _, bad := range []string{`{"dim":4}`, `{"dim":"x"}`, `{"size":3}`, `[]`} {
		if _, err := x.Extract(context.Background(), Input{Data: []byte("x"), Params: json.RawMessage(bad)}); err == nil {
			t.Errorf("params %s accepted", bad)
		}
	}
	if _, err := x.Extract(context.Background(), Input{Data: []byte{0xff, 0xfe}}); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

func TestEmbeddingDescriptions(t *testing.T) {
	for _, tc := range []struct {
		x   *Embedding
		dim uint32
	}{{NewLexicalEmbedding(), embed.DefaultDim}, {NewOpenAIEmbedding(embed.OpenAIDefaults{}), 0}} {
		d := tc.x.Describe()
		o := d.GetOutputs()[embed.Output]
		if o.GetEmbedding().GetDim() != tc.dim || o.GetEmbedding().GetDistance() != "cosine" {
			t.Errorf("%s: outputs %v", d.GetName(), d.GetOutputs())
		}
		if len(d.GetInputMimeTypes()) != 1 || d.GetInputMimeTypes()[0] != "text/*" {
			t.Errorf("%s: mime types %v", d.GetName(), d.GetInputMimeTypes())
		}
		if _, err := compileSchema([]byte(d.GetInputParamsSchemaJson())); err != nil {
			t.Errorf("%s: schema does not compile: %v", d.GetName(), err)
		}
	}
}

// TestEmbeddingSchemasAgreeWithParsers: the schema the API server checks at
// graph creation accepts exactly what the extractor accepts at run time
// (except cross-field and file checks, which only the parser can do).
func TestEmbeddingSchemasAgreeWithParsers(t *testing.T) {
	check := func(name, schema string, parse func(json.RawMessage) error, cases []string) {
		s, err := compileSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(c)))
			if err != nil {
				t.Fatal(err)
			}
			schemaOK := s.Validate(doc) == nil
			parseOK := parse(json.RawMessage(c)) == nil
			if schemaOK != parseOK {
				t.Errorf("%s %s: schema accepts=%v, parser accepts=%v", name, c, schemaOK, parseOK)
			}
		}
	}
	check("lexical", NewLexicalEmbedding().Describe().GetInputParamsSchemaJson(),
		func(p json.RawMessage) error { _, err := embed.ParseLexicalParams(p); return err },
		[]string{`{}`, `{"dim":8}`, `{"dim":4096}`, `{"dim":7}`, `{"dim":4097}`, `{"dim":1.5}`, `{"dim":"8"}`, `{"x":1}`})
	const u = `"base_url":"http://127.0.0.1:1","model":"m"`
	check("openai", NewOpenAIEmbedding(embed.OpenAIDefaults{}).Describe().GetInputParamsSchemaJson(),
		func(p json.RawMessage) error {
			_, err := embed.ParseOpenAIParams(p, embed.OpenAIDefaults{})
			return err
		},
		[]string{`{` + u + `,"dim":3}`, `{` + u + `}`, `{` + u + `,"dim":0}`, `{` + u + `,"dim":3,"batch_size":2049}`,
			`{` + u + `,"dim":3,"batch_size":1}`, `{` + u + `,"dim":3,"key":"k"}`, `{` + u + `,"dim":3,"model":5}`})
}

// The OpenAI extractor against a loopback server speaking /v1/embeddings
// (real embedding services cannot run here); executor defaults supply the
// base URL and model the params leave out.
func TestOpenAIEmbeddingExtractor(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Model != "nomic" || len(req.Input) != 1 || req.Input[0] != "hello" {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"model not found"}`))
			return
		}
		w.Write([]byte(`{"data":[{"embedding":[0.5,0.25,0.125],"index":0}]}`))
	}))
	defer srv.Close()
	x := NewOpenAIEmbedding(embed.OpenAIDefaults{BaseURL: srv.URL, Model: "nomic"})
	v := embeddingOf(t, x, "hello", `{"dim":3}`)
	if len(v) != 3 || v[0] != 0.5 || v[2] != 0.125 {
		t.Fatalf("vector %v", v)
	}
	_, err := x.Extract(context.Background(), Input{Data: []byte("hello"), Params: json.RawMessage(`{"dim":3,"model":"other"}`)})
	if err == nil || !strings.Contains(err.Error(), "400 Bad Request") || !strings.Contains(err.Error(), "model not found") {
		t.Fatalf("4xx error: %v", err)
	}
}
