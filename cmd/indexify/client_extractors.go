package main

// `indexify extractor list`: the extractors the executors registered, with
// the outputs each declares (embeddings become indexes, metadata becomes
// SQL columns).

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/wire"
)

func newExtractorCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "extractor", Aliases: []string{"extractors"}, Short: "List extractors and their outputs (API client)"}
	o.register(cmd, false)
	cmd.AddCommand(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List registered extractors, their input types and outputs", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			list, err := s.api.Extractors(s.ctx)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(list))
			for _, e := range list {
				rows = append(rows, []string{e.Name, joinOr(e.InputMimeTypes, "*"), outputsText(e), dash(firstLine(e.Description))})
			}
			return s.out.print(list, []string{"NAME", "INPUT", "OUTPUTS", "DESCRIPTION"}, rows)
		}),
	})
	return cmd
}

// outputsText is a table cell for an extractor's outputs, sorted by name:
// "embedding:embedding(384,cosine), metadata:stats".
func outputsText(e wire.Extractor) string {
	names := make([]string, 0, len(e.Outputs))
	for n := range e.Outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if emb := e.Outputs[n].Embedding; emb != nil {
			parts = append(parts, fmt.Sprintf("embedding:%s(%d,%s)", n, emb.Dim, emb.Distance))
		} else {
			parts = append(parts, "metadata:"+n)
		}
	}
	return dash(strings.Join(parts, ", "))
}
