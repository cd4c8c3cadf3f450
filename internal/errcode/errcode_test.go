package errcode

import (
	"errors"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Every state code travels to the API as one gRPC code and one HTTP answer;
// the state code survives the trip even where gRPC codes coincide.
func TestStateCodesKeepTheirMeaningThroughEveryLayer(t *testing.T) {
	want := map[pb.ErrorCode]struct {
		grpc codes.Code
		http int
		json string
	}{
		pb.ErrorCode_ERROR_CODE_INVALID:           {codes.InvalidArgument, 400, "invalid_argument"},
		pb.ErrorCode_ERROR_CODE_NOT_FOUND:         {codes.NotFound, 404, "not_found"},
		pb.ErrorCode_ERROR_CODE_ALREADY_EXISTS:    {codes.AlreadyExists, 409, "already_exists"},
		pb.ErrorCode_ERROR_CODE_CONFLICT:          {codes.FailedPrecondition, 409, "conflict"},
		pb.ErrorCode_ERROR_CODE_ALREADY_COMPLETED: {codes.FailedPrecondition, 409, "task_already_completed"},
		pb.ErrorCode_ERROR_CODE_UNAVAILABLE:       {codes.Unavailable, 503, "unavailable"},
	}
	// Every refusal the state machine can give is in the table.
	for v, name := range pb.ErrorCode_name {
		c := pb.ErrorCode(v)
		if c == pb.ErrorCode_ERROR_CODE_OK {
			continue
		}
		if _, ok := want[c]; !ok {
			t.Errorf("state code %s has no expected row in this test", name)
		}
		if ForState(c) == internal {
			t.Errorf("state code %s is missing from Table", name)
		}
	}
	for c, w := range want {
		if got := GRPC(c); got != w.grpc {
			t.Errorf("%s: gRPC %s, want %s", c, got, w.grpc)
		}
		err := Status(c, "refused")
		st := status.Convert(err)
		if st.Code() != w.grpc || st.Message() != "refused" {
			t.Errorf("%s: status %v", c, st)
		}
		if got, ok := StateCode(st); !ok || got != c {
			t.Errorf("%s: state code in detail = %s, %v", c, got, ok)
		}
		if e := ForStatus(st); e.HTTP != w.http || e.JSON != w.json {
			t.Errorf("%s: HTTP %d %s, want %d %s", c, e.HTTP, e.JSON, w.http, w.json)
		}
		if IsNotLeader(err) {
			t.Errorf("%s: reads as not-leader", c)
		}
	}
	if e := ForState(pb.ErrorCode(99)); e.GRPC != codes.Internal || e.HTTP != 500 {
		t.Errorf("unknown state code: %+v", e)
	}
}

// Statuses without a state code (the coordinator's own checks, contexts)
// map by their gRPC code.
func TestPlainStatusesMapByGRPCCode(t *testing.T) {
	for _, c := range []struct {
		code codes.Code
		http int
		json string
	}{
		{codes.InvalidArgument, 400, "invalid_argument"},
		{codes.OutOfRange, 400, "invalid_argument"},
		{codes.NotFound, 404, "not_found"},
		{codes.AlreadyExists, 409, "already_exists"},
		{codes.FailedPrecondition, 409, "conflict"},
		{codes.Aborted, 409, "conflict"},
		{codes.Unavailable, 503, "unavailable"},
		{codes.DeadlineExceeded, http.StatusGatewayTimeout, "deadline_exceeded"},
		{codes.Canceled, StatusClientClosed, "cancelled"},
		{codes.Internal, 500, "internal"},
		{codes.PermissionDenied, 500, "internal"},
	} {
		if e := ForStatus(status.New(c.code, "x")); e.HTTP != c.http || e.JSON != c.json {
			t.Errorf("%s: HTTP %d %s, want %d %s", c.code, e.HTTP, e.JSON, c.http, c.json)
		}
	}
}

// NotLeader is told apart from a conflict and from other Unavailable
// answers, and carries the leader hint.
func TestNotLeaderCarriesTheLeaderHint(t *testing.T) {
	err := NotLeader("not leader", "n2", "127.0.0.1:9002")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("code %s, want Unavailable", status.Code(err))
	}
	id, addr, ok := LeaderHint(err)
	if !ok || id != "n2" || addr != "127.0.0.1:9002" {
		t.Fatalf("hint %q %q %v", id, addr, ok)
	}
	if _, _, ok := LeaderHint(NotLeader("shutting down", "", "")); !ok {
		t.Fatal("a hint-less NotLeader is not recognised")
	}
	for _, other := range []error{
		status.Error(codes.Unavailable, "no leader"),
		status.Error(codes.FailedPrecondition, "not leader"),
		Status(pb.ErrorCode_ERROR_CODE_UNAVAILABLE, "x"),
		errors.New("not leader"),
		nil,
	} {
		if IsNotLeader(other) {
			t.Errorf("%v reads as not-leader", other)
		}
	}
	if e := ForStatus(status.Convert(err)); e.HTTP != 503 || e.JSON != "unavailable" {
		t.Errorf("NotLeader over HTTP: %d %s", e.HTTP, e.JSON)
	}
}

// NotApplied (issue 16): only refusals prove a write had no effect; every
// code that may follow a proposal, a not-leader answer (it may end the
// retries of an applied write), and errors that are no status at all
// leave the outcome unknown. Every state-machine refusal is proof.
func TestNotAppliedOnlyForRefusals(t *testing.T) {
	proof := map[codes.Code]bool{
		codes.InvalidArgument: true, codes.OutOfRange: true, codes.NotFound: true, codes.AlreadyExists: true,
		codes.FailedPrecondition: true, codes.PermissionDenied: true, codes.Unauthenticated: true, codes.Unimplemented: true,
	}
	for c := codes.OK + 1; c <= codes.Unauthenticated; c++ {
		if got := NotApplied(status.Error(c, "x")); got != proof[c] {
			t.Errorf("NotApplied(%s) = %v, want %v", c, got, proof[c])
		}
	}
	for _, e := range Table {
		if want := e.State != pb.ErrorCode_ERROR_CODE_UNAVAILABLE; NotApplied(Status(e.State, "x")) != want {
			t.Errorf("NotApplied(state %s) = %v, want %v", e.State, !want, want)
		}
	}
	for _, unknown := range []error{NotLeader("not leader", "n2", "a:1"), errors.New("connection reset"), nil} {
		if NotApplied(unknown) {
			t.Errorf("NotApplied(%v) = true", unknown)
		}
	}
}
