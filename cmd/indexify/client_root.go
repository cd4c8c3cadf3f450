package main

// Client commands: `indexify namespace|graph|content|task|executor ...`
// against an API server (--server, INDEXIFY_SERVER). They use only the
// public HTTP API, through internal/apiclient.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/apiclient"
)

const defaultServer = "http://localhost:8900"

// clientOpts are the flags every client command has.
type clientOpts struct {
	server    string
	output    string
	namespace string
	timeout   time.Duration
}

func (o *clientOpts) register(cmd *cobra.Command, namespaced bool) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&o.server, "server", defaultServer, "API server URL (or INDEXIFY_SERVER)")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (default: no limit)")
	if namespaced {
		fs.StringVarP(&o.namespace, "namespace", "n", "default", "namespace")
	}
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
}

// session is what one client command run needs.
type session struct {
	ctx    context.Context
	cancel context.CancelFunc
	api    *apiclient.Client
	out    *printer
	ns     string
}

func (o *clientOpts) open(cmd *cobra.Command) (*session, error) {
	api, err := apiclient.New(o.server)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	p, err := newPrinter(o.output, cmd.OutOrStdout())
	if err != nil {
		return nil, err
	}
	ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt)
	if o.timeout > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, o.timeout)
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	return &session{ctx: ctx, cancel: cancel, api: api, out: p, ns: o.namespace}, nil
}

// run wraps a client command body with its session.
func (o *clientOpts) run(fn func(s *session, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, err := o.open(cmd)
		if err != nil {
			return err
		}
		defer s.cancel()
		return withAddrHint(fn(s, cmd, args), "API server", "--server or INDEXIFY_SERVER", o.server)
	}
}

// withAddrHint adds to an error that says nothing reached the address
// which flag (or variable) sets it.
func withAddrHint(err error, what, flag, addr string) error {
	if err == nil || !refused(err) {
		return err
	}
	return fmt.Errorf("%w\nno %s answers at %s: is it running? Its address is set with %s", err, what, addr, flag)
}

// refused reports whether err is a refused or unresolvable connection,
// including a gRPC error that carries one in its message.
func refused(err error) bool {
	var dns *net.DNSError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) {
		return true
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		m := st.Message()
		return strings.Contains(m, "connection refused") || strings.Contains(m, "no such host")
	}
	return false
}

func clientCommands() []*cobra.Command {
	return append([]*cobra.Command{newNamespaceCmd(), newGraphCmd(), newContentCmd(), newTaskCmd(), newExtractorCmd()}, retrievalCommands()...)
}

// unixTime formats API unix seconds for tables.
func unixTime(sec int64) string {
	if sec == 0 {
		return "-"
	}
	return time.Unix(sec, 0).UTC().Format("2006-01-02 15:04:05")
}

// ago formats a past unix time as a duration for tables.
func ago(sec int64) string {
	if sec == 0 {
		return "never"
	}
	return time.Since(time.Unix(sec, 0)).Round(time.Second).String() + " ago"
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func joinOr(list []string, empty string) string {
	if len(list) == 0 {
		return empty
	}
	return strings.Join(list, ",")
}
