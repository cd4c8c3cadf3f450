package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"github.com/indexify-go/indexify/test/harness"
)

// Coordinator ports as the chart declares them.
const (
	grpcPort = 8950
	apiPort  = 8900
)

// status asks one coordinator (through its loopback-published gRPC port)
// for its own view of the cluster.
func status(addr string) (*pb.StatusResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return pb.NewClusterServiceClient(conn).Status(ctx, &pb.StatusRequest{})
}

// waitCluster waits until every named coordinator pod reports the same
// cluster id and leader, the configuration holds exactly wantVoters as
// voters (and nothing else), and the leader sees all of them healthy.
// It returns the cluster id and the leader.
func waitCluster(t *testing.T, k *Kube, timeout time.Duration, wantVoters []string) (string, string) {
	t.Helper()
	var clusterID, leader string
	want := slices.Clone(wantVoters)
	slices.Sort(want)
	harness.Eventually(t, timeout, fmt.Sprintf("one cluster of voters %v", want), func() error {
		clusterID, leader = "", ""
		for _, name := range wantVoters {
			p := k.Pod(name)
			if p == nil {
				return fmt.Errorf("%s not running", name)
			}
			st, err := status(p.Addr(grpcPort))
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			if st.GetClusterId() == "" || st.GetLeaderId() == "" {
				return fmt.Errorf("%s: cluster %q leader %q", name, st.GetClusterId(), st.GetLeaderId())
			}
			if clusterID == "" {
				clusterID, leader = st.GetClusterId(), st.GetLeaderId()
			}
			if st.GetClusterId() != clusterID || st.GetLeaderId() != leader {
				return fmt.Errorf("%s sees cluster %s leader %s; others %s %s", name, st.GetClusterId(), st.GetLeaderId(), clusterID, leader)
			}
			if name != leader {
				continue
			}
			var voters []string
			for _, m := range st.GetMembers() {
				if m.GetSuffrage() != "voter" {
					return fmt.Errorf("member %s is %s", m.GetId(), m.GetSuffrage())
				}
				if !m.GetHealthy() {
					return fmt.Errorf("member %s unhealthy", m.GetId())
				}
				voters = append(voters, m.GetId())
			}
			slices.Sort(voters)
			if !slices.Equal(voters, want) {
				return fmt.Errorf("voters %v", voters)
			}
		}
		if !slices.Contains(wantVoters, leader) {
			return fmt.Errorf("leader %s is not one of the pods asked", leader)
		}
		return nil
	})
	return clusterID, leader
}

func coordinatorNames(k *Kube, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = k.CoordinatorPod(i)
	}
	return out
}

const chunkGraph = `name: docs
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 10, overlap: 0}
`

func mustOK(t *testing.T, code int, body []byte, err error, what string) {
	t.Helper()
	if err != nil || code/100 != 2 {
		t.Fatalf("%s: %d %v %s", what, code, err, body)
	}
}

func createNamespaceAndGraph(t *testing.T, api *harness.HTTP, ns string) {
	t.Helper()
	code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: ns}, nil)
	mustOK(t, code, body, err, "create namespace")
	// A graph names extractors that some executor must offer: wait for the
	// executor pod to have registered.
	harness.Eventually(t, 60*time.Second, "an executor offers the chunk extractor", func() error {
		code, body, err := api.Do(context.Background(), http.MethodGet, "/extractors", "", nil)
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), "tensorlake/chunk-extractor") {
			return fmt.Errorf("extractors: %d %v %s", code, err, body)
		}
		return nil
	})
	code, body, err = api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs", "application/x-yaml", strings.NewReader(chunkGraph))
	mustOK(t, code, body, err, "create graph")
}

// uploadOnce sends one file; it returns the content id or the failure.
func uploadOnce(api *harness.HTTP, ns, text string) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.txt")
	_, _ = fw.Write([]byte(text))
	_ = mw.Close()
	code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/"+ns+"/extraction_graphs/docs/extract", mw.FormDataContentType(), &buf)
	if err != nil {
		return "", err
	}
	if code/100 != 2 {
		return "", fmt.Errorf("upload: %d %s", code, body)
	}
	var out wire.ContentID
	if err := json.Unmarshal(body, &out); err != nil || out.ContentID == "" {
		return "", fmt.Errorf("upload answer %s: %v", body, err)
	}
	return out.ContentID, nil
}

func upload(t *testing.T, api *harness.HTTP, ns, text string) string {
	t.Helper()
	id, err := uploadOnce(api, ns, text)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// chunksOf waits for the content's tasks and returns its chunks' texts in
// chunk order.
func chunksOf(t *testing.T, api *harness.HTTP, ns, id string) []string {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "content "+id+" extracted", func() error {
		code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/content/"+id+"/wait", nil, nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("wait: %d %v %s", code, err, body)
		}
		return nil
	})
	var tree wire.ContentTree
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/extraction_graphs/docs/content/"+id+"/extraction_policies/chunks", nil, &tree)
	mustOK(t, code, body, err, "content tree")
	var out []string
	for _, c := range tree.ContentTreeMetadata {
		if c.Source != "chunks" {
			continue
		}
		var idx int
		if err := json.Unmarshal(c.Labels["chunk_index"], &idx); err != nil {
			t.Fatalf("chunk %s: chunk_index %s", c.ID, c.Labels["chunk_index"])
		}
		for len(out) <= idx {
			out = append(out, "")
		}
		code, b, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+c.ID+"/download", "", nil)
		mustOK(t, code, b, err, "download chunk")
		out[idx] = string(b)
	}
	return out
}

// ingested counts the namespace's uploaded content (read on the leader's
// commit index: no stale answer).
func ingested(t *testing.T, api *harness.HTTP, ns string) int {
	t.Helper()
	var out wire.ContentList
	code, body, err := api.JSON(http.MethodGet, "/namespaces/"+ns+"/extraction_graphs/docs/content?source=ingestion&consistency=linearizable", nil, &out)
	mustOK(t, code, body, err, "list content")
	return int(out.Total)
}

func clientFor(api *Pod) *harness.HTTP { return harness.NewHTTP("http://" + api.Addr(apiPort)) }

// uploaded is one acknowledged upload: its content id and its bytes.
type uploaded struct{ id, text string }

// bytesKept downloads a sample of the acknowledged uploads (up to 50,
// spread evenly, the first and the last among them) and fails on any whose
// bytes are not exactly what was uploaded: the coordinators list content
// whose bytes live on the API server's volume, so ids alone prove nothing.
func bytesKept(t *testing.T, api *harness.HTTP, ns string, acked []uploaded) {
	t.Helper()
	for _, i := range harness.Spread(len(acked), 50) {
		u := acked[i]
		code, body, err := api.Do(context.Background(), http.MethodGet, "/namespaces/"+ns+"/content/"+u.id+"/download", "", nil)
		if err != nil || code != http.StatusOK || string(body) != u.text {
			t.Errorf("upload %d of %d (%s): download %d %v %q, want %q", i, len(acked), u.id, code, err, body, u.text)
		}
	}
}
