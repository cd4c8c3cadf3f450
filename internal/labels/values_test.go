package labels

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestValidValue(t *testing.T) {
	for _, v := range []string{`1`, `-0.5`, `1e308`, `-1.7976931348623157e308`, `"1e400"`, `"text"`, `true`, `null`,
		`[1,2,{"a":3}]`, `{"a":{"b":[4e-400]}}`} {
		if err := ValidValue(v); err != nil {
			t.Errorf("ValidValue(%s): %v", v, err)
		}
	}
	for _, v := range []string{`1e400`, `-1e400`, `1e999`, `[1,1e309]`, `{"a":{"b":-2e308}}`, `nope`, ``, `1 2`, `{`} {
		if err := ValidValue(v); err == nil {
			t.Errorf("ValidValue(%s) accepted", v)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"a", "é", "chunk_index", "a.b-c"} {
		if err := ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", "a=b", "a!", "x<", "y>", "\x00", "a\nb", "\x7f"} {
		if err := ValidKey(k); err == nil {
			t.Errorf("ValidKey(%q) accepted", k)
		}
	}
	if err := Validate(map[string]string{"ok": "1", "z": "1e400"}); err == nil {
		t.Error("Validate accepted 1e400")
	}
	if ValidKey(strings.Repeat("k", MaxKeyBytes)) != nil || ValidKey(strings.Repeat("k", MaxKeyBytes+1)) == nil {
		t.Error("key size bound wrong")
	}
	if ValidValue(`"`+strings.Repeat("v", MaxValueBytes-2)+`"`) != nil || ValidValue(`"`+strings.Repeat("v", MaxValueBytes-1)+`"`) == nil {
		t.Error("value size bound wrong")
	}
	m := map[string]string{}
	for i := 0; i < MaxLabels; i++ {
		m[strconv.Itoa(i)] = "1"
	}
	if err := Validate(m); err != nil {
		t.Errorf("%d labels: %v", MaxLabels, err)
	}
	m["one-more"] = "1"
	if Validate(m) == nil {
		t.Errorf("%d labels accepted", len(m))
	}
}

func TestNumber(t *testing.T) {
	for s, want := range map[string]float64{"0": 0, "-1": -1, "2.5": 2.5, "1e3": 1000, "1E-2": 0.01, "-0": 0} {
		if f, ok := Number(s); !ok || f != want {
			t.Errorf("Number(%q) = %v, %v", s, f, ok)
		}
	}
	for _, s := range []string{"1e400", "-1e999", "inf", "Inf", "NaN", "+5", "0x10", "1_000", "01", "1.", ".5", "", "-", "1e", "1e+"} {
		if _, ok := Number(s); ok {
			t.Errorf("Number(%q) accepted", s)
		}
	}
}

// Filters used to compare out-of-range numbers as text: n>1e999 matched 5
// and b<0 matched the label -1e400.
func TestFilterRefusesOutOfRangeNumbers(t *testing.T) {
	for _, e := range []string{"n>1e999", "n<-1e400", "n=1e309"} {
		if _, err := Parse([]string{e}); err == nil {
			t.Errorf("Parse(%q) accepted", e)
		}
		if _, err := ParseSyntax([]string{e}); err != nil {
			t.Errorf("ParseSyntax(%q): %v", e, err)
		}
	}
	// Labels stored before the rule compare as ±Inf, not as text.
	f, err := Parse([]string{"n<5"})
	if err != nil {
		t.Fatal(err)
	}
	if f.Match(map[string]string{"n": "1e400"}) {
		t.Error("n<5 matched a stored label 1e400 (text comparison)")
	}
	if !f.Match(map[string]string{"n": "-1e400"}) || !f.Match(map[string]string{"n": "-1"}) {
		t.Error("n<5 did not match -1e400 or -1")
	}
	// "inf" and "nan" are words, not numbers.
	f, _ = Parse([]string{"n>nan"})
	if !f.Match(map[string]string{"n": `"zzz"`}) || f.Match(map[string]string{"n": "5"}) {
		t.Error("n>nan compared numerically")
	}
}

// FuzzValidValue: ValidValue never panics, accepts only valid JSON, and
// accepts a plain number exactly when it is finite.
func FuzzValidValue(f *testing.F) {
	for _, s := range []string{`1`, `1e400`, `-1e999`, `[1,1e309]`, `{"a":1}`, `"x"`, `nope`, `1 2`, `-0`, `0.0e-9999`} {
		f.Add(s)
	}
	for _, s := range []string{`"a\"1"`, `["\\",-2e5]`, `{"k\u0031":[1.5e3,{"x":-0.1E-2}]}`, `[true,null,false,1e309]`, ` 7 `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		err := ValidValue(v)
		if err == nil && !json.Valid([]byte(v)) {
			t.Fatalf("accepted invalid JSON %q", v)
		}
		if want := validValueByDecoder(v); (err == nil) != (want == nil) {
			t.Fatalf("%q: ValidValue says %v, a json.Decoder walk says %v", v, err, want)
		}
		var n json.Number
		if json.Unmarshal([]byte(v), &n) == nil && isJSONNumber(string(n)) {
			x, perr := strconv.ParseFloat(string(n), 64)
			finite := perr == nil && !math.IsInf(x, 0)
			if finite != (err == nil) {
				t.Fatalf("number %q: finite=%v but ValidValue err=%v", v, finite, err)
			}
		}
	})
}

// validValueByDecoder is ValidValue as it was written first, walking every
// token with a json.Decoder: the reference the in-place scan is fuzzed
// against.
func validValueByDecoder(v string) error {
	if len(v) > MaxValueBytes {
		return fmt.Errorf("value is %d bytes", len(v))
	}
	if !json.Valid([]byte(v)) {
		return fmt.Errorf("not JSON")
	}
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n, ok := tok.(json.Number); ok {
			if err := checkNumber(n.String()); err != nil {
				return err
			}
		}
	}
}

func TestValidValueMatchesADecoderWalk(t *testing.T) {
	for _, v := range []string{
		`1`, `1e309`, `-1e309`, `"1e309"`, `"a\"1e999"`, `["\\",1e999]`, `{"1e999":2}`,
		`{"k":[1,2,{"z":-1e400}]}`, `[true,false,null]`, `"\u0031e999"`, `  -0.5e-3 `, `[0,-0,1.0E+2]`,
		`"` + strings.Repeat("x", MaxValueBytes-2) + `"`,
		`""`, `"`, ` "x"`, "\"a\x01b\"", "\"\x1f\"", "\"\x20\"", "\"tab\there\"", `"a"b"`, `"a\"b"`, `"é1e999"`, "\"\xff\xfe\"", `"1" `,
	} {
		got, want := ValidValue(v), validValueByDecoder(v)
		if (got == nil) != (want == nil) {
			t.Errorf("%.60q: ValidValue %v, decoder walk %v", v, got, want)
		}
	}
}

// BenchmarkValidValue4KiB is the value of the writes bench's 4 KiB cell.
func BenchmarkValidValue4KiB(b *testing.B) {
	v := `"` + strings.Repeat("x", 4094) + `"`
	b.ReportAllocs()
	for b.Loop() {
		if err := ValidValue(v); err != nil {
			b.Fatal(err)
		}
	}
}
