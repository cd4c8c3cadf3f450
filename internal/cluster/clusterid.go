package cluster

// Cluster identity: how a new cluster gets a unique id, how all its members
// agree on it, and how a node refuses traffic from another cluster.
//
// The id is random and chosen by the first leader of a new cluster: it
// proposes an ordinary command (its own NodeInfo upsert) whose Raft log
// entry carries the id in Log.Extensions. Every member adopts the id of the
// first such entry it applies; since all members apply the same log in the
// same order, they all adopt the same id, whichever leader proposed it and
// however often. Two separately bootstrapped clusters get different ids
// even when their bootstrap entries (the same static voter list) are
// identical. Old data dirs keep the id stored in node.json (the earlier
// hash of the voter list): a node with an id never adopts another.
//
// Every Raft connection starts with an id hello (after TLS and the
// cluster-secret handshake) and every ClusterService call carries the
// caller's id; when both sides know their id and the ids differ, the
// connection or call is refused, so a node never votes for, follows, or
// truncates its log to a node of another cluster. A node without Raft state
// (fresh or wiped) accepts and learns the id of the cluster that feeds it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/indexify-go/indexify/internal/state"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// newClusterID returns 16 random hex digits.
func newClusterID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// clusterIDExt marks the Raft log entry that names the cluster id.
const clusterIDExt = "indexify-cluster-id:"

func clusterIDOfLog(l *raft.Log) string {
	if l == nil || l.Type != raft.LogCommand || !strings.HasPrefix(string(l.Extensions), clusterIDExt) {
		return ""
	}
	return strings.TrimPrefix(string(l.Extensions), clusterIDExt)
}

// idFSM passes everything to the state FSM and adopts the cluster id from
// the first id entry applied.
type idFSM struct {
	*state.FSM
	n *Node
}

func (f *idFSM) Apply(l *raft.Log) interface{} {
	if id := clusterIDOfLog(l); id != "" {
		f.n.adoptLoggedClusterID(id, l.Index)
	}
	return f.FSM.Apply(l)
}

func (f *idFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	for _, l := range logs {
		if id := clusterIDOfLog(l); id != "" {
			f.n.adoptLoggedClusterID(id, l.Index)
		}
	}
	return f.FSM.ApplyBatch(logs)
}

// adoptLoggedClusterID: the first id entry in the log names the cluster.
// Later ones (a second leader proposed before the first was applied) lose.
func (n *Node) adoptLoggedClusterID(id string, index uint64) {
	cur := n.ClusterID()
	switch {
	case cur == id:
	case cur == "":
		if err := n.setClusterID(id); err != nil {
			n.log.Error("persist cluster id", "err", err)
			return
		}
		n.log.Info("cluster id agreed through the log", "cluster_id", id, "index", index)
	default:
		n.log.Warn("log entry names another cluster id; keeping the first one", "ours", cur, "entry", id, "index", index)
	}
}

// ensureClusterID is a leadership hook: a leader of a cluster without an id
// (just bootstrapped) proposes one and waits until an id is applied.
//
// A leader may also lack the id because it got its state by replication in
// an earlier version and never learned the stored id. It must not invent a
// new one then (its followers keep theirs, and the cluster would split), so
// it first asks the voters that follow it: any of them with an id gives it;
// only when a majority of voters (itself included) follows it and has none
// is the cluster new.
func (n *Node) ensureClusterID(ctx context.Context, _ uint64) {
	bo := newBackoff(n.cfg.ElectionTimeout/10, n.cfg.ElectionTimeout)
	for ctx.Err() == nil && n.ClusterID() == "" {
		id, without := n.followersID(ctx)
		if id != "" {
			n.adoptClusterID(id)
			return
		}
		if 1+without < n.voterCount()/2+1 {
			if !bo.wait(ctx) {
				return
			}
			continue
		}
		data, err := state.EncodeCommand(n.stampedSelfCmd())
		if err != nil {
			n.log.Error("encode cluster id entry", "err", err)
			return
		}
		err = waitFuture(ctx, n.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(clusterIDExt + newClusterID())}, n.rpcTimeout()))
		if err == nil && n.ClusterID() != "" {
			return
		}
		if err != nil {
			n.log.Warn("leader: proposing the cluster id failed; retrying", "err", err)
		}
		if !bo.wait(ctx) {
			return
		}
	}
}

// followersID probes the other voters and looks at those that follow this
// node (name it leader), i.e. whose log is this leader's: it returns the id
// one of them holds, else how many of them hold none. Members of another
// cluster never follow us: they refuse our Raft connections.
func (n *Node) followersID(ctx context.Context) (id string, without int) {
	cfg, _ := n.configuration()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range cfg.Servers {
		sid := string(s.ID)
		addr := n.grpcAddrOf(sid)
		if sid == n.cfg.NodeID || addr == "" || s.Suffrage != raft.Voter {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := n.peers.client(ctx, addr)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, n.probeTimeout())
			defer cancel()
			resp, err := cl.Probe(pctx, &pb.ProbeRequest{NodeId: n.cfg.NodeID})
			if err != nil || resp.NodeId != sid || !resp.HasState || resp.LeaderId != n.cfg.NodeID {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if resp.ClusterId != "" {
				id = resp.ClusterId
			} else {
				without++
			}
		}()
	}
	wg.Wait()
	return id, without
}

// stampedSelfCmd is the NodeInfo upsert with its timestamp set, as Apply
// would set it.
func (n *Node) stampedSelfCmd() *pb.Command {
	cmd := n.upsertSelfCmd()
	if cmd.Timestamp == 0 {
		cmd.Timestamp = time.Now().UnixMilli()
	}
	return cmd
}

// idConflict is the last refusal of another cluster's traffic.
type idConflict struct {
	theirs, peer, via string
	at                time.Time
	logged            time.Time
}

type conflictTracker struct {
	mu           sync.Mutex
	last         idConflict
	legacyLogged time.Time
	strayLogged  time.Time
}

// conflictWindow: a conflict seen this recently is reported by Ready/Status.
func (n *Node) conflictWindow() time.Duration { return max(10*n.cfg.ElectionTimeout, 5*time.Second) }

// noteConflict records a refusal and logs it at ERROR (at most once per
// conflict window per foreign id).
func (n *Node) noteConflict(theirs, peer, via string) {
	ours := n.ClusterID()
	n.conflicts.mu.Lock()
	c := &n.conflicts.last
	now := time.Now()
	logIt := c.theirs != theirs || now.Sub(c.logged) > n.conflictWindow()
	c.theirs, c.peer, c.via, c.at = theirs, peer, via, now
	if logIt {
		c.logged = now
	}
	n.conflicts.mu.Unlock()
	if logIt {
		n.log.Error("refusing traffic from another cluster: same member names, different cluster id; "+
			"this node keeps its own log (docs/operations.md: Two clusters with the same member names)",
			"ours", ours, "theirs", theirs, "peer", peer, "via", via)
	}
}

// recentConflict describes a refusal within the conflict window ("" none).
func (n *Node) recentConflict() string {
	n.conflicts.mu.Lock()
	c := n.conflicts.last
	n.conflicts.mu.Unlock()
	if c.theirs == "" || time.Since(c.at) > n.conflictWindow() {
		return ""
	}
	return fmt.Sprintf("refusing %s traffic from %s of another cluster (this node: cluster %s, peer: cluster %s)",
		c.via, c.peer, n.ClusterID(), c.theirs)
}

// ---- Raft transport hello ----

const (
	idMagic       = "IXC1"
	idMaxLen      = 64
	helloState    = 1 // flag: the sender has Raft state
	helloNotReady = 2 // flag: the sender cannot talk yet (Raft not created)
)

var errForeignCluster = errors.New("cluster: peer belongs to another cluster")

type idHello struct {
	id       string
	hasState bool
	node     string // sender's node id, for the operator's messages
	notReady bool
}

// Wire: "IXC1", flags, len(id), id, len(node), node.
func writeHello(w io.Writer, h idHello) error {
	if len(h.id) > idMaxLen || len(h.node) > 255 {
		return fmt.Errorf("cluster: hello field too long")
	}
	flags := byte(0)
	if h.hasState {
		flags |= helloState
	}
	if h.notReady {
		flags |= helloNotReady
	}
	b := append([]byte(idMagic), flags, byte(len(h.id)))
	b = append(b, h.id...)
	b = append(b, byte(len(h.node)))
	b = append(b, h.node...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader) (idHello, error) {
	magic := make([]byte, len(idMagic))
	if _, err := io.ReadFull(r, magic); err != nil {
		return idHello{}, err
	}
	if string(magic) != idMagic {
		return idHello{}, errors.New("cluster: peer sent no cluster-id hello")
	}
	return readHelloBody(r)
}

func readHelloBody(r io.Reader) (idHello, error) {
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return idHello{}, err
	}
	if int(hdr[1]) > idMaxLen {
		return idHello{}, errors.New("cluster: malformed cluster-id hello")
	}
	rest := make([]byte, int(hdr[1])+1)
	if _, err := io.ReadFull(r, rest); err != nil {
		return idHello{}, err
	}
	node := make([]byte, rest[len(rest)-1])
	if _, err := io.ReadFull(r, node); err != nil {
		return idHello{}, err
	}
	return idHello{id: string(rest[:len(rest)-1]), hasState: hdr[0]&helloState != 0,
		notReady: hdr[0]&helloNotReady != 0, node: string(node)}, nil
}

// idGuard is the stream layer's view of this node's identity.
type idGuard struct {
	hello  func() (idHello, bool)                  // false: not ready to talk yet
	check  func(remote idHello, peer string) error // nil: accept
	legacy func(peer string)                       // a peer of a version without the hello
	stray  func(peer string)                       // a client that speaks neither (dropped)
}

// maxRaftRPCType is the highest RPC type byte hashicorp/raft's
// NetworkTransport sends first on a connection (v1.8.0 net_transport.go:
// rpcAppendEntries 0, rpcRequestVote 1, rpcInstallSnapshot 2,
// rpcTimeoutNow 3, rpcRequestPreVote 4). A node of the previous version
// (no hello) starts with one of these; anything else (an HTTP client's
// "G", a TLS ClientHello's 0x16) is not a Raft peer.
const maxRaftRPCType = 4

// localHello is what this node says about itself.
func (n *Node) localHello() (idHello, bool) {
	r := n.book.raft.Load()
	if r == nil {
		return idHello{}, false
	}
	return idHello{id: n.ClusterID(), hasState: r.LastIndex() > 0, node: n.cfg.NodeID}, true
}

// firstInWindow reports whether a message logged at most once per conflict
// window is due now, and if so records the time in *last.
func (n *Node) firstInWindow(last *time.Time) bool {
	n.conflicts.mu.Lock()
	defer n.conflicts.mu.Unlock()
	if time.Since(*last) <= n.conflictWindow() {
		return false
	}
	*last = time.Now()
	return true
}

// noteLegacyPeer: during a rolling upgrade, nodes of the previous version
// speak no hello; their traffic is accepted unchecked (as before), and said
// so once per conflict window.
func (n *Node) noteLegacyPeer(peer string) {
	if n.firstInWindow(&n.conflicts.legacyLogged) {
		n.log.Warn("raft peer of an older version (no cluster-id hello): its cluster id is not checked until it is upgraded", "peer", peer)
	}
}

// noteStrayConn: a connection to the Raft port that is neither a Raft peer
// nor a node of the previous version (a port scanner, an HTTP client, a
// misdirected health check) is closed before Raft sees it. Said once per
// conflict window at WARN (then at DEBUG), naming the peer's address and
// never echoing its bytes.
func (n *Node) noteStrayConn(peer string) {
	lv := slog.LevelDebug
	if n.firstInWindow(&n.conflicts.strayLogged) {
		lv = slog.LevelWarn
	}
	n.log.Log(context.Background(), lv, "closed a connection to the raft port that does not speak raft (not a cluster member)", "peer", peer)
}

// peerVerdict is the rule of the Raft hello: a side without Raft state
// accepts (and learns the other's id); two sides that both have state and
// know their ids must agree. Sides with state but no id yet (a cluster
// whose first leader has not named it) are accepted as before.
func peerVerdict(local, remote idHello) (ok, adopt bool) {
	if !local.hasState {
		return true, remote.id != "" && remote.id != local.id
	}
	if !remote.hasState || local.id == "" || remote.id == "" || local.id == remote.id {
		return true, false
	}
	return false, false
}

// checkPeer applies peerVerdict to a connection with peer.
func (n *Node) checkPeer(remote idHello, peer string) error {
	local, ok := n.localHello()
	if !ok {
		return errors.New("cluster: raft not started yet")
	}
	ok, adopt := peerVerdict(local, remote)
	if adopt {
		n.adoptClusterID(remote.id)
	}
	if ok {
		return nil
	}
	if remote.node != "" {
		peer = remote.node + " (" + peer + ")"
	}
	n.noteConflict(remote.id, peer, "raft")
	return fmt.Errorf("%w: peer %s is in cluster %s, this node in cluster %s", errForeignCluster, peer, remote.id, local.id)
}

// idConn runs the acceptor side of the hello on first use (like authConn).
// A dialler of an older version sends a Raft RPC straight away: its first
// byte (an RPC type) is handed to Raft first. A connection that starts
// with neither is dropped: Raft reads io.EOF and logs nothing.
type idConn struct {
	net.Conn
	g       *idGuard
	once    sync.Once
	err     error
	pending []byte
}

func (c *idConn) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		defer c.Conn.SetDeadline(time.Time{})
		c.err = c.accept()
		if c.err != nil {
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *idConn) accept() error {
	magic := make([]byte, len(idMagic))
	if _, err := io.ReadFull(c.Conn, magic[:1]); err != nil {
		return err
	}
	if magic[0] <= maxRaftRPCType {
		c.pending = magic[:1]
		if c.g.legacy != nil {
			c.g.legacy(c.Conn.RemoteAddr().String())
		}
		return nil
	}
	if magic[0] == idMagic[0] {
		if _, err := io.ReadFull(c.Conn, magic[1:]); err != nil {
			return err
		}
	}
	if string(magic) != idMagic {
		if c.g.stray != nil {
			c.g.stray(c.Conn.RemoteAddr().String())
		}
		return io.EOF
	}
	remote, err := readHelloBody(c.Conn)
	if err != nil {
		return err
	}
	local, ok := c.g.hello()
	if !ok {
		// Answer anyway, so the dialler does not take us for an old version.
		writeHello(c.Conn, idHello{notReady: true})
		return errors.New("cluster: raft not started yet")
	}
	if err := writeHello(c.Conn, local); err != nil {
		return err
	}
	return c.g.check(remote, c.Conn.RemoteAddr().String())
}

func (c *idConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	if len(c.pending) > 0 {
		k := copy(p, c.pending)
		c.pending = c.pending[k:]
		return k, nil
	}
	return c.Conn.Read(p)
}

func (c *idConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// errLegacyPeer: the acceptor closed the connection without answering the
// hello, as a node of an older version does (its Raft reads the hello as an
// unknown RPC type). The dialler connects again without the hello.
var errLegacyPeer = errors.New("cluster: raft peer closed the connection at the hello (older version)")

// dialHello is the dialling side: send ours, read theirs, decide.
func (g *idGuard) dialHello(c net.Conn, address string, timeout time.Duration) error {
	local, ok := g.hello()
	if !ok {
		return errors.New("cluster: raft not started yet")
	}
	if timeout <= 0 || timeout > handshakeTimeout {
		timeout = handshakeTimeout
	}
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if err := writeHello(c, local); err != nil {
		return err
	}
	remote, err := readHello(c)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return errLegacyPeer
	}
	if err != nil {
		return fmt.Errorf("cluster: raft connection to %s: %w", address, err)
	}
	if remote.notReady {
		return fmt.Errorf("cluster: raft peer %s is starting", address)
	}
	return g.check(remote, address)
}

// ---- ClusterService calls ----

const clusterIDMetaKey = "x-indexify-cluster-id"

// idExempt: calls any node may make across clusters. Probe answers tell a
// booting node which cluster a peer is in; Join checks the id itself
// (handleJoin refuses a joiner of another cluster with a clear message).
var idExempt = map[string]bool{
	clusterServicePrefix + "Probe": true,
	clusterServicePrefix + "Join":  true,
}

// idDialOptions attach this node's cluster id to every peer call.
func (n *Node) idDialOptions() []grpc.DialOption {
	tag := func(ctx context.Context) context.Context {
		if id := n.ClusterID(); id != "" {
			return metadata.AppendToOutgoingContext(ctx, clusterIDMetaKey, id)
		}
		return ctx
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return inv(tag(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return st(tag(ctx), desc, cc, method, opts...)
		}),
	}
}

// checkCallID refuses a ClusterService call from a node of another cluster.
// Calls without an id (operator tools, nodes that have none yet) pass.
func (n *Node) checkCallID(ctx context.Context, method string) error {
	if !strings.HasPrefix(method, clusterServicePrefix) || idExempt[method] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(clusterIDMetaKey)
	ours := n.ClusterID()
	if len(vals) == 0 || vals[0] == "" || ours == "" || vals[0] == ours {
		return nil
	}
	from := "unknown address"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		from = p.Addr.String()
	}
	n.noteConflict(vals[0], from, strings.TrimPrefix(method, clusterServicePrefix)+" RPC")
	return status.Errorf(codes.FailedPrecondition, "caller is in cluster %s, this node is in cluster %s", vals[0], ours)
}

func (n *Node) idServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := n.checkCallID(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := n.checkCallID(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
