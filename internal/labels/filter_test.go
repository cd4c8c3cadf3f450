package labels

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		want    Expr
		wantErr string
	}{
		{in: "a=b", want: Expr{"a", OpEq, "b"}},
		{in: "lang!=en", want: Expr{"lang", OpNe, "en"}},
		{in: "size>=3", want: Expr{"size", OpGe, "3"}},
		{in: "size<=3", want: Expr{"size", OpLe, "3"}},
		{in: "size>3", want: Expr{"size", OpGt, "3"}},
		{in: "size<3", want: Expr{"size", OpLt, "3"}},
		{in: " k = v ", want: Expr{"k", OpEq, "v"}},
		{in: "k=", want: Expr{"k", OpEq, ""}},
		{in: "k==v", want: Expr{"k", OpEq, "=v"}},
		{in: "", wantErr: "empty"},
		{in: "   ", wantErr: "empty"},
		{in: "novalue", wantErr: "no operator"},
		{in: "=v", wantErr: "empty key"},
		{in: ">=3", wantErr: "empty key"},
		{in: "a!b", wantErr: "'!'"},
	}
	for _, c := range cases {
		got, err := ParseExpr(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseExpr(%q) err = %v, want containing %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseExpr(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseExpr(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestParseListError(t *testing.T) {
	if _, err := Parse([]string{"a=b", "oops"}); err == nil {
		t.Fatal("want error for bad second expression")
	}
	f, err := Parse(nil)
	if err != nil || !f.Empty() || !f.Match(nil) {
		t.Fatalf("empty filter: %v %+v", err, f)
	}
}

func TestMatch(t *testing.T) {
	lbl := map[string]string{
		"lang":  `"en"`,
		"size":  `10`,
		"ratio": `0.5`,
		"ok":    `true`,
		"num":   `"10"`, // a JSON string that looks like a number
		"raw":   `plain`,
		"nul":   `null`,
	}
	cases := []struct {
		expr string
		want bool
	}{
		{"lang=en", true},
		{"lang!=en", false},
		{"lang=fr", false},
		{"lang!=fr", true},
		{"size=10", true},
		{"size=10.0", true}, // numeric equality
		{"size>3", true},    // numeric, not lexical ("10" < "3")
		{"size<3", false},
		{"size>=10", true},
		{"size<=10", true},
		{"size<10", false},
		{"ratio<1", true},
		{"ok=true", true},
		{"ok!=false", true},
		{"num>3", false}, // JSON string: compared as text, "10" < "3"
		{"num=10", true},
		{"raw=plain", true},
		{"nul=null", true},
		{"size>abc", false}, // text comparison "10" > "abc" is false
		{"missing=x", false},
		{"missing!=x", true},
		{"missing>1", false},
		{"missing<1", false},
		{"missing<=1", false},
		{"missing>=1", false},
	}
	for _, c := range cases {
		f, err := Parse([]string{c.expr})
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.expr, err)
		}
		if got := f.Match(lbl); got != c.want {
			t.Errorf("%q.Match = %v, want %v", c.expr, got, c.want)
		}
	}
}

func TestMatchConjunction(t *testing.T) {
	f, err := Parse([]string{"lang=en", "size>5"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Match(map[string]string{"lang": `"en"`, "size": "6"}) {
		t.Error("both hold: want match")
	}
	if f.Match(map[string]string{"lang": `"en"`, "size": "5"}) {
		t.Error("second fails: want no match")
	}
}
