package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// S3URLScheme prefixes the URLs of S3 blobs: "s3://" + bucket + "/" + object.
const S3URLScheme = "s3://"

// smallPutLimit: blobs up to this size are sent as one PUT (one request,
// retried by the client library because the bytes are in memory); larger
// ones are streamed as a multipart upload. Most content (chunks, small
// documents) is far below it, and 1 MiB of buffer per upload is cheap.
const smallPutLimit = 1 << 20

// S3 stores blobs as objects in one bucket of an S3-compatible service.
//
// Why blobs are written under the caller's key and not copied to a key
// derived from their sha256: the API already makes every key unique per
// upload attempt (namespace/content-id/random), and an S3 object becomes
// visible only when its PUT or CompleteMultipartUpload succeeds — atomically,
// whole or not at all. So a failed or cancelled attempt leaves no object
// (its multipart upload is aborted), and a retried attempt writes a new,
// complete object; the coordinator then de-duplicates by (content id,
// sha256): an upload of bytes it already has gets created=false and its new
// object is deleted. A sha256-named object shared by several contents would
// need reference counting before GC could delete it, and a temp-key-then-
// server-side-copy scheme would write every byte twice. The sha256 is still
// computed while streaming and returned in Info, where the coordinator uses
// it; part checksums (CRC32C, added by the client library) let the server
// reject a part corrupted in transit.
type S3 struct {
	client   *minio.Client
	bucket   string
	prefix   string
	partSize uint64
	// opTimeout bounds one small operation (Open until the response
	// starts, Delete, bucket checks), the library's retries included.
	opTimeout time.Duration
}

var _ Store = (*S3)(nil)

// Bucket is the bucket the store writes to.
func (s *S3) Bucket() string { return s.bucket }

// ObjectName maps a blob key to the object name inside the bucket.
func (s *S3) ObjectName(key string) string { return s.prefix + key }

// URLFor is the URL Put returns for key.
func (s *S3) URLFor(key string) string { return S3URLScheme + s.bucket + "/" + s.prefix + key }

// Client is the underlying S3 client (for tests and tooling).
func (s *S3) Client() *minio.Client { return s.client }

// Put implements Store. Memory use is bounded by smallPutLimit plus one
// multipart part (S3Config.PartSize) whatever the blob's size.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	src := &hashingReader{r: ctxReader{ctx: ctx, r: r}, h: sha256.New()}
	var head bytes.Buffer
	n, err := io.CopyN(&head, src, smallPutLimit+1)
	if err != nil && !errors.Is(err, io.EOF) {
		return Info{}, fmt.Errorf("blob: read %s: %w", key, err)
	}
	obj := s.prefix + key
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: s.partSize}
	var up minio.UploadInfo
	if n <= smallPutLimit {
		up, err = s.client.PutObject(ctx, s.bucket, obj, bytes.NewReader(head.Bytes()), n, opts)
	} else {
		// Unknown length: the library fills one part buffer at a time and
		// aborts the multipart upload if anything fails.
		up, err = s.client.PutObject(ctx, s.bucket, obj, io.MultiReader(&head, src), -1, opts)
	}
	if src.err != nil {
		// The source failed (client went away, size limit, cancellation):
		// report that error, not the storage error it caused.
		return Info{}, fmt.Errorf("blob: read %s: %w", key, src.err)
	}
	if err != nil {
		return Info{}, s.classify(ctx, "put", obj, err)
	}
	if up.Size != src.n {
		// Never hand out a URL to an object that differs from what was read.
		s.Delete(context.WithoutCancel(ctx), s.URLFor(key))
		return Info{}, fmt.Errorf("blob: put %s: stored %d bytes, read %d", obj, up.Size, src.n)
	}
	return Info{URL: s.URLFor(key), Size: src.n, SHA256: hex.EncodeToString(src.h.Sum(nil))}, nil
}

// Open implements Store. The response body streams from S3; nothing is
// buffered beyond the HTTP client's read buffer.
func (s *S3) Open(ctx context.Context, url string) (io.ReadCloser, error) {
	obj, err := s.objectName(url)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The deadline covers getting the response started (with retries); the
	// body is then read under the caller's context only, since a large
	// download may legitimately take long.
	opCtx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(s.opTimeout, cancel)
	body, _, _, err := minio.Core{Client: s.client}.GetObject(opCtx, s.bucket, obj, minio.GetObjectOptions{})
	if !timer.Stop() || err != nil {
		cancel()
		if err == nil {
			body.Close()
			err = context.DeadlineExceeded
		}
		return nil, s.classify(ctx, "get", obj, err)
	}
	return &cancelOnClose{ReadCloser: body, cancel: cancel}, nil
}

// Delete implements Store. S3's DELETE of a missing object succeeds, so
// Delete is idempotent and GC can retry freely.
func (s *S3) Delete(ctx context.Context, url string) error {
	obj, err := s.objectName(url)
	if err != nil {
		return err
	}
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.client.RemoveObject(opCtx, s.bucket, obj, minio.RemoveObjectOptions{}); err != nil {
		return s.classify(ctx, "delete", obj, err)
	}
	return nil
}

// objectName maps a URL of this store to its object name, refusing other
// buckets, names outside the prefix and keys Put would never have written.
func (s *S3) objectName(url string) (string, error) {
	obj, ok := strings.CutPrefix(url, S3URLScheme+s.bucket+"/")
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrForeignURL, url)
	}
	key, ok := strings.CutPrefix(obj, s.prefix)
	if !ok {
		return "", fmt.Errorf("%w: %q is outside the prefix %q", ErrForeignURL, url, s.prefix)
	}
	if err := ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrForeignURL, url, err)
	}
	return obj, nil
}

// classify turns a client error into the package's errors: a missing
// object is ErrNotFound; network failures, timeouts and 5xx/throttling
// answers (left after the library's retries) are ErrUnavailable; the
// caller's own cancellation stays a context error. Anything else
// (AccessDenied, NoSuchBucket, ...) is a configuration problem and is
// returned as is.
func (s *S3) classify(ctx context.Context, op, obj string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("blob: %s %s: %w", op, obj, cerr)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch {
		case er.Code == minio.NoSuchKey || er.StatusCode == http.StatusNotFound && er.Code == "":
			return fmt.Errorf("%w: %s", ErrNotFound, S3URLScheme+s.bucket+"/"+obj)
		case er.StatusCode >= 500, er.StatusCode == http.StatusTooManyRequests, er.StatusCode == http.StatusRequestTimeout,
			er.Code == "SlowDown", er.Code == "RequestTimeout", er.Code == "InternalError", er.Code == "ServiceUnavailable":
			return fmt.Errorf("%w: %s %s: %v", ErrUnavailable, op, obj, err)
		case er.StatusCode != 0:
			return fmt.Errorf("blob: s3 %s %s: %w", op, obj, err)
		}
	}
	if isTLSError(err) {
		// A certificate problem is configuration (CA file, endpoint name),
		// not an outage: retrying later will not help.
		return fmt.Errorf("blob: s3 %s %s: %w", op, obj, err)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || isConnError(err) {
		return fmt.Errorf("%w: %s %s: %v", ErrUnavailable, op, obj, err)
	}
	return fmt.Errorf("blob: s3 %s %s: %w", op, obj, err)
}

// isConnError catches transport failures that the HTTP client reports as
// plain errors (connection reset or refused mid-request).
func isConnError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "server closed")
}

func isTLSError(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
		rerr tls.RecordHeaderError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) || errors.As(err, &rerr)
}

// hashingReader hashes and counts what it passes on and remembers the
// source's own error (io.EOF excluded).
type hashingReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		h.err = err
	}
	return n, err
}

// cancelOnClose releases the request context of a download when the
// caller closes it.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

func (s *S3) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}
