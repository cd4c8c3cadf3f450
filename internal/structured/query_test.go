package structured

import (
	"errors"
	"strings"
	"testing"
)

var testGraphs = map[string]string{"g": "g_1", "My-Graph.v2": "g_2", "docs": "g_3"}

func TestCheckQueryRewrites(t *testing.T) {
	cases := map[string]string{
		"select * from g":                          `select * from "g_1" AS g`,
		"select * from g x where x.a = 1":          `select * from "g_1" x where x.a = 1`,
		`select * from "My-Graph.v2" as m`:         `select * from "g_2" as m`,
		"select * from my-graph.v2":                `select * from "g_2" AS "my-graph.v2"`,
		"select * from g, docs d":                  `select * from "g_1" AS g, "g_3" d`,
		"select * from G join docs on true":        `select * from "g_1" AS G join "g_3" AS docs on true`,
		"select extract(year from now()) from g":   `select extract(year from now()) from "g_1" AS g`,
		"select 'from g' from g;  ":                `select 'from g' from "g_1" AS g`,
		"with g as (select 1) select * from g":     `with g as (select 1) select * from g`,
		"select * from json_each('[1]')":           `select * from json_each('[1]')`,
		"select * from (select * from g) s":        `select * from (select * from "g_1" AS g) s`,
		"select * from docs where 1 in (select 1)": `select * from "g_3" AS docs where 1 in (select 1)`,
	}
	refused := []string{
		"select * from g, (_graphs)", "select * from g where exists (select 1 from _graphs)",
		"select (select tbl from _graphs) from g", "select * from g union all select * from _graphs",
		`select * from g as "sqlite_master"`, "select * from g join docs using (content_id), _graphs",
		"select * from g cross join lateral (select * from _columns) x", "select * from rows from (json_each('[1]'))",
		"select * from xmltable('x' passing 'y' columns a int)", "select * from g where a in _graphs",
		"select * from (with x as (select 1) select * from _graphs)",
	}
	for _, q := range refused {
		if _, err := checkQuery(q, testGraphs); !errors.Is(err, ErrQuery) {
			t.Errorf("%q approved", q)
		}
	}
	cases["select * from (values (1), (2)) v(a)"] = "select * from (values (1), (2)) v(a)"
	cases["select * from (with x as (select 1) select * from x, g) y"] = `select * from (with x as (select 1) select * from x, "g_1" AS g) y`
	cases["with a as (select 1), b as (select 2) select * from a, b, docs"] = `with a as (select 1), b as (select 2) select * from a, b, "g_3" AS docs`
	cases["select a, b from g group by a, b order by a, b"] = `select a, b from "g_1" AS g group by a, b order by a, b`
	for in, want := range cases {
		got, err := checkQuery(in, testGraphs)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got.SQL != want {
			t.Errorf("%q:\n got %q\nwant %q", in, got.SQL, want)
		}
	}
}

func TestCheckQueryCaseInsensitiveOnlyWhenUnique(t *testing.T) {
	graphs := map[string]string{"A": "g_a", "a": "g_b", "B": "g_c"}
	if q, err := checkQuery("select * from b", graphs); err != nil || !strings.Contains(q.SQL, "g_c") {
		t.Fatalf("%v %v", q, err)
	}
	if q, err := checkQuery(`select * from "a"`, graphs); err != nil || !strings.Contains(q.SQL, "g_b") {
		t.Fatalf("%v %v", q, err)
	}
	if _, err := checkQuery(`select * from "b"`, graphs); !errors.Is(err, ErrQuery) {
		t.Fatalf("quoted name matched another case: %v", err)
	}
}

// FuzzQueryCheck: the checker never panics, and never approves a statement
// that contains a write keyword outside quotes and comments, a second
// statement, or a system name.
func FuzzQueryCheck(f *testing.F) {
	for _, s := range []string{
		"select * from g", "select 1; --", "select 1; delete from g", "with x as (delete from g) select 1",
		"select * from g where a = 'it''s' -- c\n", "select /* x */ 1", `select "delete" from g`,
		"select * from sqlite_master", "select * from (g) join docs using (content_id)",
		"select E'\\'' ; drop table g", "select $$;$$", "select * from g where a in g",
		"with recursive r(i) as (select 1 union all select i+1 from r) select * from r",
		"select * from My-Graph.v2, docs", "select 'a' || \"b\" from g", "select x::text from g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		cq, err := checkQuery(src, testGraphs)
		if err != nil {
			if !errors.Is(err, ErrQuery) {
				t.Fatalf("error %v does not wrap ErrQuery", err)
			}
			return
		}
		toks, err := tokenize(cq.SQL)
		if err != nil {
			t.Fatalf("approved %q but its rewrite %q does not tokenize: %v", src, cq.SQL, err)
		}
		for i, tk := range toks {
			if tk.kind == tIdent && writeKeywords[tk.lower()] {
				t.Fatalf("approved %q containing %s", src, tk.text)
			}
			if (tk.kind == tIdent || tk.kind == tQIdent) && deniedName(tk.text) {
				t.Fatalf("approved %q naming %s", src, tk.text)
			}
			if tk.kind == tPunct && tk.text == ";" && i != len(toks)-1 {
				t.Fatalf("approved %q with two statements", src)
			}
		}
		if !toks[0].is("select") && !toks[0].is("with") {
			t.Fatalf("approved %q not starting with SELECT/WITH", src)
		}
	})
}
