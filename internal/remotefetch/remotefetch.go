// Package remotefetch is the HTTP client of `ingest_remote_file`: it fetches
// a URL a (possibly hostile) API client names, without letting that client
// use the server as a proxy into its own network (SSRF).
//
// Every connection, the first one and every redirect's, is checked after DNS
// resolution, in the dialer's Control hook: the address actually dialled is
// what is judged, so a name that resolves to 127.0.0.1, a DNS rebinding or a
// 302 to http://[::1]/ are all refused the same way. By default loopback,
// link-local, private (RFC 1918, ULA), shared/CGNAT (100.64.0.0/10),
// unspecified, multicast, broadcast and reserved destinations are refused;
// Policy.Allow names the ranges an operator wants fetched anyway.
//
// Errors never carry the peer's bytes or the transport's own message: a
// closed port, a gRPC or Raft port that hangs up on HTTP, a reset and a
// timeout all read "could not fetch", so the route cannot scan ports.
package remotefetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Defaults of a zero Policy.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultMaxRedirects = 5
)

// ErrRefused is returned (wrapped) when a destination address is not
// allowed by the policy.
var ErrRefused = errors.New("destination address is not allowed")

// ErrFetch is the one error of every other failure to fetch.
var ErrFetch = errors.New("could not fetch the URL")

// Policy says where and how long remote fetches may go.
type Policy struct {
	// Allow lists address ranges fetched even though they are refused by
	// default (e.g. 10.0.0.0/8 for an internal file server). Public
	// addresses need no entry.
	Allow []netip.Prefix
	// Timeout bounds a whole fetch: connecting, every redirect, headers and
	// the body (default 60s).
	Timeout time.Duration
	// MaxRedirects bounds a redirect chain (default 5).
	MaxRedirects int
}

// refused are the ranges no fetch reaches unless allowed. IPv4-mapped IPv6
// addresses are unmapped first, so ::ffff:127.0.0.1 is loopback.
var refused = mustPrefixes(
	"0.0.0.0/8",       // "this network", unspecified
	"10.0.0.0/8",      // private
	"100.64.0.0/10",   // shared address space (CGNAT; also cloud-internal services)
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, cloud metadata (169.254.169.254)
	"172.16.0.0/12",   // private
	"192.0.0.0/24",    // IETF protocol assignments
	"192.168.0.0/16",  // private
	"198.18.0.0/15",   // benchmarking
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, broadcast
	"::/96",           // unspecified, IPv4-compatible (deprecated)
	"::1/128",         // loopback
	"64:ff9b::/96",    // NAT64: embeds any IPv4 address, internal ones included
	"64:ff9b:1::/48",  // local-use NAT64
	"fc00::/7",        // unique local (ULA)
	"fe80::/10",       // link-local
	"ff00::/8",        // multicast
	"2002::/16",       // 6to4: embeds any IPv4 address
	"2001::/32",       // Teredo
	"100::/64",        // discard
	"::ffff:0:0:0/96", // IPv4-translated
	"2001:db8::/32",   // documentation
	"192.0.2.0/24",    // documentation
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ParseAllow parses a list of CIDRs (or single addresses) for Policy.Allow.
func ParseAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %v", s, err)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return nil, fmt.Errorf("%q: an IPv4-mapped prefix must be at least /96", s)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Allowed reports whether a fetch may connect to addr.
func (p Policy) Allowed(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, a := range p.Allow {
		if a.Contains(addr) {
			return true
		}
	}
	for _, r := range refused {
		if r.Contains(addr) {
			return false
		}
	}
	return addr.IsValid() && !addr.IsLoopback() && !addr.IsPrivate() && !addr.IsLinkLocalUnicast() &&
		!addr.IsLinkLocalMulticast() && !addr.IsMulticast() && !addr.IsUnspecified()
}

// control is the dialer hook: it runs for every connection attempt with the
// resolved address, after DNS and before connect.
func (p Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !p.Allowed(ap.Addr()) {
		return ErrRefused
	}
	return nil
}

// Client returns the HTTP client that applies the policy. It ignores proxy
// environment variables (a proxy would be dialled instead of the target,
// bypassing the check) and refuses URLs with user information.
func (p Policy) Client() *http.Client {
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	if p.MaxRedirects <= 0 {
		p.MaxRedirects = DefaultMaxRedirects
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  p.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	max := p.MaxRedirects
	return &http.Client{
		Transport: tr,
		Timeout:   p.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > max {
				return fmt.Errorf("%w: more than %d redirects", ErrFetch, max)
			}
			return CheckURL(req.URL.Scheme, req.URL.User != nil, req.URL.Host)
		},
	}
}

// CheckURL is the rule for every URL fetched (the first and redirects):
// http or https, a host, no user information.
func CheckURL(scheme string, hasUser bool, host string) error {
	if scheme != "http" && scheme != "https" {
		return fmt.Errorf("%w: only http and https URLs are fetched", ErrRefused)
	}
	if hasUser {
		return fmt.Errorf("%w: URLs with user information are not fetched", ErrRefused)
	}
	if host == "" {
		return fmt.Errorf("%w: the URL has no host", ErrRefused)
	}
	return nil
}

// Classify turns any error of a fetch into ErrRefused (the policy said no),
// ErrFetch (anything else), or the caller's context error. The detailed
// error is for logs only.
func Classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrRefused):
		return ErrRefused
	}
	return ErrFetch
}
