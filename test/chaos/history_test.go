package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"sync"
)

// historyTail reads the client's JSON-lines history incrementally: the
// nemesis polls it to see when writes succeed again after a heal.
type historyTail struct {
	path string
	mu   sync.Mutex
	off  int64
	rest []byte
	ops  []op
}

// poll reads complete lines appended since the last call.
func (h *historyTail) poll() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, err := os.Open(h.path)
	if err != nil {
		return h.ops
	}
	defer f.Close()
	if _, err := f.Seek(h.off, io.SeekStart); err != nil {
		return h.ops
	}
	b, _ := io.ReadAll(f)
	h.off += int64(len(b))
	buf := append(h.rest, b...)
	last := bytes.LastIndexByte(buf, '\n')
	if last < 0 {
		h.rest = buf
		return h.ops
	}
	sc := bufio.NewScanner(bytes.NewReader(buf[:last+1]))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var o op
		if json.Unmarshal(sc.Bytes(), &o) == nil {
			h.ops = append(h.ops, o)
		}
	}
	h.rest = append([]byte(nil), buf[last+1:]...)
	return h.ops
}

// firstWriteOKAfter returns the return time of the earliest successful
// mutation (label write or ingest) that returned at or after t, or 0.
func firstWriteOKAfter(ops []op, t int64) int64 {
	var best int64
	for _, o := range ops {
		if (o.Kind == "write" || o.Kind == "ingest") && o.Res == resOK && o.Ret >= t {
			if best == 0 || o.Ret < best {
				best = o.Ret
			}
		}
	}
	return best
}

// countOK counts successful mutations.
func countOK(ops []op) int {
	n := 0
	for _, o := range ops {
		if (o.Kind == "write" || o.Kind == "ingest") && o.Res == resOK {
			n++
		}
	}
	return n
}

// writesOKBetween counts successful mutations that returned in [from, to].
func writesOKBetween(ops []op, from, to int64) int {
	n := 0
	for _, o := range ops {
		if (o.Kind == "write" || o.Kind == "ingest") && o.Res == resOK && o.Ret >= from && o.Ret <= to {
			n++
		}
	}
	return n
}
