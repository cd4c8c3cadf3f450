package layout

// The state digest and the per-policy counters' value.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
)

// Digest is the replicated-state digest: SHA-256 over an ordered scan of
// every key and value (each length-prefixed, so pair boundaries count).
// Replicas that applied the same log to the same index have equal digests
// although their engines' files differ.
type Digest struct {
	h   hash.Hash
	buf []byte
}

// NewDigest starts an empty digest.
func NewDigest() *Digest { return &Digest{h: sha256.New()} }

// Add feeds the next key/value of the scan, in key order.
func (d *Digest) Add(k, v []byte) {
	d.buf = binary.AppendUvarint(d.buf[:0], uint64(len(k)))
	d.h.Write(d.buf)
	d.h.Write(k)
	d.buf = binary.AppendUvarint(d.buf[:0], uint64(len(v)))
	d.h.Write(d.buf)
	d.h.Write(v)
}

// Sum returns the digest of the pairs added so far.
func (d *Digest) Sum() [32]byte {
	var out [32]byte
	copy(out[:], d.h.Sum(nil))
	return out
}

// PolicyStats are the analytics counters stored under PolicyStatsKey.
type PolicyStats struct{ Pending, Success, Failure uint64 }

// EncodeStats is the value of a PolicyStatsKey.
func EncodeStats(s PolicyStats) []byte {
	b := make([]byte, 0, 24)
	b = binary.BigEndian.AppendUint64(b, s.Pending)
	b = binary.BigEndian.AppendUint64(b, s.Success)
	return binary.BigEndian.AppendUint64(b, s.Failure)
}

// DecodeStats reads a value written by EncodeStats.
func DecodeStats(b []byte) (PolicyStats, error) {
	if len(b) != 24 {
		return PolicyStats{}, errors.New("layout: policy stats value is not 24 bytes")
	}
	return PolicyStats{
		Pending: binary.BigEndian.Uint64(b),
		Success: binary.BigEndian.Uint64(b[8:]),
		Failure: binary.BigEndian.Uint64(b[16:]),
	}, nil
}
