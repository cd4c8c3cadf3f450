package cluster

// Authenticated membership. With a cluster secret every Raft connection
// starts with a mutual HMAC challenge-response over the secret before Raft
// sees a byte, and every ClusterService call carries an HMAC of its method
// and time. A node without the secret can therefore neither join (Join and
// Probe are refused), nor vote or send entries (its Raft connections are
// closed before any RPC is read), nor receive the log (a member dialling it
// aborts because it cannot prove the secret back). Mutual TLS (Config.RaftTLS
// plus TLS credentials in DialOptions and on the gRPC server) is the
// certificate-based alternative; both can be combined.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TransportTLS secures the Raft transport.
type TransportTLS struct {
	Server *tls.Config                   // accepted connections
	Client func(host string) *tls.Config // built for every dial (rotated CA bundles apply)
}

// MinSecretLen is the shortest accepted cluster secret.
const MinSecretLen = 16

// LoadSecretFile reads a cluster secret; surrounding whitespace (a trailing
// newline from `echo`) is ignored so every node derives the same key.
func LoadSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinSecretLen {
		return nil, fmt.Errorf("cluster secret in %s is %d bytes; at least %d are required (e.g. `head -c 32 /dev/urandom | base64`)", path, len(b), MinSecretLen)
	}
	return b, nil
}

// Raft connection handshake.
const (
	raftMagic        = "IXR1"
	nonceLen         = 32
	handshakeTimeout = 5 * time.Second
	clientLabel      = "indexify raft client v1"
	serverLabel      = "indexify raft server v1"
)

// errPeerNotAuthenticated: the other end does not know the cluster secret.
var errPeerNotAuthenticated = errors.New("cluster: raft peer failed the cluster-secret handshake")

func raftMAC(secret []byte, label string, ns, nc []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(ns)
	m.Write(nc)
	return m.Sum(nil)
}

// serverHandshake: send magic+nonceS; read nonceC+macC; verify; send macS.
func serverHandshake(c net.Conn, secret []byte) error {
	ns := make([]byte, nonceLen)
	rand.Read(ns)
	if _, err := c.Write(append([]byte(raftMagic), ns...)); err != nil {
		return err
	}
	in := make([]byte, nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("%w: %v", errPeerNotAuthenticated, err)
	}
	nc, macC := in[:nonceLen], in[nonceLen:]
	if !hmac.Equal(macC, raftMAC(secret, clientLabel, ns, nc)) {
		return errPeerNotAuthenticated
	}
	_, err := c.Write(raftMAC(secret, serverLabel, ns, nc))
	return err
}

// clientHandshake is the dialling side; the server must prove the secret
// too, so the log is never streamed to an impostor listening on a member's
// address.
func clientHandshake(c net.Conn, secret []byte) error {
	hdr := make([]byte, len(raftMagic)+nonceLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return fmt.Errorf("%w: %v", errPeerNotAuthenticated, err)
	}
	if string(hdr[:len(raftMagic)]) != raftMagic {
		return fmt.Errorf("%w: not an authenticating indexify raft endpoint", errPeerNotAuthenticated)
	}
	ns := hdr[len(raftMagic):]
	nc := make([]byte, nonceLen)
	rand.Read(nc)
	if _, err := c.Write(append(nc, raftMAC(secret, clientLabel, ns, nc)...)); err != nil {
		return err
	}
	macS := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, macS); err != nil {
		return fmt.Errorf("%w: %v", errPeerNotAuthenticated, err)
	}
	if !hmac.Equal(macS, raftMAC(secret, serverLabel, ns, nc)) {
		return errPeerNotAuthenticated
	}
	return nil
}

// authConn runs the server side of the handshake on first use rather than in
// Accept: NetworkTransport accepts connections in one loop, and a silent
// client must not hold that loop up.
type authConn struct {
	net.Conn
	secret []byte
	once   sync.Once
	err    error
}

func (c *authConn) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		c.err = serverHandshake(c.Conn, c.secret)
		c.Conn.SetDeadline(time.Time{})
		if c.err != nil {
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *authConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *authConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// secureAccepted wraps an accepted Raft connection: TLS first (its handshake
// also runs lazily, on first read), then the secret handshake inside it.
func (s *streamLayer) secureAccepted(c net.Conn) net.Conn {
	if s.tls != nil {
		c = tls.Server(c, s.tls.Server)
	}
	if len(s.secret) > 0 {
		c = &authConn{Conn: c, secret: s.secret}
	}
	return c
}

// secureDialled completes TLS and the secret handshake on a dialled
// connection before Raft may use it.
func (s *streamLayer) secureDialled(c net.Conn, address string, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil && len(s.secret) == 0 {
		return c, nil
	}
	if timeout <= 0 || timeout > handshakeTimeout {
		timeout = handshakeTimeout
	}
	c.SetDeadline(time.Now().Add(timeout))
	if s.tls != nil {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			host = address
		}
		tc := tls.Client(c, s.tls.Client(host))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: raft TLS handshake with %s: %w", address, err)
		}
		c = tc
	}
	if len(s.secret) > 0 {
		if err := clientHandshake(c, s.secret); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: raft connection to %s: %w", address, err)
		}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// ClusterService call authentication.
const (
	authMetaKey  = "x-indexify-cluster-auth"
	grpcLabel    = "indexify grpc v1"
	clockSkewMax = 5 * time.Minute
	// clusterServicePrefix: only ClusterService is node-to-node; the
	// CoordinatorService has its own protections (TLS, API tokens).
	clusterServicePrefix = "/indexify.v1.ClusterService/"
)

func grpcMAC(secret []byte, method, ts string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(grpcLabel + "|" + method + "|" + ts))
	return hex.EncodeToString(m.Sum(nil))
}

func signCall(ctx context.Context, secret []byte, method string) context.Context {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return metadata.AppendToOutgoingContext(ctx, authMetaKey, ts+"."+grpcMAC(secret, method, ts))
}

// checkCall verifies a call's token. A token is bound to its method and is
// valid for clockSkewMax either side of now; without TLS an eavesdropper can
// replay it for that long (docs/security.md: use TLS too).
func checkCall(ctx context.Context, secret []byte, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(authMetaKey)
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "cluster call without the cluster-secret token (--cluster-secret-file)")
	}
	ts, mac, ok := strings.Cut(vals[0], ".")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return status.Error(codes.Unauthenticated, "malformed cluster-secret token")
	}
	if d := time.Since(time.Unix(sec, 0)); d > clockSkewMax || d < -clockSkewMax {
		return status.Error(codes.Unauthenticated, "cluster-secret token expired or clock skew above 5m")
	}
	if !hmac.Equal([]byte(mac), []byte(grpcMAC(secret, method, ts))) {
		return status.Error(codes.Unauthenticated, "cluster-secret token does not match this cluster's secret")
	}
	return nil
}

// GRPCServerOptions are the options the gRPC server carrying ClusterService
// must be created with: with a cluster secret they refuse ClusterService
// calls that do not carry a valid token; always, they refuse calls from a
// node of another cluster (clusterid.go).
func (n *Node) GRPCServerOptions() []grpc.ServerOption {
	return append(AuthServerOptions(n.cfg.ClusterSecret), n.idServerOptions()...)
}

// AuthServerOptions are GRPCServerOptions for a given secret (nil: none).
func AuthServerOptions(secret []byte) []grpc.ServerOption {
	if len(secret) == 0 {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if strings.HasPrefix(info.FullMethod, clusterServicePrefix) {
				if err := checkCall(ctx, secret, info.FullMethod); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if strings.HasPrefix(info.FullMethod, clusterServicePrefix) {
				if err := checkCall(ss.Context(), secret, info.FullMethod); err != nil {
					return err
				}
			}
			return h(srv, ss)
		}),
	}
}

// AuthDialOptions sign every call made over a connection with the secret
// (peer clients; the `indexify cluster` operator commands). nil: none.
func AuthDialOptions(secret []byte) []grpc.DialOption {
	if len(secret) == 0 {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return inv(signCall(ctx, secret, method), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return st(signCall(ctx, secret, method), desc, cc, method, opts...)
		}),
	}
}
