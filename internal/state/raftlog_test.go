package state

import "github.com/hashicorp/raft"

func rafLog(idx uint64, data []byte) *raft.Log {
	return &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}
}
