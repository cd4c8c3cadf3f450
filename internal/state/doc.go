// Package state is the coordinator's replicated state machine: the in-memory,
// indexed Store of namespaces, extraction graphs, content, tasks and
// executors, and the Raft FSM that alone writes it by applying typed commands
// (validated completely, deterministic: the only clock is the command's
// timestamp) in log order. Every coordinator holds one replica; readers get
// shared, immutable messages. DESIGN.md says why it is built this way.
package state
