// Package layout is the on-disk layout of the coordinator's replicated
// state (issue 15): how every record and secondary index of internal/state
// maps to ordered byte keys and values in an embedded key-value store. It
// knows no engine; it only builds keys, encodes values and computes the
// writes one state change needs, so the FSM (and a benchmark) can put them
// into one write batch of whichever store holds them. See
// internal/state/DESIGN.md, "On-disk state: the plan".
//
// A key is a table tag byte followed by components. Strings use an
// order-preserving, prefix-free encoding (0x00 is escaped as 0x00 0xFF and a
// string ends with 0x00 0x01), unsigned numbers are 8 bytes big-endian and
// signed numbers are big-endian with the sign bit flipped, so byte order is
// the order of the components and a prefix of whole components selects
// exactly the keys that start with them (the pending tasks of one
// extractor, the children of one content) and nothing else.
package layout

import (
	"encoding/binary"
	"errors"
)

// FormatVersion is the layout version recorded under MetaFormatKey. A data
// dir with another version is upgraded (or refused) at open, never guessed.
const FormatVersion = 1

// Table tags: the first byte of every key.
const (
	TagMeta          byte = 0x01 // name -> value (applied index, counters, format)
	TagNamespace     byte = 0x10 // ns -> Namespace
	TagGraph         byte = 0x11 // ns, graph -> ExtractionGraph
	TagLink          byte = 0x12 // ns, graph, content source, linked graph -> GraphLink
	TagExecutor      byte = 0x13 // executor id -> Executor
	TagNode          byte = 0x14 // node id -> NodeInfo
	TagContent       byte = 0x20 // ns, id -> latest Content
	TagOldVersion    byte = 0x21 // ns, id, version -> superseded Content not yet purged
	TagChild         byte = 0x22 // ns, parent id, child id -> ""
	TagOffset        byte = 0x23 // ns, change offset -> content id
	TagTask          byte = 0x30 // task id -> Task (without the content copy)
	TagTaskByContent byte = 0x31 // ns, content id, task id -> ""
	TagPending       byte = 0x32 // extractor, created_at, task id -> "" (unfinished, unassigned)
	TagAssigned      byte = 0x33 // executor id, created_at, task id -> "" (unfinished, assigned)
	TagPolicyStats   byte = 0x34 // ns, graph, policy -> pending, success, failure
	TagChange        byte = 0x40 // change id -> unprocessed StateChange
	TagChangedCont   byte = 0x41 // ns, content id, change id -> "" (unprocessed changes per content)
	TagGCTask        byte = 0x50 // gc task id -> GCTask
	TagRequest       byte = 0x60 // request id -> CommandResult
	TagRequestOrder  byte = 0x61 // FIFO sequence -> request id
)

// Meta key names.
const (
	MetaApplied   = "applied"    // uint64: Raft index of the last applied entry
	MetaChangeSeq = "change_seq" // uint64: last StateChange id handed out
	MetaOffsetSeq = "offset_seq" // uint64: last Content.change_offset handed out
	MetaFormat    = "format"     // uint64: FormatVersion of the layout
	MetaRequestSq = "request_seq"
)

// ErrBadKey is returned for a key that does not parse as the layout says.
var ErrBadKey = errors.New("layout: malformed key")

// AppendString appends the order-preserving encoding of s.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			b = append(b, 0x00, 0xFF)
			continue
		}
		b = append(b, s[i])
	}
	return append(b, 0x00, 0x01)
}

// AppendUint appends v as 8 bytes big-endian.
func AppendUint(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// AppendInt appends v so that negative numbers sort before positive ones.
func AppendInt(b []byte, v int64) []byte { return AppendUint(b, uint64(v)^(1<<63)) }

// ReadString decodes a string component from the front of b and returns
// the rest.
func ReadString(b []byte) (string, []byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", nil, ErrBadKey
		}
		switch b[i+1] {
		case 0xFF:
			out = append(out, 0)
			i++
		case 0x01:
			return string(out), b[i+2:], nil
		default:
			return "", nil, ErrBadKey
		}
	}
	return "", nil, ErrBadKey
}

// ReadUint decodes an unsigned component.
func ReadUint(b []byte) (uint64, []byte, error) {
	if len(b) < 8 {
		return 0, nil, ErrBadKey
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}

// ReadInt decodes a signed component.
func ReadInt(b []byte) (int64, []byte, error) {
	u, rest, err := ReadUint(b)
	return int64(u ^ (1 << 63)), rest, err
}

func key(tag byte, parts ...string) []byte {
	n := 1
	for _, p := range parts {
		n += len(p) + 2
	}
	b := make([]byte, 1, n+16) // room for a trailing number without regrowing
	b[0] = tag
	for _, p := range parts {
		b = AppendString(b, p)
	}
	return b
}

// LinkKey identifies a graph link by all its fields (links have no id):
// source graph, content source ("" = ingested content), linked graph.
func LinkKey(ns, graph, source, linked string) []byte {
	return key(TagLink, ns, graph, source, linked)
}

// MetaKey is the key of a meta value.
func MetaKey(name string) []byte { return key(TagMeta, name) }

func NamespaceKey(ns string) []byte    { return key(TagNamespace, ns) }
func GraphKey(ns, graph string) []byte { return key(TagGraph, ns, graph) }
func GraphPrefix(ns string) []byte     { return key(TagGraph, ns) }
func LinkPrefix(ns string) []byte      { return key(TagLink, ns) }
func ExecutorKey(id string) []byte     { return key(TagExecutor, id) }
func NodeKey(id string) []byte         { return key(TagNode, id) }
func ContentKey(ns, id string) []byte  { return key(TagContent, ns, id) }
func ContentPrefix(ns string) []byte   { return key(TagContent, ns) }
func ChildKey(ns, parent, child string) []byte {
	return key(TagChild, ns, parent, child)
}
func ChildPrefix(ns, parent string) []byte { return key(TagChild, ns, parent) }
func TaskKey(id string) []byte             { return key(TagTask, id) }
func TaskByContentPrefix(ns, contentID string) []byte {
	return key(TagTaskByContent, ns, contentID)
}
func TaskByContentKey(ns, contentID, taskID string) []byte {
	return key(TagTaskByContent, ns, contentID, taskID)
}
func PendingPrefix(extractor string) []byte { return key(TagPending, extractor) }
func AssignedPrefix(executor string) []byte { return key(TagAssigned, executor) }
func PolicyStatsKey(ns, graph, policy string) []byte {
	return key(TagPolicyStats, ns, graph, policy)
}
func GCTaskKey(id string) []byte  { return key(TagGCTask, id) }
func RequestKey(id string) []byte { return key(TagRequest, id) }

// OldVersionKey is the key of a superseded content version.
func OldVersionKey(ns, id string, version uint64) []byte {
	return AppendUint(key(TagOldVersion, ns, id), version)
}

// OldVersionPrefix selects every superseded version of one id, ascending.
func OldVersionPrefix(ns, id string) []byte { return key(TagOldVersion, ns, id) }

// OffsetKey indexes a content version by its change offset (ContentSince).
func OffsetKey(ns string, offset uint64) []byte { return AppendUint(key(TagOffset, ns), offset) }

// OffsetPrefix selects a namespace's offsets, ascending.
func OffsetPrefix(ns string) []byte { return key(TagOffset, ns) }

// PendingKey orders one extractor's unassigned tasks FIFO (created_at, id),
// the order the scheduler allocates in.
func PendingKey(extractor string, createdAt int64, taskID string) []byte {
	return AppendString(AppendInt(key(TagPending, extractor), createdAt), taskID)
}

// AssignedKey orders one executor's unfinished tasks oldest first.
func AssignedKey(executor string, createdAt int64, taskID string) []byte {
	return AppendString(AppendInt(key(TagAssigned, executor), createdAt), taskID)
}

// ChangeKey is the key of an unprocessed state change, in id order.
func ChangeKey(id uint64) []byte { return AppendUint([]byte{TagChange}, id) }

// ChangedContentKey marks an unprocessed change of one content id.
func ChangedContentKey(ns, contentID string, changeID uint64) []byte {
	return AppendUint(key(TagChangedCont, ns, contentID), changeID)
}

// ChangedContentPrefix selects the unprocessed changes of one content id.
func ChangedContentPrefix(ns, contentID string) []byte { return key(TagChangedCont, ns, contentID) }

// RequestOrderKey is the FIFO position of a remembered request id.
func RequestOrderKey(seq uint64) []byte { return AppendUint([]byte{TagRequestOrder}, seq) }

// PrefixEnd is the smallest key greater than every key starting with p
// (the exclusive upper bound of a prefix scan); nil means no bound.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// TaskIDOfIndexKey returns the task id that ends a pending, assigned or
// task-by-content key; prefix is the scan prefix the key was found under.
func TaskIDOfIndexKey(k, prefix []byte) (string, error) {
	if len(k) < len(prefix) {
		return "", ErrBadKey
	}
	rest := k[len(prefix):]
	if k[0] == TagPending || k[0] == TagAssigned {
		if _, r, err := ReadInt(rest); err != nil {
			return "", err
		} else {
			rest = r
		}
	}
	id, tail, err := ReadString(rest)
	if err != nil || len(tail) != 0 {
		return "", ErrBadKey
	}
	return id, nil
}

// ChildIDOfKey returns the child id of a TagChild key found under
// ChildPrefix(ns, parent).
func ChildIDOfKey(k, prefix []byte) (string, error) {
	if len(k) < len(prefix) {
		return "", ErrBadKey
	}
	id, tail, err := ReadString(k[len(prefix):])
	if err != nil || len(tail) != 0 {
		return "", ErrBadKey
	}
	return id, nil
}
