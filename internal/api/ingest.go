package api

// Ingestion: multipart uploads, new versions and remote files all stream
// their bytes into the blob store (never buffering a whole file), then
// commit the metadata through CreateContent. A blob never outlives a failed
// commit, and a duplicate upload (same id, same bytes) drops its new blob.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/errcode"
	"github.com/indexify-go/indexify/internal/remotefetch"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	// formOverhead is what a multipart body may carry beyond the file
	// itself: part headers and the small `labels` field.
	formOverhead = 1 << 20
	// octetStream is the "unknown type" label; it triggers type detection.
	octetStream = "application/octet-stream"
)

var errTooLarge = errors.New("upload exceeds the size limit")

// limitedSource counts bytes read from an upload, fails once more than
// limit arrive, and remembers the source's own error so a failed blob Put
// can be blamed on the client (4xx) or on storage (5xx).
type limitedSource struct {
	r     io.Reader
	n     int64
	limit int64
	err   error
}

func (l *limitedSource) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.limit {
		l.err = errTooLarge
		return 0, l.err
	}
	if err != nil && err != io.EOF {
		l.err = err
	}
	return n, err
}

// stagedFile is a blob written for content whose metadata is not committed.
type stagedFile struct {
	info     blob.Info
	name     string
	mimeType string
}

// stage streams src into the blob store under a fresh key of the content.
// declaredType (may be empty) wins unless it is generic, then the file
// name's extension, then content sniffing decide the mime type.
// failCode is the error code used when reading src fails.
func (s *Server) stage(ctx context.Context, ns, contentID string, src io.Reader, declaredType, name, failCode string) (*stagedFile, error) {
	ls := &limitedSource{r: src, limit: s.cfg.MaxUploadBytes}
	br := bufio.NewReaderSize(ls, 512)
	mt := mediaType(declaredType)
	if mt == "" || mt == octetStream {
		if byExt := mediaType(mime.TypeByExtension(filepath.Ext(name))); byExt != "" {
			mt = byExt
		} else {
			head, _ := br.Peek(512) // a short or failed read still sniffs what arrived
			mt = mediaType(http.DetectContentType(head))
		}
	}
	key := ns + "/" + contentID + "/" + randomHex(8)
	info, err := s.cfg.Blob.Put(ctx, key, br)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(ls.err, errTooLarge), errors.As(ls.err, &mbe):
			return nil, tooLarge(s.cfg.MaxUploadBytes)
		case ls.err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case ls.err != nil:
			return nil, badRequest(failCode, "reading the file failed: %v", ls.err)
		case errors.Is(err, blob.ErrInvalidKey):
			return nil, badRequest(codeInvalidID, "%v", err)
		}
		return nil, fmt.Errorf("storing blob: %w", err)
	}
	s.countIngested(info.Size)
	if mt == "" {
		mt = octetStream
	}
	return &stagedFile{info: info, name: name, mimeType: mt}, nil
}

// mediaType strips parameters ("text/plain; charset=utf-8" -> "text/plain")
// so extractors' input mime types match exactly.
func mediaType(t string) string {
	if t == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(t)
	if err != nil {
		return ""
	}
	return mt
}

// discard deletes a staged blob. It runs even when the request was
// cancelled: the point is to leave no orphan behind.
func (s *Server) discard(ctx context.Context, url string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
	defer cancel()
	if err := s.cfg.Blob.Delete(ctx, url); err != nil {
		s.log.Warn("deleting staged blob failed; it is orphaned", "url", url, "err", err)
	}
}

// commitContents creates content metadata for staged blobs. On a definite
// failure every blob is deleted; blobs of duplicates (created=false) are
// deleted too. After an ambiguous failure (the write may have applied) a
// blob is kept if the coordinator references it: an orphan blob is better
// than metadata pointing at nothing.
func (s *Server) commitContents(ctx context.Context, contents []*pb.Content) ([]*pb.ContentRef, error) {
	// Once bytes are stored, finish the commit even if the client leaves:
	// an interrupted commit is the ambiguous case we want to avoid.
	ctx = context.WithoutCancel(ctx)
	reqID := newRequestID()
	resp, err := call(ctx, s, func(ctx context.Context) (*pb.CreateContentResponse, error) {
		return s.cfg.Coordinator.CreateContent(ctx, &pb.CreateContentRequest{Contents: contents, RequestId: reqID})
	})
	if err != nil {
		for _, c := range contents {
			if !errcode.NotApplied(err) && s.referenced(ctx, c) {
				continue
			}
			s.discard(ctx, c.GetStorageUrl())
		}
		return nil, err
	}
	refs := resp.GetContents()
	for i, c := range contents {
		// Refs come back in request order; without one the write's effect
		// is unknown, so the blob is kept.
		if i < len(refs) && refs[i].GetId() == c.GetId() && !refs[i].GetCreated() {
			s.discard(ctx, c.GetStorageUrl())
		}
	}
	return refs, nil
}

// referenced asks (linearizably) whether the coordinator's content points
// at this blob. When the answer is unknown it says yes, keeping the blob.
func (s *Server) referenced(ctx context.Context, c *pb.Content) bool {
	resp, err := call(ctx, s, func(ctx context.Context) (*pb.GetContentResponse, error) {
		return s.cfg.Coordinator.GetContent(ctx, &pb.GetContentRequest{
			Namespace: c.GetNamespace(), Ids: []string{c.GetId()}, Consistency: pb.ReadConsistency_READ_CONSISTENCY_LINEARIZABLE})
	})
	if status.Code(err) == codes.NotFound {
		return false
	}
	if err != nil {
		s.log.Warn("cannot tell whether a blob is referenced; keeping it", "url", c.GetStorageUrl(), "err", err)
		return true
	}
	for _, got := range resp.GetContents() {
		if got.GetStorageUrl() == c.GetStorageUrl() {
			return true
		}
	}
	return false
}

// multipartUpload is a received multipart body: the staged file and the
// optional labels field.
type multipartUpload struct {
	file      *stagedFile
	labels    map[string]string
	hasLabels bool
}

// receiveMultipart reads a multipart body with a `file` part (streamed to
// the blob store) and an optional `labels` part (a JSON object as text).
func (s *Server) receiveMultipart(w http.ResponseWriter, r *http.Request, ns, id string) (*multipartUpload, error) {
	limit := s.cfg.MaxUploadBytes
	if r.ContentLength > limit+formOverhead {
		return nil, tooLarge(limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+formOverhead)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, badRequest(codeInvalidMultipart, "expected a multipart/form-data body with a 'file' part: %v", err)
	}
	up := &multipartUpload{}
	ok := false
	defer func() {
		if !ok && up.file != nil {
			s.discard(r.Context(), up.file.info.URL)
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, tooLarge(limit)
			}
			return nil, badRequest(codeInvalidMultipart, "malformed multipart body: %v", err)
		}
		switch part.FormName() {
		case "file":
			if up.file != nil {
				return nil, badRequest(codeInvalidMultipart, "more than one 'file' part")
			}
			up.file, err = s.stage(r.Context(), ns, id, part, part.Header.Get("Content-Type"), part.FileName(), codeInvalidMultipart)
		case "labels":
			up.labels, up.hasLabels, err = readLabelsPart(part)
		default:
			_, err = io.Copy(io.Discard, part) // bounded by MaxBytesReader
			err = partReadError(err, limit)
		}
		part.Close()
		if err != nil {
			return nil, err
		}
	}
	if up.file == nil {
		return nil, badRequest(codeMissingFile, "multipart body has no 'file' part")
	}
	ok = true
	return up, nil
}

func readLabelsPart(part io.Reader) (map[string]string, bool, error) {
	b, err := io.ReadAll(io.LimitReader(part, maxJSONBody+1))
	if err != nil {
		return nil, false, badRequest(codeInvalidMultipart, "reading the labels field: %v", err)
	}
	if len(b) > maxJSONBody {
		return nil, false, tooLarge(maxJSONBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, false, nil // an empty field means "no labels", as for an absent one
	}
	var m map[string]json.RawMessage
	if err := unmarshalJSON(b, &m); err != nil {
		return nil, false, badRequest(codeInvalidJSON, "labels field must be a JSON object: %v", err)
	}
	l, err := labelsToProto(m)
	return l, true, err
}

// uploadFile: POST /namespaces/{ns}/extraction_graphs/{graph}/extract.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	id := r.URL.Query().Get("id")
	if id == "" {
		id = newContentID()
	} else if err := validateKind(kindContent, id); err != nil {
		return err
	}
	up, err := s.receiveMultipart(w, r, ns, id)
	if err != nil {
		return err
	}
	c := newContent(ns, id, up.file, up.labels, []string{graph})
	if _, err := s.commitContents(r.Context(), []*pb.Content{c}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentID{ContentID: id})
	return nil
}

// newContent is uploaded content as the API knows it. The fields the
// state machine owns (created_at, root_content_id, source "ingestion" by
// default, version) are left for it to set.
func newContent(ns, id string, f *stagedFile, labels map[string]string, graphs []string) *pb.Content {
	return &pb.Content{
		Id:         id,
		Namespace:  ns,
		Name:       f.name,
		MimeType:   f.mimeType,
		Labels:     labels,
		StorageUrl: f.info.URL,
		SizeBytes:  uint64(f.info.Size),
		Hash:       f.info.SHA256,
		GraphNames: graphs,
	}
}

// updateContent: PUT /namespaces/{ns}/content/{id} uploads a new version of
// existing content. It keeps the latest version's graphs, lineage and (unless
// a labels field is sent) labels.
func (s *Server) updateContent(w http.ResponseWriter, r *http.Request) error {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if err := validateIDs(kindNamespace, ns, kindContent, id); err != nil {
		return err
	}
	old, err := s.latestContent(r.Context(), readLevel(r), ns, id)
	if err != nil {
		return err
	}
	up, err := s.receiveMultipart(w, r, ns, id)
	if err != nil {
		return err
	}
	labels := old.GetLabels()
	if up.hasLabels {
		labels = up.labels
	}
	c := newContent(ns, id, up.file, labels, old.GetGraphNames())
	if c.Name == "" {
		c.Name = old.GetName()
	}
	// A new version keeps the old one's place: its source and parent (the
	// state machine derives the root from the parent).
	c.Source = old.GetSource()
	c.ParentId = old.GetParentId()
	c.SourceTaskId = old.GetSourceTaskId()
	refs, err := s.commitContents(r.Context(), []*pb.Content{c})
	if err != nil {
		return err
	}
	if len(refs) == 0 { // the write's version is unknown
		writeJSON(w, http.StatusOK, wire.ContentID{ContentID: id})
		return nil
	}
	writeJSON(w, http.StatusOK, wire.ContentVersion{ContentID: id, Created: refs[0].GetCreated(), Version: refs[0].GetVersion()})
	return nil
}

// ingestRemoteFile: POST /namespaces/{ns}/ingest_remote_file.
func (s *Server) ingestRemoteFile(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	var req wire.IngestRemoteFile
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	id := req.ID
	if id == "" {
		id = newContentID()
	} else if err := validateKind(kindContent, id); err != nil {
		return err
	}
	if len(req.ExtractionGraphNames) == 0 {
		return badRequest(codeInvalidArgument, "extraction_graph_names is empty")
	}
	for _, g := range req.ExtractionGraphNames {
		if err := validateKind(kindGraph, g); err != nil {
			return err
		}
	}
	u, err := url.Parse(req.URL)
	if err != nil || !u.IsAbs() {
		return badRequest(codeInvalidArgument, "url %q must be an absolute http or https URL", req.URL)
	}
	if err := remotefetch.CheckURL(u.Scheme, u.User != nil, u.Host); err != nil {
		return badRequest(codeInvalidArgument, "url %q must be an absolute http or https URL without user information", u.Redacted())
	}
	labels, err := labelsToProto(req.Labels)
	if err != nil {
		return err
	}
	if req.MimeType != "" && mediaType(req.MimeType) == "" {
		return badRequest(codeInvalidArgument, "mime_type %q is not a valid media type", req.MimeType)
	}

	hreq, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		return badRequest(codeInvalidArgument, "url %q is not a valid URL", u.Redacted())
	}
	resp, err := s.fetch.Do(hreq)
	if err != nil {
		return s.fetchError(r.Context(), u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return badRequest(codeRemoteFetch, "fetching %s failed: remote answered HTTP %d", u.Redacted(), resp.StatusCode)
	}
	if resp.ContentLength > s.cfg.MaxUploadBytes {
		return remoteTooLarge(s.cfg.MaxUploadBytes)
	}
	declared := req.MimeType
	if declared == "" {
		declared = resp.Header.Get("Content-Type")
	}
	name := path.Base(u.Path)
	if name == "/" || name == "." {
		name = u.Host
	}
	f, err := s.stage(r.Context(), ns, id, resp.Body, declared, name, codeRemoteFetch)
	if err != nil {
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.code == codeTooLarge:
			return remoteTooLarge(s.cfg.MaxUploadBytes)
		case errors.As(err, &ae) && ae.code == codeRemoteFetch:
			// The body broke off or timed out: as generic as a failed connect.
			return s.fetchError(r.Context(), u, ae)
		}
		return err
	}
	c := newContent(ns, id, f, labels, req.ExtractionGraphNames)
	if _, err := s.commitContents(r.Context(), []*pb.Content{c}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentID{ContentID: id})
	return nil
}

// fetchError answers a failed remote fetch without the transport's detail
// (which would tell closed, gRPC and Raft ports apart); the detail is logged.
func (s *Server) fetchError(ctx context.Context, u *url.URL, err error) error {
	switch remotefetch.Classify(ctx, err) {
	case ctx.Err():
		return ctx.Err()
	case remotefetch.ErrRefused:
		s.log.Info("remote fetch refused by policy", "url", u.Redacted(), "err", err)
		return badRequest(codeRemoteFetch, "fetching %s refused: its address is not allowed (see --remote-fetch-allow)", u.Redacted())
	}
	s.log.Info("remote fetch failed", "url", u.Redacted(), "err", err)
	return badRequest(codeRemoteFetch, "could not fetch %s", u.Redacted())
}

func remoteTooLarge(limit int64) *apiError {
	return newError(http.StatusRequestEntityTooLarge, codeTooLarge, "remote file exceeds the limit of %d bytes", limit)
}

// partReadError classifies a failure while reading a multipart part's body:
// the client's body was too large or malformed (truncated, a broken
// boundary), never a server fault. A fuzzer found the truncated case
// answering 500.
func partReadError(err error, limit int64) error {
	if err == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(limit)
	}
	return badRequest(codeInvalidMultipart, "malformed multipart body: %v", err)
}
