package main

// Retrieval commands: `indexify search`, `indexify sql`, `indexify index
// list`, `indexify schema list` and `indexify content download`.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/wire"
)

func retrievalCommands() []*cobra.Command {
	return []*cobra.Command{newSearchCmd(), newSQLCmd(), newIndexCmd(), newSchemaCmd()}
}

func newSearchCmd() *cobra.Command {
	o := &clientOpts{}
	var k int
	var filters []string
	var noText bool
	cmd := &cobra.Command{
		Use:   "search INDEX QUERY",
		Short: "Search a vector index (<graph>.<policy>.<output>) for the contents nearest to QUERY",
		Args:  cobra.ExactArgs(2),
		RunE: o.run(func(s *session, _ *cobra.Command, args []string) error {
			include := !noText
			res, err := s.api.Search(s.ctx, s.ns, args[0], wire.SearchRequest{Query: args[1], K: &k, Filters: filters, IncludeContent: &include})
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(res))
			for _, r := range res {
				rows = append(rows, []string{strconv.FormatFloat(float64(r.ConfidenceScore), 'f', 4, 32), r.ContentID, labelText(r.Labels), oneLine(r.Text, 80)})
			}
			return s.out.print(res, []string{"SCORE", "CONTENT", "LABELS", "TEXT"}, rows)
		}),
	}
	o.register(cmd, true)
	cmd.Flags().IntVarP(&k, "k", "k", 5, "number of results")
	cmd.Flags().StringArrayVar(&filters, "filter", nil, "label filter expression, e.g. page=2 (repeatable)")
	cmd.Flags().BoolVar(&noText, "no-text", false, "leave the contents' text out of the answer")
	return cmd
}

func newSQLCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{
		Use:   "sql QUERY",
		Short: "Run a read-only SQL SELECT over the namespace's structured data (one table per graph)",
		Args:  cobra.ExactArgs(1),
		RunE: o.run(func(s *session, _ *cobra.Command, args []string) error {
			res, err := s.api.SQL(s.ctx, s.ns, args[0])
			if err != nil {
				return err
			}
			colSet := map[string]bool{}
			for _, r := range res {
				for c := range r.Data {
					colSet[c] = true
				}
			}
			cols := make([]string, 0, len(colSet))
			for c := range colSet {
				cols = append(cols, c)
			}
			sort.Strings(cols)
			rows := make([][]string, 0, len(res))
			for _, r := range res {
				row := make([]string, len(cols))
				for i, c := range cols {
					row[i] = cellText(r.Data[c])
				}
				rows = append(rows, row)
			}
			header := make([]string, len(cols))
			for i, c := range cols {
				header[i] = strings.ToUpper(c)
			}
			return s.out.print(res, header, rows)
		}),
	}
	o.register(cmd, true)
	return cmd
}

func newIndexCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "index", Aliases: []string{"indexes"}, Short: "List vector indexes (API client)"}
	o.register(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List the namespace's vector indexes", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			list, err := s.api.Indexes(s.ctx, s.ns)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(list))
			for _, i := range list {
				rows = append(rows, []string{i.Name, strconv.Itoa(i.EmbeddingSchema.Dim), i.EmbeddingSchema.Distance})
			}
			return s.out.print(list, []string{"NAME", "DIM", "DISTANCE"}, rows)
		}),
	})
	return cmd
}

func newSchemaCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "schema", Aliases: []string{"schemas"}, Short: "List structured-data tables (API client)"}
	o.register(cmd, true)
	cmd.AddCommand(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List the namespace's tables and their columns", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			sc, err := s.api.Schemas(s.ctx, s.ns)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(sc.Schemas))
			for _, t := range sc.Schemas {
				cols := make([]string, 0, len(t.Columns))
				for n, c := range t.Columns {
					cols = append(cols, n+" "+c.Type)
				}
				sort.Strings(cols)
				rows = append(rows, []string{t.ExtractionGraphName, strings.Join(cols, ", ")})
			}
			return s.out.print(sc, []string{"TABLE", "COLUMNS"}, rows)
		}),
	})
	return cmd
}

// newDownloadCmd is `indexify content download ID [-f FILE]`.
func newDownloadCmd(o *clientOpts) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use: "download ID", Short: "Write a content's bytes to stdout or to --file", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, cmd *cobra.Command, args []string) error {
			var w io.Writer = cmd.OutOrStdout()
			if file != "" && file != "-" {
				f, err := os.Create(file)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			n, err := s.api.Download(s.ctx, s.ns, args[0], w)
			if err != nil {
				return err
			}
			if file != "" && file != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d bytes to %s\n", n, file)
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write to this file instead of stdout")
	return cmd
}

func labelText(l map[string]json.RawMessage) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+string(l[k]))
	}
	return dash(strings.Join(parts, ","))
}

func cellText(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return oneLine(x, 60)
	default:
		b, _ := json.Marshal(x)
		return oneLine(string(b), 60)
	}
}

// oneLine flattens whitespace and cuts s to n runes for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
