package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/indexify-go/indexify/internal/grpcconn"
)

// streamLayer is a raft.StreamLayer over plain TCP. hashicorp/raft's stock
// TCP transport insists that the advertised address is an IP; we need a DNS
// name there (a pod's stable headless-service name), so that a restarted pod
// with a new IP is found again without any configuration change. Dial
// resolves the name on every call (net.Dialer does no caching).
type streamLayer struct {
	net.Listener
	advertise advertiseAddr
	tls       *TransportTLS // nil: plain TCP (auth.go)
	secret    []byte        // nil: no cluster-secret handshake (auth.go)
	guard     *idGuard      // cluster-id hello (clusterid.go); nil only in tests of the layer itself
	ended     func()        // an accepted connection ended (leadergone.go); nil: not watched
}

// advertiseAddr is a net.Addr whose String() is the configured advertise
// address verbatim (possibly a DNS name); NetworkTransport stores that string
// as this server's address.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// newStreamLayer listens on bind. An empty advertise uses the listener's
// address, which must then be a specific IP (tests bind 127.0.0.1:0).
func newStreamLayer(bind, advertise string) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listen %s: %w", bind, err)
	}
	if advertise == "" {
		tcp := ln.Addr().(*net.TCPAddr)
		if tcp.IP.IsUnspecified() {
			ln.Close()
			return nil, fmt.Errorf("cluster: RaftAdvertise is required when RaftBind %q has no specific host", bind)
		}
		advertise = tcp.String()
	}
	if _, _, err := net.SplitHostPort(advertise); err != nil {
		ln.Close()
		return nil, fmt.Errorf("cluster: RaftAdvertise %q: %w", advertise, err)
	}
	return &streamLayer{Listener: ln, advertise: advertiseAddr(advertise)}, nil
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if s.ended != nil {
		c = &peerGoneConn{Conn: c, ended: s.ended}
	}
	c = s.secureAccepted(c)
	if s.guard != nil {
		c = &idConn{Conn: c, g: s.guard}
	}
	return c, nil
}

// maxConnectTime bounds the TCP connect of a Raft dial; the transport's
// timeout (10 s, an I/O deadline sized for a large AppendEntries) still
// bounds the handshakes after it. A peer on the cluster network answers a
// connect in milliseconds, or refuses it at once. One that does neither is
// an address nobody holds any more: a pod restarted with a new IP while DNS
// still gave the old one. Waiting 10 s on it stalled the leader's heartbeats
// to that peer for 10 s (seen in test/k8s's rolling upgrade: the restarted
// pod stayed unready that long); giving up after a second lets the next try
// resolve the name again.
const maxConnectTime = grpcconn.ConnectTimeout

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: min(timeout, maxConnectTime), KeepAlive: 15 * time.Second}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	if c, err = s.secureDialled(c, string(address), timeout); err != nil {
		return nil, err
	}
	if s.guard == nil {
		return c, nil
	}
	err = s.guard.dialHello(c, string(address), timeout)
	if err == nil {
		return c, nil
	}
	c.Close()
	if !errors.Is(err, errLegacyPeer) {
		return nil, err
	}
	// A node of the previous version (rolling upgrade): talk as it does.
	if s.guard.legacy != nil {
		s.guard.legacy(string(address))
	}
	if c, err = d.Dial("tcp", string(address)); err != nil {
		return nil, err
	}
	return s.secureDialled(c, string(address), timeout)
}

// hcLogger adapts slog to the hclog.Logger interface hashicorp/raft wants, so
// Raft's logs land in the process's structured log.
type hcLogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

func newHCLogger(l *slog.Logger) hclog.Logger { return &hcLogger{l: l.With("component", "raft")} }

func hcToSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	lv := hcToSlog(level)
	if !h.l.Enabled(context.Background(), lv) {
		return
	}
	if h.name != "" {
		msg = h.name + ": " + msg
	}
	h.l.Log(context.Background(), lv, msg, hcArgs(append(h.implied[:len(h.implied):len(h.implied)], args...))...)
}

// hcArgs turns hclog key/value pairs into slog attributes rendered the way
// hclog renders them: hclog.Fmt values are formatted printf-style (Raft logs
// its configuration as hclog.Fmt("%+v", servers)), Hex/Octal/Binary/Quote
// as hclog writes them, durations as "20ms" rather than nanoseconds, and a
// value without a key under hclog's EXTRA_VALUE_AT_END.
func hcArgs(args []any) []any {
	out := make([]any, 0, len(args)/2+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			out = append(out, slog.Any("EXTRA_VALUE_AT_END", hcValue(args[i])))
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		out = append(out, slog.Any(key, hcValue(args[i+1])))
	}
	return out
}

func hcValue(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return strconv.Quote(string(v))
	case time.Duration:
		return v.String()
	}
	return v
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), hcToSlog(level))
}
func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any { return h.implied }

func (h *hcLogger) With(args ...any) hclog.Logger {
	c := *h
	c.implied = append(h.implied[:len(h.implied):len(h.implied)], args...)
	return &c
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// Levels are controlled by the slog handler, not per hclog logger.
func (h *hcLogger) SetLevel(hclog.Level) {}
func (h *hcLogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}

func (h *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer { return lineWriter{h} }

// lineWriter logs each Write (the standard logger writes whole lines) at Info.
type lineWriter struct{ h *hcLogger }

func (w lineWriter) Write(p []byte) (int, error) {
	w.h.Info(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
