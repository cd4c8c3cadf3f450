package state

// SKELETON: signatures are the contract; bodies are filled in by the state
// implementation.

import (
	"io"
	"log/slog"

	"github.com/hashicorp/raft"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// FSM applies typed commands from the Raft log to a Store.
type FSM struct{ store *Store }

// NewFSM returns an FSM writing to store.
func NewFSM(store *Store, logger *slog.Logger) *FSM { return &FSM{store: store} }

// Store returns the store the FSM writes.
func (f *FSM) Store() *Store { return f.store }

// Apply implements raft.FSM; it returns a *pb.CommandResult.
func (f *FSM) Apply(l *raft.Log) interface{} { panic("todo") }

// ApplyCommand applies one decoded command at a log index (tests, benchmarks).
func (f *FSM) ApplyCommand(index uint64, cmd *pb.Command) *pb.CommandResult { panic("todo") }

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) { panic("todo") }

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error { panic("todo") }

// EncodeCommand serialises a command for the Raft log.
func EncodeCommand(cmd *pb.Command) ([]byte, error) { panic("todo") }

// DecodeCommand parses a log entry written by EncodeCommand.
func DecodeCommand(b []byte) (*pb.Command, error) { panic("todo") }
