package main

// Output of the client commands: a table by default, or the API's JSON or
// YAML with -o.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"gopkg.in/yaml.v3"
)

// printer writes one result in the chosen format.
type printer struct {
	format string // table, json or yaml
	w      io.Writer
}

func newPrinter(format string, w io.Writer) (*printer, error) {
	switch format {
	case "table", "json", "yaml":
		return &printer{format: format, w: w}, nil
	}
	return nil, fmt.Errorf("-o %q: want table, json or yaml", format)
}

// print writes v as JSON/YAML, or header+rows as a table.
func (p *printer) print(v any, header []string, rows [][]string) error {
	switch p.format {
	case "json":
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := toYAML(v)
		if err != nil {
			return err
		}
		_, err = p.w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// toYAML renders v's JSON form as block-style YAML, keeping the JSON field
// order (JSON is YAML, so the JSON text parses into a node tree whose flow
// styles are then reset).
func toYAML(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	var reset func(*yaml.Node)
	reset = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			reset(c)
		}
	}
	reset(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// dash shows empty cells as "-" so table columns stay aligned for cut/awk.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
