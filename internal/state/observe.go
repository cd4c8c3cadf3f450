package state

// Task observers: code outside the state machine (the executor push streams)
// learns which tasks each applied batch changed without re-reading the store.
// An observer only observes: it runs after the batch is applied, cannot
// change what was applied, and the state is the same with or without it.

import pb "github.com/indexify-go/indexify/proto/indexifypb"

// TaskChange is one task written by an applied command: Prev is the message
// before (nil for a new task), Cur the one after (nil when it was deleted).
// Both are the store's shared, immutable messages.
type TaskChange struct {
	Prev, Cur *pb.Task
}

// TaskObserver is told, once per applied batch, which tasks changed, in the
// order they were written. reset is true when the whole state was replaced
// (snapshot restore); changes is then nil and the observer must re-read what
// it needs. It is called with the store's write lock held: it must return
// quickly and must not call the Store.
type TaskObserver func(changes []TaskChange, reset bool)

// ObserveTasks adds an observer of task changes; it sees every batch
// applied after it returns.
func (s *Store) ObserveTasks(o TaskObserver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskObs = append(s.taskObs, o)
	s.d.recordTasks = true
}

// recordTask remembers a task write for the observers (if there are any).
func (d *data) recordTask(prev, cur *pb.Task) {
	if d.recordTasks {
		d.taskChanges = append(d.taskChanges, TaskChange{Prev: prev, Cur: cur})
	}
}

// tellObserversLocked hands the batch's task changes to the observers;
// called with the write lock held, before watchers are woken.
func (s *Store) tellObserversLocked(reset bool) {
	d := s.d
	if len(s.taskObs) == 0 {
		return
	}
	changes := d.taskChanges
	d.taskChanges = nil
	if !reset && len(changes) == 0 {
		return
	}
	if reset {
		changes = nil
	}
	for _, o := range s.taskObs {
		o(changes, reset)
	}
}
