package labels

import (
	"strings"
	"testing"
)

// FuzzParse: any expression list either parses or returns an error (never
// panics); a parsed filter evaluates on any labels, and each expression's
// String() parses back to the same expression.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"lang=en", "size>3\nsize<=10", `name="x=y"`, "a!=b", "k=", "=v", "a==b", "x>=1e309",
		"n<-0", "n>1e999", "b<-1e400", "n>inf", "n=NaN", "n>+5", "n>0x10", `k={"a":1}`, "k=[1,2]", "k=true", "é=ü", "a=b\nc=d\ne>1", "<>", "k>>1", "\x00=\x00",
	} {
		f.Add(s, `{"lang":"\"en\"","size":"5","name":"\"x=y\""}`)
	}
	f.Fuzz(func(t *testing.T, exprs string, labelText string) {
		list := strings.Split(exprs, "\n")
		flt, err := Parse(list)
		if err != nil {
			return
		}
		for _, e := range flt.Exprs {
			back, err := ParseExpr(e.String())
			if err != nil {
				t.Fatalf("%q parsed, but its String() %q does not: %v", e, e.String(), err)
			}
			if back != e {
				t.Fatalf("round trip of %q: %+v != %+v", e.String(), back, e)
			}
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, ":")
			labels[k] = v
		}
		flt.Match(labels)
		flt.Match(nil)
	})
}
