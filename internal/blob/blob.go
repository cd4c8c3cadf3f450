// Package blob stores the bytes of content. The coordinator only ever sees a
// blob's URL, size and hash; the bytes live behind Store so the API server
// uses local disk (Disk) or an S3-compatible object store (S3) without
// changes to the callers.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// Info describes a stored blob.
type Info struct {
	URL    string // backend-specific, e.g. "file:///abs/path"
	Size   int64  // bytes written
	SHA256 string // lowercase hex of the bytes
}

// Store is a blob backend. Implementations must be safe for concurrent use.
type Store interface {
	// Put streams r into a new blob under key. The blob becomes visible only
	// when complete: a failed or cancelled Put leaves nothing behind. An
	// error from r is returned wrapped, so callers can errors.Is/As it.
	Put(ctx context.Context, key string, r io.Reader) (Info, error)
	// Open reads the blob at url (a URL returned by Put). A missing blob
	// yields an error matching ErrNotFound.
	Open(ctx context.Context, url string) (io.ReadCloser, error)
	// Delete removes the blob at url. Deleting a missing blob is not an
	// error, so GC can retry freely.
	Delete(ctx context.Context, url string) error
}

var (
	// ErrNotFound: no blob at that URL.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalidKey: the key could address something outside the store.
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrForeignURL: the URL does not belong to this store.
	ErrForeignURL = errors.New("blob url does not belong to this store")
	// ErrUnavailable: the storage service could not be reached or did not
	// answer in time (after retries). The operation may succeed later; the
	// API answers 503 so clients retry instead of treating it as a bug.
	ErrUnavailable = errors.New("blob storage unavailable")
)

// ValidateKey checks a blob key: slash-separated, non-empty segments, none of
// them "." or "..", no absolute path, no backslash, NUL or other control
// characters. Keys are built from user-supplied namespace and content ids, so
// they are treated as hostile; every backend applies the same rules so a key
// that works on disk also works on S3.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > 1024 {
		return fmt.Errorf("%w: longer than 1024 bytes", ErrInvalidKey)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w: %q is absolute", ErrInvalidKey, key)
	}
	for _, r := range key {
		if r == '\\' || r == 0 || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q contains a backslash, control or invalid character", ErrInvalidKey, key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// ctxReader fails reads once ctx is done, so a Put of a slow stream stops
// when its request is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
