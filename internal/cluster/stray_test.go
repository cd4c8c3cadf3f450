package cluster

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A client that is not a Raft peer (an HTTP GET, a TLS ClientHello, a port
// scanner) reaching the Raft port is closed before hashicorp/raft reads a
// byte: no "unknown rpc type" line, one WARN naming the peer's address and
// not its bytes; the cluster keeps working.
func TestStrayClientOnTheRaftPortIsClosedQuietly(t *testing.T) {
	specs := newSpecs(t, 3)
	static := staticMode(specs)
	logs := make([]*syncBuf, len(specs))
	var nodes []*testNode
	for i, s := range specs {
		logs[i] = &syncBuf{}
		nodes = append(nodes, startNode(t, s, func(c *Config) {
			static(c)
			c.Logger = teeLogger(t, s.id, logs[i])
		}, nil))
	}
	leader := waitLeader(t, nodes...)
	mustCreateNamespace(t, leader.node, "before")

	strays := []string{
		"GET /metrics HTTP/1.1\r\nHost: secret-probe\r\n\r\n",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", // TLS ClientHello
		"IXC0not-our-hello",
	}
	for _, s := range specs {
		for _, payload := range strays {
			c, err := net.Dial("tcp", s.raftAddr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(waitTimeout))
			if _, err := c.Write([]byte(payload)); err != nil {
				t.Fatal(err)
			}
			// Closed without an answer: the read ends with EOF or a reset.
			b, err := io.ReadAll(bufio.NewReader(c))
			var ne net.Error
			if len(b) != 0 || (errors.As(err, &ne) && ne.Timeout()) {
				t.Fatalf("%s answered a stray %q with %q (err %v); want the connection closed", s.id, payload[:4], b, err)
			}
			c.Close()
		}
	}

	mustCreateNamespace(t, leader.node, "after")
	for _, tn := range nodes {
		waitNamespace(t, tn, "after")
	}
	for i, s := range specs {
		l := logs[i].String()
		if strings.Contains(l, "unknown rpc type") || strings.Contains(l, "failed to decode incoming command") {
			t.Errorf("%s: raft read a stray client's bytes:\n%s", s.id, l)
		}
		if strings.Contains(l, "secret-probe") || strings.Contains(l, "not-our-hello") {
			t.Errorf("%s: a log line echoes the stray client's bytes:\n%s", s.id, l)
		}
		warns := 0
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "does not speak raft") && strings.Contains(line, "peer=127.0.0.") {
				warns++
			}
		}
		if warns != 1 {
			t.Errorf("%s: %d WARN lines about stray connections, want exactly 1 (with the peer address):\n%s", s.id, warns, l)
		}
	}
}
