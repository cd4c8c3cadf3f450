package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
	"github.com/indexify-go/indexify/test/harness"
)

// Issue 18 item 1 through a real `indexify dev`: a graph whose policy is
// named "ingestion" (it would read its own output as uploads) is refused
// with 400; and such a graph that an older version accepted (created under
// the original rules, here planted through a snapshot restore) is bounded:
// its chain stops at state.MaxLineageDepth generations, the last task
// fails saying why, /wait answers for the upload, and the coordinator
// warns about the graph by name.
func TestSelfFeedingPolicyIsRefusedAndAnOldOneIsBounded(t *testing.T) {
	dev := harness.StartDev(t, t.TempDir())
	api := dev.API

	for _, name := range []string{"ingestion", "INGESTION"} {
		spec := `{"name":"loopg","extraction_policies":[{"extractor":"tensorlake/chunk-extractor","name":"` + name + `","input_params":{"chunk_size":10}}]}`
		code, body, err := api.Do(context.Background(), http.MethodPost, "/namespaces/default/extraction_graphs", "application/json", strings.NewReader(spec))
		mustStatus(t, http.StatusBadRequest, code, body, err, "graph with a policy named "+name)
		if !strings.Contains(string(body), `"code":"invalid_argument"`) || !strings.Contains(string(body), "reserved") {
			t.Fatalf("policy named %s: answer %s, want invalid_argument saying the name is reserved", name, body)
		}
	}

	// The graph as an older version stored it: applied under
	// RulesOriginal to the live state, which is then restored.
	conn, err := grpc.NewClient(dev.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cs := pb.NewClusterServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snap, err := cs.Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var live bytes.Buffer
	for {
		chunk, err := snap.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		live.Write(chunk.GetData())
	}
	fsm := state.NewFSM(state.NewStore(), nil)
	if err := fsm.Store().Restore(&live); err != nil {
		t.Fatal(err)
	}
	res := fsm.ApplyCommand(fsm.Store().AppliedIndex()+1, &pb.Command{
		Rules: state.RulesOriginal, Timestamp: time.Now().UnixMilli(),
		Op: &pb.Command_CreateGraph{CreateGraph: &pb.CreateExtractionGraphCmd{Graph: &pb.ExtractionGraph{
			Namespace: "default", Name: "oldloop", Policies: []*pb.ExtractionPolicy{{
				Name: "ingestion", Extractor: "tensorlake/chunk-extractor", InputParamsJson: `{"chunk_size":10}`}}}}}})
	if err := state.ResultError(res); err != nil {
		t.Fatalf("the original rules refused the old graph: %v", err)
	}
	var old bytes.Buffer
	if err := fsm.Store().WriteSnapshot(&old); err != nil {
		t.Fatal(err)
	}
	rs, err := cs.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&pb.SnapshotChunk{Data: old.Bytes()}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CloseAndRecv(); err != nil {
		t.Fatalf("restore: %v", err)
	}
	harness.Eventually(t, 30*time.Second, "the coordinator warns about the old self-feeding graph", func() error {
		for _, line := range strings.Split(dev.Output(), "\n") {
			if strings.Contains(line, "WARN") && strings.Contains(line, "oldloop") && strings.Contains(line, "reserved-name rule") {
				return nil
			}
		}
		return errors.New("no WARN line naming graph oldloop yet")
	})

	id := upload(t, api, "default", "oldloop", "", []byte("hello"), nil)
	waitContent(t, api, "default", id)

	ts := tasks(t, api, "default", "oldloop", "ingestion")
	var ok, failed []task
	for _, tk := range ts {
		switch tk.Outcome {
		case wire.OutcomeSuccess:
			ok = append(ok, tk)
		case wire.OutcomeFailed:
			failed = append(failed, tk)
		default:
			t.Fatalf("task %s still %q after /wait answered", tk.ID, tk.Outcome)
		}
	}
	// Generations 1..MaxLineageDepth were made; the task that would make
	// one more failed.
	if len(ok) != state.MaxLineageDepth || len(failed) != 1 {
		t.Fatalf("%d tasks succeeded and %d failed, want %d and 1: %+v", len(ok), len(failed), state.MaxLineageDepth, ts)
	}
	t.Logf("the last generation's task failed with: %s", failed[0].LastError)
}
