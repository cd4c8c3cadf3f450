package state

// The FSM turns Raft log entries into store mutations. Each command is
// validated completely before anything is written, so a rejected command is a
// no-op on every replica, and it only uses Command.timestamp (never the
// clock), so replicas applying the same log end in the same state.

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// commandVersion prefixes every encoded command so the format can evolve:
// a node meeting an unknown version fails the command instead of guessing.
const commandVersion byte = 0x01

// FSM applies typed commands from the Raft log to a Store.
type FSM struct {
	store   *Store
	log     *slog.Logger
	schemas *schemaCache
}

// NewFSM returns an FSM writing to store.
func NewFSM(store *Store, logger *slog.Logger) *FSM {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &FSM{store: store, log: logger, schemas: &schemaCache{}}
}

// Store returns the store the FSM writes.
func (f *FSM) Store() *Store { return f.store }

// Apply implements raft.FSM; it returns a *pb.CommandResult.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return &pb.CommandResult{Index: l.Index}
	}
	cmd, err := DecodeCommand(l.Data)
	if err != nil {
		f.log.Error("undecodable log entry", "index", l.Index, "err", err)
		f.store.mu.Lock()
		defer f.store.mu.Unlock()
		f.store.d.applied = l.Index
		f.store.notifyLocked()
		return &pb.CommandResult{ErrorCode: codeInvalid, Error: err.Error(), Index: l.Index}
	}
	return f.applyOne(l.Index, cmd, true)
}

// ApplyCommand applies one decoded command at a log index (tests,
// benchmarks). The command stays the caller's: nothing stored aliases it.
func (f *FSM) ApplyCommand(index uint64, cmd *pb.Command) *pb.CommandResult {
	return f.applyOne(index, cmd, false)
}

func (f *FSM) applyOne(index uint64, cmd *pb.Command, owned bool) *pb.CommandResult {
	s := f.store
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	return f.applyLocked(index, cmd, owned)
}

// ApplyBatch implements raft.BatchingFSM: Raft hands over every committed
// entry it has at once (up to MaxAppendEntries). Commands are decoded
// before the write lock is taken, the lock is taken once, and watchers are
// woken once per batch instead of once per command: under load that is
// what keeps readers, executor streams and the scheduler from waking
// thousands of times a second. Results are the same as applying the
// entries one by one with Apply.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	cmds := make([]*pb.Command, len(logs))
	errs := make([]error, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			cmds[i], errs[i] = DecodeCommand(l.Data)
		}
	}
	out := make([]interface{}, len(logs))
	s := f.store
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i, l := range logs {
		switch {
		case l.Type != raft.LogCommand:
			out[i] = &pb.CommandResult{Index: l.Index}
		case errs[i] != nil:
			f.log.Error("undecodable log entry", "index", l.Index, "err", errs[i])
			if l.Index > s.d.applied {
				s.d.applied = l.Index
			}
			changed = true
			out[i] = &pb.CommandResult{ErrorCode: codeInvalid, Error: errs[i].Error(), Index: l.Index}
		default:
			changed = true
			out[i] = f.applyLocked(l.Index, cmds[i], true)
		}
	}
	if changed {
		s.notifyLocked()
	}
	return out
}

// applyLocked applies one command; the caller holds the write lock and
// wakes watchers afterwards. owned says the command was decoded here from
// a log entry and nothing else holds it, so its messages may be stored as
// they are instead of copied (see opCtx.owned).
func (f *FSM) applyLocked(index uint64, cmd *pb.Command, owned bool) *pb.CommandResult {
	d := f.store.d
	if index > d.applied {
		d.applied = index
	}
	if cmd.GetRequestId() != "" {
		if r, ok := d.requests[cmd.RequestId]; ok {
			return r
		}
	}
	res := f.apply(d, index, cmd, owned)
	res.Index = index
	if cmd.GetRequestId() != "" {
		d.rememberRequest(cmd.RequestId, res)
	}
	return res
}

func (f *FSM) apply(d *data, index uint64, cmd *pb.Command, owned bool) *pb.CommandResult {
	op := &opCtx{f: f, d: d, ts: cmd.GetTimestamp(), index: index, rules: cmd.GetRules(), owned: owned}
	var refs []*pb.ContentRef
	var noop bool
	var err *Error
	switch c := cmd.GetOp().(type) {
	case *pb.Command_CreateNamespace:
		err = op.createNamespace(c.CreateNamespace)
	case *pb.Command_CreateGraph:
		err = op.createGraph(c.CreateGraph)
	case *pb.Command_DeleteGraph:
		err = op.deleteGraph(c.DeleteGraph)
	case *pb.Command_CreateLink:
		err = op.createLink(c.CreateLink)
	case *pb.Command_CreateContent:
		refs, err = op.createContent(c.CreateContent)
	case *pb.Command_UpdateLabels:
		err = op.updateLabels(c.UpdateLabels)
	case *pb.Command_TombstoneContent:
		err = op.tombstoneContent(c.TombstoneContent)
	case *pb.Command_RegisterExecutor:
		err = op.registerExecutor(c.RegisterExecutor)
	case *pb.Command_ExecutorHeartbeat:
		err = op.heartbeat(c.ExecutorHeartbeat)
	case *pb.Command_RemoveExecutor:
		err = op.removeExecutor(c.RemoveExecutor)
	case *pb.Command_SchedulerUpdate:
		err = op.schedulerUpdate(c.SchedulerUpdate)
	case *pb.Command_CompleteTask:
		err = op.completeTask(c.CompleteTask)
	case *pb.Command_CompleteTaskV2:
		refs, noop, err = op.completeTaskV2(c.CompleteTaskV2)
	case *pb.Command_AckGcTasks:
		err = op.ackGC(c.AckGcTasks)
	case *pb.Command_UpsertNode:
		err = op.upsertNode(c.UpsertNode)
	case *pb.Command_RemoveNode:
		err = op.removeNode(c.RemoveNode)
	default:
		err = Errorf(codeInvalid, "command has no known operation")
	}
	if err != nil {
		return &pb.CommandResult{ErrorCode: err.Code, Error: err.Msg}
	}
	return &pb.CommandResult{Contents: refs, Noop: noop}
}

// ResultError converts a CommandResult into an error (nil when OK), so
// callers can write `if err := state.ResultError(res); err != nil`.
func ResultError(r *pb.CommandResult) error {
	if r == nil || r.ErrorCode == codeOK {
		return nil
	}
	return &Error{Code: r.ErrorCode, Msg: r.Error}
}

// Snapshot implements raft.FSM. It only collects pointers to the current
// (immutable) messages under the read lock; Persist serialises them while
// new commands keep applying.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return f.store.snapshot(), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.store.Restore(rc); err != nil {
		return err
	}
	f.warnReservedPoliciesInStore()
	return nil
}

// EncodeCommand serialises a command for the Raft log.
func EncodeCommand(cmd *pb.Command) ([]byte, error) {
	if cmd == nil {
		return nil, fmt.Errorf("nil command")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	out := make([]byte, 0, len(b)+1)
	out = append(out, commandVersion)
	return append(out, b...), nil
}

// DecodeCommand parses a log entry written by EncodeCommand.
func DecodeCommand(b []byte) (*pb.Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("decode command: empty entry")
	}
	if b[0] != commandVersion {
		return nil, fmt.Errorf("decode command: unknown format version %d", b[0])
	}
	cmd := &pb.Command{}
	if err := proto.Unmarshal(b[1:], cmd); err != nil {
		return nil, fmt.Errorf("decode command: %w", err)
	}
	return cmd, nil
}
