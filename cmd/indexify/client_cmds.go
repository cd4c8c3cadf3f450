package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/apiclient"
)

func newNamespaceCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "namespace", Aliases: []string{"namespaces", "ns"}, Short: "List, create and show namespaces (API client)"}
	o.register(cmd, false)
	show := func(s *session, list []apiclient.Namespace, v any) error {
		rows := make([][]string, 0, len(list))
		for _, n := range list {
			rows = append(rows, []string{n.Name, unixTime(n.CreatedAt)})
		}
		return s.out.print(v, []string{"NAME", "CREATED"}, rows)
	}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List namespaces", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			list, err := s.api.Namespaces(s.ctx)
			if err != nil {
				return err
			}
			return show(s, list, list)
		}),
	}, &cobra.Command{
		Use: "get NAME", Short: "Show one namespace", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, _ *cobra.Command, args []string) error {
			n, err := s.api.Namespace(s.ctx, args[0])
			if err != nil {
				return err
			}
			return show(s, []apiclient.Namespace{n}, n)
		}),
	}, &cobra.Command{
		Use: "create NAME", Short: "Create a namespace", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, cmd *cobra.Command, args []string) error {
			if err := s.api.CreateNamespace(s.ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "namespace %s created\n", args[0])
			return nil
		}),
	})
	return cmd
}

func graphRows(list []apiclient.Graph) [][]string {
	rows := make([][]string, 0, len(list))
	for _, g := range list {
		var pols []string
		for _, p := range g.ExtractionPolicies {
			src := p.ContentSource
			if src == "" {
				src = "ingestion"
			}
			pols = append(pols, fmt.Sprintf("%s(%s<-%s)", p.Name, p.Extractor, src))
		}
		rows = append(rows, []string{g.Name, dash(g.Description), joinOr(pols, "-")})
	}
	return rows
}

var graphHeader = []string{"NAME", "DESCRIPTION", "POLICIES"}

func newGraphCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "graph", Aliases: []string{"graphs"}, Short: "List, create, show and delete extraction graphs (API client)"}
	o.register(cmd, true)
	var file string
	create := &cobra.Command{
		Use: "create -f FILE", Short: "Create an extraction graph from a YAML or JSON file (- for stdin)", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("-f FILE is required")
			}
			var spec []byte
			var err error
			if file == "-" {
				spec, err = readAll(cmd.InOrStdin())
			} else {
				spec, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			g, err := s.api.CreateGraph(s.ctx, s.ns, spec)
			if err != nil {
				return err
			}
			return s.out.print(g, graphHeader, graphRows([]apiclient.Graph{g}))
		}),
	}
	create.Flags().StringVarP(&file, "file", "f", "", "graph spec file (YAML or JSON; - reads stdin)")
	cmd.AddCommand(&cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List extraction graphs", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			list, err := s.api.Graphs(s.ctx, s.ns)
			if err != nil {
				return err
			}
			return s.out.print(list, graphHeader, graphRows(list))
		}),
	}, &cobra.Command{
		Use: "get NAME", Short: "Show one extraction graph", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, _ *cobra.Command, args []string) error {
			g, err := s.api.Graph(s.ctx, s.ns, args[0])
			if err != nil {
				return err
			}
			return s.out.print(g, graphHeader, graphRows([]apiclient.Graph{g}))
		}),
	}, create, &cobra.Command{
		Use: "delete NAME", Aliases: []string{"rm"}, Short: "Delete an extraction graph", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, cmd *cobra.Command, args []string) error {
			if err := s.api.DeleteGraph(s.ctx, s.ns, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "extraction graph %s deleted\n", args[0])
			return nil
		}),
	})
	return cmd
}

var contentHeader = []string{"ID", "SOURCE", "PARENT", "MIME TYPE", "SIZE", "VERSION", "NAME"}

func contentRows(list []apiclient.Content) [][]string {
	rows := make([][]string, 0, len(list))
	for _, c := range list {
		rows = append(rows, []string{c.ID, c.Source, dash(c.ParentID), c.MimeType, u64(c.Size), u64(c.Version), dash(c.Name)})
	}
	return rows
}

func newContentCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "content", Short: "List, upload, show and delete content (API client)"}
	o.register(cmd, true)

	var graph string
	var q apiclient.ContentQuery
	var limit int
	list := &cobra.Command{
		Use: "list --graph GRAPH", Aliases: []string{"ls"}, Short: "List the content of an extraction graph", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			if graph == "" {
				return fmt.Errorf("--graph is required")
			}
			items, err := s.api.ContentAll(s.ctx, s.ns, graph, q, limit)
			if err != nil {
				return err
			}
			return s.out.print(items, contentHeader, contentRows(items))
		}),
	}
	list.Flags().StringVarP(&graph, "graph", "g", "", "extraction graph")
	list.Flags().StringVar(&q.Source, "source", "", "only content from this source: ingestion or a policy name")
	list.Flags().StringVar(&q.ParentID, "parent", "", "only children of this content id")
	list.Flags().StringArrayVar(&q.Labels, "label", nil, "label filter expression, e.g. lang=en (repeatable)")
	list.Flags().IntVar(&limit, "limit", 0, "at most this many items (default all; fetched in pages of 1000)")

	cmd.AddCommand(list, &cobra.Command{
		Use: "get ID", Short: "Show one content's metadata", Args: cobra.ExactArgs(1),
		RunE: o.run(func(s *session, _ *cobra.Command, args []string) error {
			c, err := s.api.ContentMetadata(s.ctx, s.ns, args[0])
			if err != nil {
				return err
			}
			return s.out.print(c, contentHeader, contentRows([]apiclient.Content{c}))
		}),
	}, &cobra.Command{
		Use: "delete ID...", Aliases: []string{"rm"}, Short: "Delete content trees", Args: cobra.MinimumNArgs(1),
		RunE: o.run(func(s *session, cmd *cobra.Command, args []string) error {
			if err := s.api.DeleteContent(s.ctx, s.ns, args); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "deleted %s\n", strings.Join(args, ", "))
			return nil
		}),
	}, newUploadCmd(o), newDownloadCmd(o))
	return cmd
}

var taskHeader = []string{"ID", "POLICY", "EXTRACTOR", "CONTENT", "OUTCOME", "EXECUTOR", "ATTEMPTS", "LAST ERROR"}

func newTaskCmd() *cobra.Command {
	o := &clientOpts{}
	cmd := &cobra.Command{Use: "task", Aliases: []string{"tasks"}, Short: "List extraction tasks (API client)"}
	o.register(cmd, true)
	var graph, policy, content string
	var limit int
	list := &cobra.Command{
		Use: "list --graph GRAPH [--policy POLICY]", Aliases: []string{"ls"}, Short: "List tasks of a graph's policies", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			if graph == "" {
				return fmt.Errorf("--graph is required")
			}
			policies := []string{policy}
			if policy == "" {
				g, err := s.api.Graph(s.ctx, s.ns, graph)
				if err != nil {
					return err
				}
				policies = policies[:0]
				for _, p := range g.ExtractionPolicies {
					policies = append(policies, p.Name)
				}
			}
			all := []apiclient.Task{}
			for _, p := range policies {
				ts, err := s.api.TasksAll(s.ctx, s.ns, graph, p, content, limit)
				if err != nil {
					return err
				}
				all = append(all, ts...)
			}
			rows := make([][]string, 0, len(all))
			for _, t := range all {
				state := t.Outcome
				if state == "unknown" {
					state = "pending"
					if t.ExecutorID != "" {
						state = "running"
					}
				}
				rows = append(rows, []string{t.ID, t.ExtractionPolicyName, t.Extractor, t.ContentID, state, dash(t.ExecutorID),
					fmt.Sprint(t.Attempts), dash(firstLine(t.LastError))})
			}
			return s.out.print(all, taskHeader, rows)
		}),
	}
	list.Flags().StringVarP(&graph, "graph", "g", "", "extraction graph")
	list.Flags().StringVarP(&policy, "policy", "p", "", "extraction policy (default: every policy of the graph)")
	list.Flags().StringVar(&content, "content", "", "only tasks of this content id")
	list.Flags().IntVar(&limit, "limit", 0, "at most this many tasks per policy (default all; fetched in pages of 1000)")
	cmd.AddCommand(list)
	return cmd
}

// addExecutorList adds `executor list` (an API client command) to the
// executor runtime command; `indexify executor` alone still runs one.
func addExecutorList(exec *cobra.Command) *cobra.Command {
	o := &clientOpts{}
	list := &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List registered executors (API client)", Args: cobra.NoArgs,
		RunE: o.run(func(s *session, _ *cobra.Command, _ []string) error {
			list, err := s.api.Executors(s.ctx)
			if err != nil {
				return err
			}
			rows := make([][]string, 0, len(list))
			for _, e := range list {
				rows = append(rows, []string{e.ID, dash(e.Address), joinOr(e.Extractors, "-"), fmt.Sprint(e.MaxPendingTasks), ago(e.LastSeen)})
			}
			return s.out.print(list, []string{"ID", "ADDRESS", "EXTRACTORS", "MAX PENDING", "LAST SEEN"}, rows)
		}),
	}
	o.register(list, false)
	exec.AddCommand(list)
	return exec
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}
