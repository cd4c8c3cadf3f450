package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/indexify-go/indexify/internal/cluster"
	"github.com/indexify-go/indexify/internal/coordclient"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// cliAttempts bounds an operator command's tries of one call, so a
// coordinator that is down is reported at once, not at --timeout.
var cliAttempts = coordclient.MaxAttempts(5)

// clusterFlags are shared by the `cluster` operator commands.
type clusterFlags struct {
	coordinator string
	timeout     time.Duration
	sec         securityFlags // TLS and cluster secret towards the coordinators
}

func (f *clusterFlags) client() (pb.ClusterServiceClient, func(), error) {
	opts, err := f.sec.dialOptions(slog.Default(), true)
	if err != nil {
		return nil, nil, err
	}
	conn, err := coordclient.Dial(coordclient.ParseTargets(f.coordinator), append(opts, cliAttempts)...)
	if err != nil {
		return nil, nil, fmt.Errorf("--coordinator: %w", err)
	}
	return pb.NewClusterServiceClient(conn), func() { conn.Close() }, nil
}

func (f *clusterFlags) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), f.timeout)
}

// call connects to any coordinator and runs fn within the deadline.
func (f *clusterFlags) call(fn func(context.Context, pb.ClusterServiceClient) error) error {
	c, closeFn, err := f.client()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := f.ctx()
	defer cancel()
	return withAddrHint(fn(ctx, c), "coordinator", "--coordinator or INDEXIFY_COORDINATOR", f.coordinator)
}

func newClusterCmd() *cobra.Command {
	f := &clusterFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Operate a coordinator cluster: status, members, leadership, membership, snapshots, recovery",
	}
	cmd.PersistentFlags().StringVar(&f.coordinator, "coordinator", "localhost:8950", "any coordinator's gRPC address (comma list or dns:NAME:PORT allowed; or INDEXIFY_COORDINATOR)")
	cmd.PersistentFlags().DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of the operation")
	f.sec.registerTLS(cmd.PersistentFlags())
	f.sec.registerClusterSecret(cmd.PersistentFlags())
	cmd.AddCommand(
		newClusterStatusCmd(f, "status", "Show this cluster's leader, term, indexes and members"),
		newClusterStatusCmd(f, "members", "List members with suffrage and health"),
		newTransferLeaderCmd(f),
		newRemovePeerCmd(f),
		newSnapshotCmd(f),
		newRecoverCmd(),
	)
	return cmd
}

func newClusterStatusCmd(f *clusterFlags, use, short string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := newPrinter(output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return f.call(func(ctx context.Context, c pb.ClusterServiceClient) error {
				st, err := c.Status(ctx, &pb.StatusRequest{})
				if err != nil {
					return fmt.Errorf("status: %w", err)
				}
				if output != "table" {
					ws := wire.ClusterStatusFrom(st)
					if use == "members" {
						return p.print(ws.Members, nil, nil)
					}
					return p.print(ws, nil, nil)
				}
				w := cmd.OutOrStdout()
				if use == "status" {
					fmt.Fprintf(w, "cluster:   %s\nleader:    %s\nanswered:  %s (%s)\nterm:      %d\ncommit:    %d\napplied:   %d\n\n",
						st.GetClusterId(), st.GetLeaderId(), st.GetNodeId(), st.GetState(), st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex())
					if c := st.GetConflict(); c != "" {
						fmt.Fprintf(w, "CONFLICT:  %s\n\n", c)
					}
					if st.GetVoteHeld() {
						fmt.Fprintf(w, "VOTE HELD: %s started without raft state and takes no part in elections until it has caught up (%d vote requests refused)\n\n",
							st.GetNodeId(), st.GetVotesWithheld())
					}
				}
				printMembers(w, st.GetMembers())
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml (the shape of the API's GET /cluster)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func printMembers(w io.Writer, members []*pb.Member) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tGRPC ADDRESS\tSUFFRAGE\tLEADER\tHEALTHY\tLAST CONTACT")
	for _, m := range members {
		contact := "-"
		if m.GetLastContactMs() >= 0 {
			contact = (time.Duration(m.GetLastContactMs()) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%v\t%s\n", m.GetId(), m.GetRaftAddr(), m.GetGrpcAddr(),
			m.GetSuffrage(), m.GetLeader(), m.GetHealthy(), contact)
	}
	tw.Flush()
}

func newTransferLeaderCmd(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader [NODE-ID]",
		Short: "Hand leadership to NODE-ID (or to the most up-to-date follower)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c pb.ClusterServiceClient) error {
				req := &pb.TransferLeaderRequest{}
				if len(args) == 1 {
					req.NodeId = args[0]
				}
				resp, err := c.TransferLeader(ctx, req)
				if err != nil {
					return fmt.Errorf("transfer-leader: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "leader is now", resp.GetNewLeaderId())
				return nil
			})
		},
	}
}

func newRemovePeerCmd(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-peer NODE-ID",
		Short: "Remove a member from the cluster (scale-down or a dead node); never needed for restarts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c pb.ClusterServiceClient) error {
				if _, err := c.RemovePeer(ctx, &pb.RemovePeerRequest{NodeId: args[0]}); err != nil {
					return fmt.Errorf("remove-peer: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", args[0])
				return nil
			})
		},
	}
}

func newSnapshotCmd(f *clusterFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save or restore a snapshot of the coordinator state"}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot of the current state to FILE",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(func(ctx context.Context, c pb.ClusterServiceClient) error {
				return saveSnapshot(ctx, cmd, c, args[0])
			})
		},
	}
	cmd.AddCommand(save, newSnapshotRestoreCmd(f))
	return cmd
}

// saveSnapshot streams a snapshot into path via a temporary file, so a
// failed transfer never leaves a truncated backup under the final name.
func saveSnapshot(ctx context.Context, cmd *cobra.Command, c pb.ClusterServiceClient, path string) (err error) {
	stream, err := c.Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	tmp := path + ".partial"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	var n int64
	for {
		chunk, rerr := stream.Recv()
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("snapshot: %w", rerr)
		}
		if _, err := out.Write(chunk.GetData()); err != nil {
			return err
		}
		n += int64(len(chunk.GetData()))
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "saved %d bytes to %s\n", n, path)
	return nil
}

func newSnapshotRestoreCmd(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the cluster's whole state with the snapshot in FILE (sent to the leader)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer in.Close()
			ctx, cancel := f.ctx()
			defer cancel()
			leader, closeFn, err := f.leaderClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			stream, err := leader.Restore(ctx)
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			buf := make([]byte, 256<<10)
			for {
				n, rerr := in.Read(buf)
				if n > 0 {
					if err := stream.Send(&pb.SnapshotChunk{Data: buf[:n]}); err != nil {
						_, err = stream.CloseAndRecv()
						return fmt.Errorf("restore: %w", err)
					}
				}
				if rerr == io.EOF {
					break
				}
				if rerr != nil {
					return rerr
				}
			}
			resp, err := stream.CloseAndRecv()
			if err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s at index %d\n", args[0], resp.GetIndex())
			return nil
		},
	}
}

// leaderClient connects to the current leader's gRPC address, found through
// any coordinator's status.
func (f *clusterFlags) leaderClient(ctx context.Context) (pb.ClusterServiceClient, func(), error) {
	anyNode, closeAny, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	defer closeAny()
	st, err := anyNode.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("status: %w", err)
	}
	for _, m := range st.GetMembers() {
		if m.GetLeader() && m.GetGrpcAddr() != "" {
			opts, err := f.sec.dialOptions(slog.Default(), true)
			if err != nil {
				return nil, nil, err
			}
			conn, err := coordclient.Dial([]string{m.GetGrpcAddr()}, append(opts, cliAttempts)...)
			if err != nil {
				return nil, nil, err
			}
			return pb.NewClusterServiceClient(conn), func() { conn.Close() }, nil
		}
	}
	return nil, nil, fmt.Errorf("no leader known to %s; try again after an election", st.GetNodeId())
}

func newRecoverCmd() *cobra.Command {
	var dataDir, nodeID, peers string
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Offline quorum-loss recovery: rewrite this stopped node's peer set",
		Long: `Rewrite the Raft peer set of a STOPPED node, for when a majority of nodes is lost
for good and the cluster cannot elect a leader. Run it on the survivor(s) with
the same --peers list, start them, then add new nodes (see docs/operations.md).

  indexify cluster recover --data-dir /var/lib/indexify --node-id coordinator-0 \
    --peers coordinator-0=coordinator-0.coordinator-headless:8970`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := cluster.ParsePeers(peers)
			if err != nil {
				return fmt.Errorf("--peers: %w", err)
			}
			if err := cluster.Recover(filepath.Join(dataDir, "coordinator"), nodeID, list); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "peer set of %s rewritten to %d voter(s); start the node now\n", nodeID, len(list))
			return nil
		},
	}
	host, _ := os.Hostname()
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/indexify", "the stopped node's data directory")
	cmd.Flags().StringVar(&nodeID, "node-id", host, "the stopped node's id")
	cmd.Flags().StringVar(&peers, "peers", "", "the new voter set: comma list of ID=RAFT-HOST:PORT (must include this node)")
	_ = cmd.MarkFlagRequired("peers")
	return cmd
}
