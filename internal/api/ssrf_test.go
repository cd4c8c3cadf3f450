package api

// ingest_remote_file must not be a proxy into the server's own network
// (issue 18 item 3). All servers here listen on 127.0.0.x: the default
// policy refuses them, an allow-list admits them.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/remotefetch"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

var allowLoopback = remotefetch.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// listenOn starts an HTTP server on a given loopback address.
func listenOn(t *testing.T, ip string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	s := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func ingestURL(e *env, u string) response {
	e.t.Helper()
	return e.doJSON(http.MethodPost, "/namespaces/ns/ingest_remote_file", map[string]any{
		"url": u, "extraction_graph_names": []string{"g"}})
}

func TestRemoteFetchRefusesInternalAddressesByDefault(t *testing.T) {
	var hits atomic.Int32
	secret := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("coordinator_metrics 1"))
	}))
	_, port, _ := net.SplitHostPort(secret.Listener.Addr().String())
	e := newEnv(t)
	acceptContent(e, true)
	for _, u := range []string{
		secret.URL + "/metrics",
		"http://localhost:" + port + "/metrics",
		"http://0.0.0.0:" + port + "/metrics",
		"http://[::1]:" + port + "/metrics",
		"http://[::ffff:127.0.0.1]:" + port + "/metrics",
		"http://127.1:" + port + "/metrics",
		e.http.URL + "/metrics", // the API's own port
	} {
		r := ingestURL(e, u)
		expectError(t, r, 400, codeRemoteFetch)
		if strings.Contains(string(r.body), "coordinator_metrics") {
			t.Fatalf("%s: body echoes the peer: %s", u, r.body)
		}
	}
	// User information is refused before any connection.
	expectError(t, ingestURL(e, "http://user:pw@"+secret.Listener.Addr().String()+"/metrics"), 400, codeInvalidArgument)
	if hits.Load() != 0 || e.fake.count("CreateContent") != 0 {
		t.Fatalf("refused fetches reached the server %d times, created %d contents", hits.Load(), e.fake.count("CreateContent"))
	}

	// With the allow-list the same server is fetched.
	e = newEnv(t, func(c *Config) {
		c.RemoteFetch = remotefetch.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	acceptContent(e, true)
	if r := ingestURL(e, secret.URL+"/metrics"); r.status != 200 {
		t.Fatalf("allowed fetch = %d %s", r.status, r.body)
	}
	if hits.Load() != 1 {
		t.Fatalf("hits = %d", hits.Load())
	}
	// User information stays refused even for allowed hosts.
	expectError(t, ingestURL(e, "http://user@"+secret.Listener.Addr().String()+"/metrics"), 400, codeInvalidArgument)
}

func TestRemoteFetchRefusesRedirectToInternal(t *testing.T) {
	inner := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect target was fetched: %s", r.URL)
	}))
	outer := listenOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/userinfo":
			http.Redirect(w, r, "http://u:p@"+r.Host+"/file", http.StatusFound)
		case "/file":
			w.Write([]byte("fine"))
		default:
			http.Redirect(w, r, inner.URL+"/metrics", http.StatusFound)
		}
	}))
	e := newEnv(t, func(c *Config) {
		c.RemoteFetch = remotefetch.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, MaxRedirects: 3}
	})
	acceptContent(e, true)
	expectError(t, ingestURL(e, outer.URL+"/go"), 400, codeRemoteFetch)
	expectError(t, ingestURL(e, outer.URL+"/loop"), 400, codeRemoteFetch)
	expectError(t, ingestURL(e, outer.URL+"/userinfo"), 400, codeRemoteFetch)
	if r := ingestURL(e, outer.URL+"/file"); r.status != 200 {
		t.Fatalf("allowed host = %d %s", r.status, r.body)
	}
	if n := e.fake.count("CreateContent"); n != 1 {
		t.Fatalf("CreateContent called %d times, want 1", n)
	}
}

// TestRemoteFetchErrorsDoNotScanPorts: a closed port, a non-HTTP server
// that answers garbage (like Raft's "unknown rpc type") and one that hangs
// up all give the same answer, which never contains the peer's bytes.
func TestRemoteFetchErrorsDoNotScanPorts(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	garbage := rawServer(t, func(c net.Conn) { c.Write([]byte("unknown rpc type 71\x00\x01")) })
	hangup := rawServer(t, func(net.Conn) {})

	e := newEnv(t, func(c *Config) { c.RemoteFetch = allowLoopback })
	var bodies []string
	for _, addr := range []string{closedAddr, garbage, hangup} {
		r := ingestURL(e, "http://"+addr+"/x")
		expectError(t, r, 400, codeRemoteFetch)
		msg := r.json(t)["error"].(string)
		if strings.Contains(msg, "rpc") || strings.Contains(msg, "refused") || strings.Contains(msg, "EOF") {
			t.Fatalf("error leaks transport detail: %s", msg)
		}
		bodies = append(bodies, strings.ReplaceAll(msg, addr, "ADDR"))
	}
	if bodies[0] != bodies[1] || bodies[1] != bodies[2] {
		t.Fatalf("errors tell ports apart: %q", bodies)
	}
}

// rawServer accepts TCP connections on 127.0.0.1, runs fn, closes them.
func rawServer(t *testing.T, fn func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fn(c)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestRemoteFetchDeadline: a remote that never finishes its body is cut off
// by the whole-transfer deadline, and leaves no blob.
func TestRemoteFetchDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slow := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte("a"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	silent := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	e := newEnv(t, func(c *Config) {
		c.RemoteFetch = remotefetch.Policy{Allow: allowLoopback.Allow, Timeout: 300 * time.Millisecond}
	})
	acceptContent(e, true)
	for _, u := range []string{slow.URL + "/trickle", silent.URL + "/silent"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/namespaces/ns/ingest_remote_file",
			strings.NewReader(`{"url":"`+u+`","extraction_graph_names":["g"]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err != nil {
			t.Fatalf("%s: the fetch deadline did not end the request: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("%s: status %d", u, resp.StatusCode)
		}
	}
	if len(e.blobFiles()) != 0 || len(requests[*pb.CreateContentRequest](e.fake, "CreateContent")) != 0 {
		t.Fatal("a cut-off fetch left a blob or content")
	}
}
