package state

import (
	"fmt"
	"strings"
	"testing"
)

func TestValidateParams(t *testing.T) {
	c := &schemaCache{}
	cases := []struct {
		schema, params string
		wantErr        string
	}{
		{"", "", ""},
		{"", `{"anything": [1]}`, ""},
		{"", `[1]`, "object"},
		{"", `{`, "not valid JSON"},
		{embedSchema, `{"dim": 3}`, ""},
		{embedSchema, `{"dim": "x"}`, "schema"},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["k"]}`, `{"k": 1}`, ""},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["k"]}`, `{}`, "schema"},
		{`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}`, `{}`, ""},
		{`{"$ref": "https://example.com/remote.json"}`, `{}`, "not allowed"},
		{`{"type": 5}`, `{}`, "invalid"},
		{`not json`, `{}`, "not JSON"},
	}
	for _, tc := range cases {
		err := c.validateParams(tc.schema, tc.params, CurrentRules)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("schema %s params %s: %v", tc.schema, tc.params, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("schema %s params %s: err %v, want %q", tc.schema, tc.params, err, tc.wantErr)
		}
	}
}

func TestValidNames(t *testing.T) {
	for _, ok := range []string{"a", "A1", "a.b-c_d", strings.Repeat("x", 128)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "_a", ".a", "a b", "a/b", "ä", strings.Repeat("x", 129)} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
	for _, ok := range []string{"a", "doc-1.pdf", "a@b", "x.y", strings.Repeat("x", 128), "ünïcode"} {
		if err := ValidContentID(ok); err != nil {
			t.Errorf("ValidContentID(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "..", "a..b", "a b", "a\tb", "a\nb", "a\x7f", "\xff", strings.Repeat("x", 129)} {
		if ValidContentID(bad) == nil {
			t.Errorf("ValidContentID(%q) accepted", bad)
		}
	}
}

func TestVersionRef(t *testing.T) {
	ns, id, v, err := ParseVersionRef(VersionRef("ns", "a@b", 12))
	if err != nil || ns != "ns" || id != "a@b" || v != 12 {
		t.Fatalf("got %q %q %d %v", ns, id, v, err)
	}
	for _, bad := range []string{"", "id@1", "ns/@1", "ns/id@", "ns/id@0", "ns/id@x", "/id@1", "ns/id"} {
		if _, _, _, err := ParseVersionRef(bad); err == nil {
			t.Errorf("ParseVersionRef(%q) accepted", bad)
		}
	}
	if len(TaskID("n", "g", "p", "c", 1)) != 24 || len(ChildContentID("t", 0)) != 16 || TaskID("n", "g", "p", "c", 1) == TaskID("n", "g", "p", "c", 2) {
		t.Fatal("id helpers")
	}
}

func TestPageOf(t *testing.T) {
	var items []string
	for i := 999; i >= 0; i-- {
		items = append(items, fmt.Sprintf("%04d", (i*7)%1000))
	}
	id := func(s string) string { return s }
	less := func(a, b string) bool { return a < b }
	for _, tc := range []struct {
		start string
		limit int
		first string
		n     int
	}{
		{"", 0, "0000", 1000},
		{"", 3, "0000", 3},     // heap path
		{"0500", 5, "0501", 5}, // heap path with cursor
		{"0995", 10, "0996", 4},
		{"0999", 10, "", 0},
		{"", 500, "0000", 500}, // sort path
	} {
		got := pageOf(items, tc.start, tc.limit, id, less)
		if len(got) != tc.n || (tc.n > 0 && got[0] != tc.first) {
			t.Fatalf("%+v: got %d items starting %v", tc, len(got), got[:min(len(got), 3)])
		}
		for i := 1; i < len(got); i++ {
			if got[i-1] >= got[i] {
				t.Fatalf("%+v: not sorted at %d", tc, i)
			}
		}
	}
}
