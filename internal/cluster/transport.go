package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
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
	return s.secureAccepted(c), nil
}

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
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
	h.l.Log(context.Background(), lv, msg, append(h.implied[:len(h.implied):len(h.implied)], args...)...)
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
