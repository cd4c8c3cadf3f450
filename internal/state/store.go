package state

// SKELETON: signatures are the contract (see api.go); bodies are filled in by
// the state implementation.

import (
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Store is the in-memory, indexed coordinator state. Only the FSM writes it.
type Store struct{}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{} }

// AppliedIndex is the Raft index of the last command applied.
func (s *Store) AppliedIndex() uint64 { panic("todo") }

// Watch returns a channel closed after the next command is applied (broadcast).
func (s *Store) Watch() <-chan struct{} { panic("todo") }

func (s *Store) Namespaces() []*pb.Namespace                    { panic("todo") }
func (s *Store) Namespace(name string) (*pb.Namespace, bool)     { panic("todo") }
func (s *Store) Graphs(ns string) []*pb.ExtractionGraph          { panic("todo") }
func (s *Store) Graph(ns, name string) (*pb.ExtractionGraph, bool) { panic("todo") }

// Links returns the links whose source graph is graph ("" = all of ns).
func (s *Store) Links(ns, graph string) []*pb.GraphLink { panic("todo") }

// Extractors is the union of the extractors of registered executors, by name.
func (s *Store) Extractors() []*pb.ExtractorDescription                  { panic("todo") }
func (s *Store) Extractor(name string) (*pb.ExtractorDescription, bool) { panic("todo") }

// Content returns the latest version of a content id (tombstoned included).
func (s *Store) Content(ns, id string) (*pb.Content, bool) { panic("todo") }

// ContentVersion returns one version, latest or superseded.
func (s *Store) ContentVersion(ns, id string, version uint64) (*pb.Content, bool) { panic("todo") }

// ListContent returns the page and the total number matching (before paging).
func (s *Store) ListContent(q ContentQuery) ([]*pb.Content, uint64, error) { panic("todo") }

// ContentTree returns the content and all its live descendants, parents first.
func (s *Store) ContentTree(ns, id string) []*pb.Content { panic("todo") }

// ContentSince returns live content of ns created at change offsets > after,
// in offset order, that belongs to graph ("" = any) and came from policy ("" = any).
func (s *Store) ContentSince(ns, graph, policy string, after uint64, limit int) []*pb.Content {
	panic("todo")
}

// ContentDone reports whether every task of the content and of its
// descendants is terminal and no unprocessed change for them remains.
func (s *Store) ContentDone(ns, id string) (bool, error) { panic("todo") }

func (s *Store) Task(id string) (*pb.Task, bool)             { panic("todo") }
func (s *Store) ListTasks(q TaskQuery) ([]*pb.Task, uint64) { panic("todo") }
func (s *Store) Analytics(ns, graph string) []*pb.PolicyAnalytics { panic("todo") }

// PendingTasks returns unfinished, unassigned tasks (outcome UNKNOWN, executor "").
func (s *Store) PendingTasks() []*pb.Task { panic("todo") }

// TasksAssignedTo returns unfinished tasks assigned to an executor.
func (s *Store) TasksAssignedTo(executorID string) []*pb.Task { panic("todo") }

func (s *Store) Executors() []*pb.Executor               { panic("todo") }
func (s *Store) Executor(id string) (*pb.Executor, bool) { panic("todo") }

// UnprocessedChanges returns the oldest unprocessed state changes, in id order.
func (s *Store) UnprocessedChanges(limit int) []*pb.StateChange { panic("todo") }

// GCTasks returns outstanding blob deletions.
func (s *Store) GCTasks(limit int) []*pb.GCTask { panic("todo") }

func (s *Store) Nodes() []*pb.NodeInfo               { panic("todo") }
func (s *Store) Node(id string) (*pb.NodeInfo, bool) { panic("todo") }
