package api

// Slow and greedy upload clients (issue 18 item 4): a trickle that never
// stalls long enough for the idle timeout is cut off by the minimum rate,
// and one client cannot hold every upload slot.

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestTricklingUploadIsCutOff(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Limits.BodyIdleTimeout = 10 * time.Second // never reached by the trickle
		c.Limits.MinUploadRate = 1000
		c.Limits.UploadRateGrace = 100 * time.Millisecond
	})
	acceptAll(e)
	on(e.fake, "GetTask", func(r *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
		return &pb.GetTaskResponse{Task: &pb.Task{Id: r.GetTaskId(), ExecutorId: "e1", Namespace: "default", ContentId: "c1",
			GraphName: "g", PolicyName: "p"}}, nil
	})
	addr := serveReal(t, e)
	for name, c := range map[string]struct{ path, part string }{
		"file upload": {"/namespaces/default/extraction_graphs/g/extract", `name="file"; filename="a.bin"`},
		"task result": {"/internal/executors/e1/tasks/t1/result", `name="` + wire.ContentPartName(0) + `"`},
	} {
		t.Run(name, func(t *testing.T) {
			out := trickle(t, addr, c.path, "--XYZ\r\nContent-Disposition: form-data; "+c.part+"\r\n\r\n")
			if !strings.Contains(out, "408 Request Timeout") || !strings.Contains(out, `"code":"request_timeout"`) || !strings.Contains(out, "too slow") {
				t.Fatalf("response to a trickling body: %q", out)
			}
			eventually(t, "no blob left behind", func() bool { return len(e.blobFiles()) == 0 })
		})
	}
}

// trickle sends a multipart body's head, then one byte every 20 ms (50 B/s,
// far below the 1000 B/s minimum; the pacing is the behaviour under test,
// at most 1000 bytes), and returns what the server answered.
func trickle(t *testing.T, addr, path, head string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XYZ\r\nContent-Length: 100000\r\n\r\n%s", path, head)
	stop := make(chan struct{})
	trickled := make(chan int, 1)
	go func() {
		n := 0
		defer func() { trickled <- n }()
		for ; n < 1000; n++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	out := readUntilClosed(t, c)
	close(stop)
	if n := <-trickled; n >= 1000 {
		t.Fatalf("the trickle was never cut off (%d bytes sent)", n)
	}
	return out
}

func TestUploadSlotsArePerClient(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Limits.MaxConcurrentUploads = 4
		c.Limits.MaxUploadsPerClient = 2
	})
	acceptAll(e)
	// Client 127.0.0.1 holds its two slots with stalled bodies.
	done := make(chan response, 2)
	pw1, pw2 := stalledUpload(t, e, done), stalledUpload(t, e, done)
	eventually(t, "both uploads staging", func() bool { return len(e.blobFiles()) >= 2 })

	file := formPart{name: "file", filename: "b.txt", data: []byte("b")}
	r := e.upload("POST", "/namespaces/default/extraction_graphs/g/extract", file)
	expectError(t, r, 429, codeTooManyUploads)
	if !strings.Contains(string(r.body), "per client") || r.header.Get("Retry-After") == "" {
		t.Fatalf("per-client refusal: %s %v", r.body, r.header)
	}

	// Another client (source address 127.0.0.2) still gets a slot.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	body, ct := multipartBody(t, file)
	req, _ := http.NewRequest("POST", e.http.URL+"/namespaces/default/extraction_graphs/g/extract", body)
	req.Header.Set("Content-Type", ct)
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload from another client while the first holds its slots: %d", resp.StatusCode)
	}

	for _, pw := range []interface{ Close() error }{pw1, pw2} {
		pw.Close()
	}
	for range 2 {
		<-done
	}
	if r := e.upload("POST", "/namespaces/default/extraction_graphs/g/extract", file); r.status != 200 {
		t.Fatalf("upload after the slots freed: %d %s", r.status, r.body)
	}
}

// Fairness is per IPv4 address and per IPv6 /64: addresses of one /64 are
// one client (a host that owns a /64 cannot take every slot by sourcing
// each connection from another address), other /64s are other clients.
func TestClientKeyGroupsIPv6By64(t *testing.T) {
	key := func(remote string) string {
		return clientKey(&http.Request{RemoteAddr: remote})
	}
	same := [][2]string{
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff:ffff:ffff:fffe]:4001"},
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:0:0:0:1%eth0]:1"},
		{"[::ffff:192.0.2.7]:1", "192.0.2.7:2"},
		{"198.51.100.1:1", "198.51.100.1:2"},
	}
	for _, p := range same {
		if a, b := key(p[0]), key(p[1]); a != b {
			t.Errorf("%s and %s are one client, got keys %q and %q", p[0], p[1], a, b)
		}
	}
	different := [][2]string{
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1"},
		{"198.51.100.1:1", "198.51.100.2:1"},
	}
	for _, p := range different {
		if a, b := key(p[0]), key(p[1]); a == b {
			t.Errorf("%s and %s are different clients, both got key %q", p[0], p[1], a)
		}
	}
	if k := key("[2001:db8:1:2:3:4:5:6]:9"); k != "2001:db8:1:2::/64" {
		t.Errorf("IPv6 key %q, want the /64 prefix", k)
	}

	// The slots follow the key: two connections from one /64 share a
	// client's cap.
	slots := &uploadSlots{perClient: map[string]int{}, lim: Limits{MaxConcurrentUploads: 4, MaxUploadsPerClient: 1}}
	release, refusal := slots.acquire(key("[2001:db8:1:2::1]:1"))
	if release == nil {
		t.Fatalf("first upload refused: %s", refusal)
	}
	if r, why := slots.acquire(key("[2001:db8:1:2::99]:1")); r != nil || !strings.Contains(why, "per client") {
		t.Fatalf("a second address of the same /64 got its own slot (%q)", why)
	}
	if r, why := slots.acquire(key("[2001:db8:1:3::1]:1")); r == nil {
		t.Fatalf("another /64 refused: %s", why)
	}
	release()
}
