package extractors

import (
	"context"
	"encoding/json"
	"testing"
)

func TestAttributes(t *testing.T) {
	cases := []struct {
		data string
		want ContentAttributes
	}{
		{"", ContentAttributes{0, 0, 0, "text/plain; charset=utf-8"}},
		{"hello world\n", ContentAttributes{1, 2, 12, "text/plain; charset=utf-8"}},
		{"one two\nthree\n\nfour", ContentAttributes{4, 4, 19, "text/plain; charset=utf-8"}},
		{"  spaced\t out  ", ContentAttributes{1, 2, 15, "text/plain; charset=utf-8"}},
		{"%PDF-1.7\n...", ContentAttributes{2, 2, 12, "application/pdf"}},
		{"<html><body>hi</body></html>", ContentAttributes{1, 1, 28, "text/html; charset=utf-8"}},
		{"\x89PNG\r\n\x1a\n\x00\x00", ContentAttributes{3, 3, 10, "image/png"}},
	}
	for _, c := range cases {
		out, err := NewAttributes().Extract(context.Background(), Input{Data: []byte(c.data)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Contents) != 0 || len(out.Features) != 1 {
			t.Fatalf("%q: unexpected output %+v", c.data, out)
		}
		f := out.Features[0]
		if f.GetName() != AttributesFeature || f.GetEmbedding() {
			t.Fatalf("feature %v", f)
		}
		var got ContentAttributes
		if err := json.Unmarshal([]byte(f.GetValueJson()), &got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%q: got %+v want %+v", c.data, got, c.want)
		}
	}
}

func TestAttributesDescriptionAndParams(t *testing.T) {
	d := NewAttributes().Describe()
	if d.GetName() != AttributesName || len(d.GetInputMimeTypes()) != 1 || d.GetInputMimeTypes()[0] != "*/*" {
		t.Fatalf("description %v", d)
	}
	o := d.GetOutputs()[AttributesFeature]
	if o == nil || o.GetMetadataSchemaJson() == "" {
		t.Fatalf("outputs %v", d.GetOutputs())
	}
	// The advertised schema must accept what the extractor produces.
	schema, err := compileSchema([]byte(o.GetMetadataSchemaJson()))
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewAttributes().Extract(context.Background(), Input{Data: []byte("a b\n")})
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(out.Features[0].GetValueJson()), &v); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(v); err != nil {
		t.Fatalf("own output fails own schema: %v", err)
	}
	if _, err := NewAttributes().Extract(context.Background(), Input{Data: []byte("x"), Params: json.RawMessage(`"str"`)}); err == nil {
		t.Fatal("non-object params accepted")
	}
}
