package tlsutil

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ServerCredentials are gRPC server credentials over ServerConfig.
func (r *Reloader) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(r.ServerConfig())
}

// ClientCredentials are gRPC client credentials that build a fresh
// ClientConfig (current CA pool) for every connection, so a rotated CA
// bundle is used by the next reconnect.
func (r *Reloader) ClientCredentials() credentials.TransportCredentials {
	return &reloadingCreds{r: r, info: credentials.NewTLS(&tls.Config{}).Info()}
}

// DialOption is grpc.WithTransportCredentials(ClientCredentials()).
func (r *Reloader) DialOption() grpc.DialOption {
	return grpc.WithTransportCredentials(r.ClientCredentials())
}

type reloadingCreds struct {
	r        *Reloader
	info     credentials.ProtocolInfo
	override string
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host := c.override
	if host == "" {
		host = authority
		if h, _, err := net.SplitHostPort(authority); err == nil {
			host = h
		}
	}
	return credentials.NewTLS(c.r.ClientConfig(host)).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.r.ServerConfig()).ServerHandshake(conn)
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo { return c.info }

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName is deprecated in gRPC but still part of the interface.
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.override = name
	return nil
}

// HTTPTransport is an http.Transport for https URLs whose TLS configuration
// is rebuilt (current CA pool and client certificate) for every connection.
func (r *Reloader) HTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		tc := tls.Client(raw, r.ClientConfig(host))
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
	return t
}
