package api

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func TestGCOnce(t *testing.T) {
	e := newEnv(t)
	info, err := e.store.Put(t.Context(), "ns/c1/blob", strings.NewReader("old version"))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(outside, []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	on(e.fake, "ListGCTasks", func(r *pb.ListGCTasksRequest) (*pb.ListGCTasksResponse, error) {
		if r.GetLimit() == 0 {
			t.Error("ListGCTasks without a limit")
		}
		return &pb.ListGCTasksResponse{Tasks: []*pb.GCTask{
			{Id: "present", StorageUrl: info.URL},
			{Id: "already-gone", StorageUrl: "file://" + e.store.Dir() + "/ns/c2/blob"},
			{Id: "foreign", StorageUrl: "file://" + outside},
			{Id: "no-url"},
		}}, nil
	})
	on(e.fake, "AckGCTasks", func(r *pb.AckGCTasksRequest) (*pb.AckGCTasksResponse, error) {
		return &pb.AckGCTasksResponse{}, nil
	})
	n, err := e.srv.GCOnce(t.Context())
	if err != nil || n != 3 {
		t.Fatalf("GCOnce = %d, %v", n, err)
	}
	if _, err := os.Stat(strings.TrimPrefix(info.URL, "file://")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("blob not deleted: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("foreign file touched: %v", err)
	}
	acks := requests[*pb.AckGCTasksRequest](e.fake, "AckGCTasks")
	if len(acks) != 1 || strings.Join(acks[0].GetIds(), ",") != "present,already-gone,no-url" || acks[0].GetRequestId() == "" {
		t.Fatalf("acks %v", acks)
	}

	// Coordinator errors surface; nothing is acknowledged.
	on(e.fake, "ListGCTasks", func(r *pb.ListGCTasksRequest) (*pb.ListGCTasksResponse, error) {
		return nil, status.Error(codes.Internal, "boom")
	})
	if _, err := e.srv.GCOnce(t.Context()); status.Code(err) != codes.Internal {
		t.Fatalf("GCOnce err = %v", err)
	}
	// Nothing to do: no ack call.
	on(e.fake, "ListGCTasks", func(r *pb.ListGCTasksRequest) (*pb.ListGCTasksResponse, error) {
		return &pb.ListGCTasksResponse{}, nil
	})
	if n, err := e.srv.GCOnce(t.Context()); n != 0 || err != nil {
		t.Fatalf("GCOnce = %d %v", n, err)
	}
	if e.fake.count("AckGCTasks") != 1 {
		t.Fatal("empty GC pass acknowledged something")
	}
}
