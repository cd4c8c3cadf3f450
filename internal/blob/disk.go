package blob

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// URLScheme prefixes the URLs of disk blobs: "file://" + absolute path.
const URLScheme = "file://"

// tmpPrefix marks in-progress writes; they live next to their final name so
// the closing rename stays on one filesystem and is atomic.
const tmpPrefix = ".tmp-"

// Disk stores blobs as files below one directory.
//
// All file access goes through an os.Root, so even a symlink planted inside
// the directory cannot make a read or delete reach a file outside it; key and
// URL validation reject escape attempts before that.
type Disk struct {
	dir  string // absolute, symlinks resolved: URLs are built from it
	root *os.Root
}

var _ Store = (*Disk)(nil)

// NewDisk opens (creating it if needed) a disk store rooted at dir.
func NewDisk(dir string) (*Disk, error) {
	if dir == "" {
		return nil, errors.New("blob: disk directory is empty")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("blob: create %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	// Resolve symlinks once so URLs are canonical and stable across restarts.
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", abs, err)
	}
	return &Disk{dir: abs, root: root}, nil
}

// Dir is the absolute directory holding the blobs.
func (d *Disk) Dir() string { return d.dir }

// Close releases the directory handle.
func (d *Disk) Close() error { return d.root.Close() }

// Put implements Store.
func (d *Disk) Put(ctx context.Context, key string, r io.Reader) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	rel := filepath.FromSlash(key)
	parent := filepath.Dir(rel)
	tmp := filepath.Join(parent, tmpPrefix+randomHex(16))

	f, err := d.createExclusive(parent, tmp)
	if err != nil {
		return Info{}, fmt.Errorf("blob: create %s: %w", key, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			d.root.Remove(tmp)
		}
	}()

	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx: ctx, r: r})
	if err != nil {
		return Info{}, fmt.Errorf("blob: write %s: %w", key, err)
	}
	// fsync before rename: after a crash the name must never point at
	// partially written bytes.
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("blob: sync %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return Info{}, fmt.Errorf("blob: close %s: %w", key, err)
	}
	if err := d.root.Rename(tmp, rel); err != nil {
		return Info{}, fmt.Errorf("blob: rename %s: %w", key, err)
	}
	done = true
	d.syncDir(parent)
	return Info{URL: URLScheme + filepath.Join(d.dir, rel), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// createExclusive creates the temp file, (re)creating its parent directory.
// A concurrent Delete may prune an empty directory while MkdirAll or
// OpenFile runs (ENOENT), hence the retry loop. os.Root.MkdirAll can also
// answer EEXIST when another Put creates the same directory at the same
// moment (seen in CI: "mkdirat ns/shared: file exists"); the directory is
// there then, so that is retried too.
func (d *Disk) createExclusive(parent, tmp string) (*os.File, error) {
	var err error
	for range 20 {
		if parent != "." {
			err = d.root.MkdirAll(parent, 0o755)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
		}
		if err == nil {
			var f *os.File
			f, err = d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err == nil {
				return f, nil
			}
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return nil, err
}

// syncDir makes the rename durable. Failure is not fatal: the data file is
// already synced and most filesystems persist the rename soon anyway.
func (d *Disk) syncDir(rel string) {
	if df, err := d.root.Open(rel); err == nil {
		df.Sync()
		df.Close()
	}
}

// Open implements Store.
func (d *Disk) Open(ctx context.Context, url string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rel, err := d.relPath(url)
	if err != nil {
		return nil, err
	}
	f, err := d.root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, url)
		}
		return nil, fmt.Errorf("blob: open %s: %w", url, err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, url)
	}
	return f, nil
}

// Delete implements Store.
func (d *Disk) Delete(ctx context.Context, url string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rel, err := d.relPath(url)
	if err != nil {
		return err
	}
	st, err := d.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blob: stat %s: %w", url, err)
	}
	if st.IsDir() {
		return fmt.Errorf("blob: %s is a directory, not a blob", url)
	}
	if err := d.root.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: delete %s: %w", url, err)
	}
	// Prune now-empty parents (namespace/content-id directories) so deleted
	// content leaves nothing behind; a non-empty directory stops the walk.
	for p := filepath.Dir(rel); p != "." && p != string(filepath.Separator); p = filepath.Dir(p) {
		if d.root.Remove(p) != nil {
			break
		}
	}
	return nil
}

// relPath maps a URL of this store to a path relative to its root, refusing
// anything that is not a canonical path strictly inside the directory.
func (d *Disk) relPath(url string) (string, error) {
	p, ok := strings.CutPrefix(url, URLScheme)
	if !ok || !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: %q", ErrForeignURL, url)
	}
	// Non-canonical forms ("a/../b", "//") are refused outright rather than
	// cleaned: Put never produces them.
	if filepath.Clean(p) != p {
		return "", fmt.Errorf("%w: %q is not canonical", ErrForeignURL, url)
	}
	rel, err := filepath.Rel(d.dir, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %q is outside %s", ErrForeignURL, url, d.dir)
	}
	if err := ValidateKey(filepath.ToSlash(rel)); err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrForeignURL, url, err)
	}
	return rel, nil
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	rand.Read(b) // never fails (crypto/rand panics internally if it cannot)
	return hex.EncodeToString(b)
}
