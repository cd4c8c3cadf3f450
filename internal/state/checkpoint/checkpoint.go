// Package checkpoint moves a state checkpoint between nodes as one byte
// stream and installs a received one by swapping directories.
//
// A checkpoint is a flat directory of files that no longer change (pebble's
// Checkpoint: hard links to its immutable sstables plus copies of its
// manifest, options and WAL). Sending it as files means neither side
// decodes a single record: a new follower writes bytes to disk and opens
// the result, so the cost of a snapshot follows the bytes, not the number
// of items, and no Go object per item is ever built.
//
// Stream (snapshot format 2):
//
//	Magic, uvarint(Format), uvarint(applied index)
//	per file, in name order: 'F', uvarint(len(name)), name, uvarint(size), size bytes
//	'E', uvarint(file count), SHA-256 over every byte before it
//
// Magic starts with a zero byte. A format-1 snapshot (internal/state's
// record stream) starts with the uvarint length of a non-empty record, which
// is never zero, so the first byte tells the two formats apart.
//
// A truncated or altered stream fails the count or the hash; the partly
// written directory is removed and the live state is untouched.
package checkpoint

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Magic opens every format-2 stream.
const Magic = "\x00IDXCKPT"

// Format is the snapshot format number of this stream.
const Format = 2

const (
	recFile byte = 'F'
	recEnd  byte = 'E'
)

// maxName bounds a file name read from a stream.
const maxName = 255

// IsCheckpoint reports whether a stream that starts with prefix is a
// checkpoint stream (prefix needs at least len(Magic) bytes to say yes).
func IsCheckpoint(prefix []byte) bool { return bytes.HasPrefix(prefix, []byte(Magic)) }

// Every function takes the file system the directories are on: vfs.Default
// for a data dir, or pebble's in-memory file system for a store kept in
// memory (tests, throwaway stores), so both move checkpoints the same way.

// Write streams every regular file of dir, in name order, to w, headed by
// the applied index the checkpoint holds. dir must be flat.
func Write(w io.Writer, fs vfs.FS, dir string, applied uint64) error {
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: read %s: %w", dir, err)
	}
	for _, name := range names {
		st, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("checkpoint: %s: %s is not a regular file", dir, name)
		}
	}
	sort.Strings(names)

	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	var num [binary.MaxVarintLen64]byte
	uvarint := func(v uint64) { bw.Write(num[:binary.PutUvarint(num[:], v)]) }
	bw.WriteString(Magic)
	uvarint(Format)
	uvarint(applied)
	for _, name := range names {
		if err := writeFile(bw, uvarint, fs, fs.PathJoin(dir, name), name); err != nil {
			return err
		}
	}
	bw.WriteByte(recEnd)
	uvarint(uint64(len(names)))
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: write: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("checkpoint: write: %w", err)
	}
	return nil
}

func writeFile(bw *bufio.Writer, uvarint func(uint64), fs vfs.FS, path, name string) error {
	f, err := fs.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	bw.WriteByte(recFile)
	uvarint(uint64(len(name)))
	bw.WriteString(name)
	uvarint(uint64(st.Size()))
	// The files of a checkpoint do not change, so the size read above is
	// the size copied; a file that shrank anyway fails here, not silently.
	if n, err := io.CopyN(bw, f, st.Size()); err != nil {
		return fmt.Errorf("checkpoint: copy %s (%d of %d bytes): %w", name, n, st.Size(), err)
	}
	return nil
}

// hashReader hashes every byte it hands out, so the end record can be
// checked against everything before it.
type hashReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (hr *hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	return n, err
}

func (hr *hashReader) ReadByte() (byte, error) {
	b, err := hr.r.ReadByte()
	if err == nil {
		hr.h.Write([]byte{b})
	}
	return b, err
}

// Read writes the checkpoint streamed by r into dir, which must not exist,
// and returns the applied index the stream's header names. The files go to
// dir.part first, each synced; only a complete, verified stream is renamed
// to dir, so dir existing means the whole checkpoint is on disk. On any
// error nothing is left behind.
func Read(r io.Reader, fs vfs.FS, dir string) (applied uint64, err error) {
	if exists(fs, dir) {
		return 0, fmt.Errorf("checkpoint: %s already exists", dir)
	}
	part := dir + ".part"
	if err := fs.RemoveAll(part); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	if err := fs.MkdirAll(part, 0o700); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer func() {
		if err != nil {
			fs.RemoveAll(part)
		}
	}()
	if applied, err = readInto(r, fs, part); err != nil {
		return 0, err
	}
	if err := fs.Rename(part, dir); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	return applied, SyncDir(fs, fs.PathDir(dir))
}

// SyncDir makes the creations, renames and removals inside dir durable.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: open %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: sync %s: %w", dir, err)
	}
	return nil
}

func readInto(r io.Reader, fs vfs.FS, dir string) (applied uint64, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	hr := &hashReader{r: br, h: sha256.New()}
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(hr, magic); err != nil || string(magic) != Magic {
		return 0, errors.New("checkpoint: not a checkpoint stream")
	}
	format, err := binary.ReadUvarint(hr)
	if err != nil {
		return 0, truncated(err)
	}
	if format != Format {
		return 0, fmt.Errorf("checkpoint: unsupported format %d", format)
	}
	if applied, err = binary.ReadUvarint(hr); err != nil {
		return 0, truncated(err)
	}
	seen := map[string]bool{}
	for {
		kind, err := hr.ReadByte()
		if err != nil {
			return 0, truncated(err)
		}
		switch kind {
		case recFile:
			name, err := readFile(hr, fs, dir, seen)
			if err != nil {
				return 0, err
			}
			seen[name] = true
		case recEnd:
			count, err := binary.ReadUvarint(hr)
			if err != nil {
				return 0, truncated(err)
			}
			want := hr.h.Sum(nil)
			got := make([]byte, sha256.Size)
			if _, err := io.ReadFull(br, got); err != nil {
				return 0, truncated(err)
			}
			if count != uint64(len(seen)) || !bytes.Equal(got, want) {
				return 0, errors.New("checkpoint: stream does not match its end record (corrupt)")
			}
			return applied, SyncDir(fs, dir)
		default:
			return 0, fmt.Errorf("checkpoint: unknown record kind %#x (corrupt stream)", kind)
		}
	}
}

func readFile(hr *hashReader, fs vfs.FS, dir string, seen map[string]bool) (string, error) {
	n, err := binary.ReadUvarint(hr)
	if err != nil {
		return "", truncated(err)
	}
	if n == 0 || n > maxName {
		return "", fmt.Errorf("checkpoint: file name of %d bytes (corrupt stream)", n)
	}
	nb := make([]byte, n)
	if _, err := io.ReadFull(hr, nb); err != nil {
		return "", truncated(err)
	}
	name := string(nb)
	if !validName(name) || seen[name] {
		return "", fmt.Errorf("checkpoint: bad or repeated file name %q", name)
	}
	size, err := binary.ReadUvarint(hr)
	if err != nil {
		return "", truncated(err)
	}
	path := fs.PathJoin(dir, name)
	if exists(fs, path) {
		return "", fmt.Errorf("checkpoint: %s already exists", path)
	}
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := io.CopyN(f, hr, int64(size)); err != nil {
		f.Close()
		return "", truncated(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("checkpoint: sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return name, nil
}

// validName accepts plain file names only: nothing that could leave dir.
func validName(name string) bool {
	return name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00") && filepath.Base(name) == name
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("checkpoint: truncated stream: %w", err)
}

// Install makes the fully received directory next the live one: live is
// renamed to live.old, next to live, the parent directory is synced, then
// live.old is removed. A crash in between is finished by Recover.
func Install(fs vfs.FS, next, live string) error {
	old := live + ".old"
	if err := fs.RemoveAll(old); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if exists(fs, live) {
		if err := fs.Rename(live, old); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := fs.Rename(next, live); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := SyncDir(fs, fs.PathDir(live)); err != nil {
		return err
	}
	if err := fs.RemoveAll(old); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Recover finishes or undoes an Install that a crash interrupted, before
// live is opened. next is where Read put a received checkpoint (complete,
// or it would not exist): next beside a missing live means the crash fell
// between Install's two renames, so next becomes live; next beside live is
// a received checkpoint never installed and is deleted, as are a partial
// receive (next.part) and a leftover live.old.
func Recover(fs vfs.FS, next, live string) error {
	old := live + ".old"
	if !exists(fs, live) {
		switch {
		case exists(fs, next):
			if err := fs.Rename(next, live); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		case exists(fs, old):
			if err := fs.Rename(old, live); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
		if err := SyncDir(fs, fs.PathDir(live)); err != nil {
			return err
		}
	}
	for _, p := range []string{next, next + ".part", old} {
		if err := fs.RemoveAll(p); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

func exists(fs vfs.FS, p string) bool {
	_, err := fs.Stat(p)
	return err == nil
}
