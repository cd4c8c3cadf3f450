package cluster

import (
	"fmt"
	"github.com/indexify-go/indexify/internal/freeport"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestParseJoin(t *testing.T) {
	cases := []struct {
		in                string
		dns               bool
		id, host, port    string
		wantErrMentioning string
	}{
		{in: "coordinator-2.coordinator-headless:8950", id: "coordinator-2", host: "coordinator-2.coordinator-headless", port: "8950"},
		{in: "n1=127.0.0.1:9000", id: "n1", host: "127.0.0.1", port: "9000"},
		{in: "127.0.0.1:9000", id: "", host: "127.0.0.1", port: "9000"},
		{in: "x=coordinator-0.svc:1", id: "x", host: "coordinator-0.svc", port: "1"},
		{in: "dns:coordinator-headless:8950", dns: true, host: "coordinator-headless", port: "8950"},
		{in: "[::1]:9000", host: "::1", port: "9000"},
		{in: "dns:nohost", wantErrMentioning: "dns:NAME:PORT"},
		{in: "=1.2.3.4:5", wantErrMentioning: "empty id"},
		{in: "n1=1.2.3.4", wantErrMentioning: "HOST:PORT"},
		{in: "host:", wantErrMentioning: "HOST:PORT"},
	}
	for _, c := range cases {
		got, err := parseJoin(c.in)
		if c.wantErrMentioning != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErrMentioning) {
				t.Errorf("parseJoin(%q) err = %v, want mention of %q", c.in, err, c.wantErrMentioning)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseJoin(%q): %v", c.in, err)
			continue
		}
		if got.dns != c.dns || got.id != c.id || got.host != c.host || got.port != c.port {
			t.Errorf("parseJoin(%q) = %+v", c.in, got)
		}
	}
}

func TestStaticVoters(t *testing.T) {
	targets, err := parseJoins([]string{
		"coordinator-1.h:8950", "coordinator-0.h:8950", "coordinator-2.h:8950",
	})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := staticVoters("coordinator-1", "coordinator-1.h:8970", 3, targets)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{coordinator-0 coordinator-0.h:8970} {coordinator-1 coordinator-1.h:8970} {coordinator-2 coordinator-2.h:8970}]"
	if fmt.Sprint(vs) != want {
		t.Fatalf("voters %v, want %s", vs, want)
	}
	// Every node derives the same list, hence the same bootstrap entry.
	vs0, _ := staticVoters("coordinator-0", "coordinator-0.h:8970", 3, targets)
	if fmt.Sprint(vs0) != want {
		t.Fatalf("node 0 derived %v", vs0)
	}

	// Not static mode: wrong count, self missing, an IP without id, dns entry.
	for _, c := range []struct {
		self   string
		expect int
		join   []string
	}{
		{"coordinator-1", 5, []string{"coordinator-1.h:1", "coordinator-0.h:1", "coordinator-2.h:1"}},
		{"other", 3, []string{"coordinator-1.h:1", "coordinator-0.h:1", "coordinator-2.h:1"}},
		{"a", 2, []string{"a=127.0.0.1:1", "127.0.0.2:1"}},
		{"a", 2, []string{"a=127.0.0.1:1", "dns:b:1"}},
		{"a", 2, []string{"a=127.0.0.1:1", "a=127.0.0.2:1"}},
	} {
		ts, err := parseJoins(c.join)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := staticVoters(c.self, "h:8970", c.expect, ts)
		if err != nil || vs != nil {
			t.Errorf("%v: got %v, %v; want not static", c, vs, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	base := func() Config {
		return Config{NodeID: "a", DataDir: "/tmp/x", RaftBind: ":1", GRPCAdvertise: "h:2"}
	}
	c := base()
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.ElectionTimeout != DefaultElectionTimeout || c.MinQuorum != 1 || c.StabilizationTime != 10*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	for name, mod := range map[string]func(*Config){
		"no id":       func(c *Config) { c.NodeID = "" },
		"bad id":      func(c *Config) { c.NodeID = "a=b" },
		"no dir":      func(c *Config) { c.DataDir = "" },
		"no bind":     func(c *Config) { c.RaftBind = "" },
		"no grpc":     func(c *Config) { c.GRPCAdvertise = "" },
		"neg expect":  func(c *Config) { c.BootstrapExpect = -1 },
		"tiny timing": func(c *Config) { c.ElectionTimeout = time.Millisecond },
	} {
		c := base()
		mod(&c)
		if err := c.setDefaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The stream layer advertises a DNS name verbatim and resolves names when
// dialling ("localhost" stands in for a pod's headless-service name).
// The one knob sets every failure-detection timeout of hashicorp/raft, the
// result passes raft's own validation at the default and at the smallest
// accepted knob, and pre-vote stays on.
func TestRaftTimingFromTheOneKnob(t *testing.T) {
	for _, knob := range []time.Duration{DefaultElectionTimeout, 20 * time.Millisecond, 5 * time.Second} {
		rc := raft.DefaultConfig()
		rc.LocalID = "n1"
		raftTiming(rc, knob)
		if rc.HeartbeatTimeout != knob || rc.ElectionTimeout != knob || rc.LeaderLeaseTimeout != knob-time.Millisecond {
			t.Fatalf("knob %v: heartbeat %v election %v lease %v", knob, rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout)
		}
		if rc.PreVoteDisabled {
			t.Fatal("pre-vote disabled")
		}
		if err := raft.ValidateConfig(rc); err != nil {
			t.Fatalf("knob %v: %v", knob, err)
		}
		// promptHeartbeatCheck's dip (leadergone.go) must validate too.
		rc.HeartbeatTimeout -= time.Microsecond
		if err := raft.ValidateConfig(rc); err != nil {
			t.Fatalf("knob %v, heartbeat check prompt: %v", knob, err)
		}
	}
}

func TestStreamLayerDialsDNSName(t *testing.T) {
	port := freeport.Take(t)
	adv := fmt.Sprintf("localhost:%d", port)
	sl, err := newStreamLayer(fmt.Sprintf("127.0.0.1:%d", port), adv)
	if err != nil {
		t.Fatal(err)
	}
	defer sl.Close()
	if sl.Addr().String() != adv || sl.Addr().Network() != "tcp" {
		t.Fatalf("Addr() = %v", sl.Addr())
	}
	accepted := make(chan string, 1)
	go func() {
		c, err := sl.Accept()
		if err != nil {
			accepted <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil {
			accepted <- "read: " + err.Error()
			return
		}
		accepted <- string(b)
	}()
	c, err := sl.Dial(raft.ServerAddress(adv), time.Second)
	if err != nil {
		t.Fatalf("dial by name: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := <-accepted; got != "hello" {
		t.Fatalf("server got %q", got)
	}

	// An unspecified bind address needs an explicit advertise address.
	if _, err := newStreamLayer("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "RaftAdvertise") {
		t.Fatalf("unspecified bind without advertise: %v", err)
	}
}
