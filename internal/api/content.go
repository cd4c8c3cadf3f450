package api

// Content reads and small content writes (labels, delete), tasks, /wait and
// the event stream of new content.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/indexify-go/indexify/internal/blob"
	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/state"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// sseKeepAlive is how often an idle event stream sends a comment line, so
// proxies keep the connection and a vanished client is noticed.
const sseKeepAlive = 15 * time.Second

// latestContent returns the live latest version of a content id, or 404.
func (s *Server) latestContent(ctx context.Context, level pb.ReadConsistency, ns, id string) (*pb.Content, error) {
	resp, err := read(ctx, s, level, func(ctx context.Context, level pb.ReadConsistency) (*pb.GetContentResponse, error) {
		return s.cfg.Coordinator.GetContent(ctx, &pb.GetContentRequest{Namespace: ns, Ids: []string{id}, Consistency: level})
	})
	if err != nil {
		return nil, err
	}
	var best *pb.Content
	for _, c := range resp.GetContents() {
		if c.GetId() == id && (best == nil || c.GetVersion() > best.GetVersion()) {
			best = c
		}
	}
	if best == nil || best.GetTombstoned() {
		return nil, notFound("content %q not found in namespace %q", id, ns)
	}
	return best, nil
}

// listContent: GET .../extraction_graphs/{graph}/content.
func (s *Server) listContent(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	q := r.URL.Query()
	req := &pb.ListContentRequest{Namespace: ns, GraphName: graph, Source: q.Get("source"), LabelsFilter: q["labels_filter"]}
	if req.Source != "" && req.Source != state.SourceIngestion {
		if err := validateName("source", req.Source); err != nil {
			return err
		}
	}
	if _, err := labels.Parse(req.LabelsFilter); err != nil {
		return badRequest(codeInvalidFilter, "invalid labels_filter: %v", err)
	}
	var err error
	if req.ParentId, err = optionalID(r, "parent_id", kindContent); err != nil {
		return err
	}
	if req.IngestedContentId, err = optionalID(r, "ingested_content_id", kindContent); err != nil {
		return err
	}
	if req.StartId, err = optionalID(r, "start_id", kindContent); err != nil {
		return err
	}
	if req.Limit, err = queryLimit(r); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListContentResponse, error) {
		req.Consistency = level
		return s.cfg.Coordinator.ListContent(ctx, req)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentList{ContentList: toContentList(resp.GetContents()), Total: resp.GetTotal()})
	return nil
}

// contentMetadata: GET /namespaces/{ns}/content/{id}/metadata.
func (s *Server) contentMetadata(w http.ResponseWriter, r *http.Request) error {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if err := validateIDs(kindNamespace, ns, kindContent, id); err != nil {
		return err
	}
	c, err := s.latestContent(r.Context(), readLevel(r), ns, id)
	if err != nil {
		return err
	}
	rows, err := s.structuredMetadata(r.Context(), readLevel(r), ns, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentMetadata{ContentMetadata: *toContentJSON(c), Metadata: rows})
	return nil
}

// downloadContent: GET /namespaces/{ns}/content/{id}/download[?version=N].
func (s *Server) downloadContent(w http.ResponseWriter, r *http.Request) error {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if err := validateIDs(kindNamespace, ns, kindContent, id); err != nil {
		return err
	}
	var version uint64
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return badRequest(codeInvalidArgument, "version %q is not a positive integer", v)
		}
		version = n
	}
	c, err := s.latestContent(r.Context(), readLevel(r), ns, id)
	if err != nil {
		return err
	}
	if version != 0 && version != c.GetVersion() {
		if c, err = s.olderVersion(r.Context(), readLevel(r), c, version); err != nil {
			return err
		}
	}
	rc, err := s.cfg.Blob.Open(r.Context(), c.GetStorageUrl())
	if err != nil {
		if errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrForeignURL) {
			s.log.Warn("content blob unavailable", "namespace", ns, "id", id, "url", c.GetStorageUrl(), "err", err)
			return notFound("the bytes of content %q are not available on this server", id)
		}
		return fmt.Errorf("opening blob: %w", err)
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", c.GetMimeType())
	if c.GetMimeType() == "" {
		h.Set("Content-Type", octetStream)
	}
	h.Set("Content-Length", strconv.FormatUint(c.GetSizeBytes(), 10))
	setDownloadSafety(h, c.GetMimeType(), c.GetName())
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// Headers are gone; all we can do is log and cut the response.
		s.log.Warn("download interrupted", "namespace", ns, "id", id, "err", err)
	}
	return nil
}

// setDownloadSafety keeps uploaded bytes from running as a page of the API's
// origin: browsers must not sniff another type, scripts and plugins are
// off, and anything a browser would render actively (HTML, SVG, XML, JS)
// is an attachment even without a file name.
func setDownloadSafety(h http.Header, mimeType, name string) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	switch {
	case name != "":
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	case activeType(mimeType):
		h.Set("Content-Disposition", "attachment")
	}
}

// activeType reports whether a browser may execute or render a type as a
// document with scripts.
func activeType(mt string) bool {
	mt = mediaType(mt)
	switch {
	case mt == "", mt == "text/html", mt == "application/xhtml+xml", mt == "image/svg+xml",
		mt == "text/xml", mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		strings.Contains(mt, "javascript"), strings.Contains(mt, "ecmascript"),
		mt == "application/pdf", mt == "text/xsl", mt == "application/x-shockwave-flash":
		return true
	}
	return false
}

// olderVersion fetches a superseded version of content: executors still
// working on an old version's task download exactly that version.
func (s *Server) olderVersion(ctx context.Context, level pb.ReadConsistency, latest *pb.Content, version uint64) (*pb.Content, error) {
	ns, id := latest.GetNamespace(), latest.GetId()
	resp, err := read(ctx, s, level, func(ctx context.Context, level pb.ReadConsistency) (*pb.GetContentResponse, error) {
		return s.cfg.Coordinator.GetContent(ctx, &pb.GetContentRequest{Namespace: ns, Ids: []string{id}, Version: version, Consistency: level})
	})
	if status.Code(err) == codes.NotFound {
		return nil, notFound("version %d of content %q not found (latest is %d)", version, id, latest.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	for _, c := range resp.GetContents() {
		if c.GetId() == id && c.GetVersion() == version && c.GetStorageUrl() != "" {
			return c, nil
		}
	}
	return nil, notFound("version %d of content %q not found (latest is %d)", version, id, latest.GetVersion())
}

// deleteContent: DELETE /namespaces/{ns}/content {"content_ids": [...]}.
func (s *Server) deleteContent(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	var req wire.ContentIDs
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.ContentIDs) == 0 {
		return badRequest(codeInvalidArgument, "content_ids is empty")
	}
	for _, id := range req.ContentIDs {
		if err := validateKind(kindContent, id); err != nil {
			return err
		}
	}
	reqID := newRequestID()
	if _, err := call(r.Context(), s, func(ctx context.Context) (*pb.TombstoneContentResponse, error) {
		return s.cfg.Coordinator.TombstoneContent(ctx, &pb.TombstoneContentRequest{Namespace: ns, ContentIds: req.ContentIDs, RequestId: reqID})
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentIDs{ContentIDs: req.ContentIDs})
	return nil
}

// updateLabels: PUT /namespaces/{ns}/content/{id}/labels {"labels": {...}}
// replaces the content's labels.
func (s *Server) updateLabels(w http.ResponseWriter, r *http.Request) error {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if err := validateIDs(kindNamespace, ns, kindContent, id); err != nil {
		return err
	}
	var req wire.LabelsUpdate
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Labels == nil { // missing or null; {} clears the labels
		return badRequest(codeInvalidArgument, "body must have a \"labels\" object")
	}
	l, err := labelsToProto(req.Labels)
	if err != nil {
		return err
	}
	reqID := newRequestID()
	if _, err := call(r.Context(), s, func(ctx context.Context) (*pb.UpdateLabelsResponse, error) {
		return s.cfg.Coordinator.UpdateLabels(ctx, &pb.UpdateLabelsRequest{Namespace: ns, ContentId: id, Labels: l, RequestId: reqID})
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentID{ContentID: id})
	return nil
}

// waitContent: GET /namespaces/{ns}/content/{id}/wait blocks until every
// task of the content tree is finished. Each WaitContent call is bounded by
// RequestTimeout and repeated, so a coordinator failover in between only
// costs one retry; the wait ends when the client leaves or the server stops.
func (s *Server) waitContent(w http.ResponseWriter, r *http.Request) error {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	if err := validateIDs(kindNamespace, ns, kindContent, id); err != nil {
		return err
	}
	ctx, cancel := s.untilStopping(r.Context())
	defer cancel()
	for {
		resp, err := call(ctx, s, func(ctx context.Context) (*pb.WaitContentResponse, error) {
			return s.cfg.Coordinator.WaitContent(ctx, &pb.WaitContentRequest{Namespace: ns, ContentId: id})
		})
		switch {
		case err == nil && resp.GetDone():
			writeJSON(w, http.StatusOK, wire.ContentDone{ContentID: id, Done: true})
			return nil
		case ctx.Err() != nil:
			if r.Context().Err() == nil {
				return newError(http.StatusServiceUnavailable, codeUnavailable, "server is shutting down")
			}
			return ctx.Err()
		case err == nil, status.Code(err) == codes.DeadlineExceeded:
			// Not done within this call's deadline: ask again.
		default:
			return err
		}
	}
}

// untilStopping derives a context that also ends when graceful shutdown
// starts, for handlers that would otherwise hold the server open.
func (s *Server) untilStopping(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// contentTree: GET .../extraction_graphs/{graph}/content/{id}/extraction_policies/{policy}.
// As in the original, the answer is the whole tree under the content; the
// client keeps the items whose source is the policy.
func (s *Server) contentTree(w http.ResponseWriter, r *http.Request) error {
	ns, graph, id, policy := r.PathValue("ns"), r.PathValue("graph"), r.PathValue("id"), r.PathValue("policy")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph, kindContent, id, kindPolicy, policy); err != nil {
		return err
	}
	if err := s.requirePolicy(r.Context(), readLevel(r), ns, graph, policy); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.GetContentTreeResponse, error) {
		return s.cfg.Coordinator.GetContentTree(ctx, &pb.GetContentTreeRequest{Namespace: ns, GraphName: graph, ContentId: id, Consistency: level})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ContentTree{ContentTreeMetadata: toContentList(resp.GetContents())})
	return nil
}

// listTasks: GET .../extraction_policies/{policy}/tasks.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	ns, graph, policy := r.PathValue("ns"), r.PathValue("graph"), r.PathValue("policy")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph, kindPolicy, policy); err != nil {
		return err
	}
	req := &pb.ListTasksRequest{Namespace: ns, GraphName: graph, Policy: policy}
	var err error
	if req.ContentId, err = optionalID(r, "content_id", kindContent); err != nil {
		return err
	}
	if req.StartId, err = optionalID(r, "start_id", "start_id"); err != nil {
		return err
	}
	if req.Limit, err = queryLimit(r); err != nil {
		return err
	}
	if err := s.requirePolicy(r.Context(), readLevel(r), ns, graph, policy); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListTasksResponse, error) {
		req.Consistency = level
		return s.cfg.Coordinator.ListTasks(ctx, req)
	})
	if err != nil {
		return err
	}
	tasks := make([]taskJSON, 0, len(resp.GetTasks()))
	for _, t := range resp.GetTasks() {
		tasks = append(tasks, toTaskJSON(t))
	}
	writeJSON(w, http.StatusOK, wire.Tasks{Tasks: tasks, Total: resp.GetTotal()})
	return nil
}

// streamContent: GET .../extraction_policies/{policy}/content/stream is a
// Server-Sent Events stream of the content the policy produces. Each event
// is `id: <change offset>` and `data: <content metadata JSON>`. The stream
// starts after the offset in the Last-Event-ID header (set by reconnecting
// EventSource clients) or the `after` query parameter; without either it
// replays the policy's existing content first.
func (s *Server) streamContent(w http.ResponseWriter, r *http.Request) error {
	ns, graph, policy := r.PathValue("ns"), r.PathValue("graph"), r.PathValue("policy")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph, kindPolicy, policy); err != nil {
		return err
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var offset uint64
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return badRequest(codeInvalidArgument, "event offset %q is not a non-negative integer", after)
		}
		offset = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("response writer cannot stream")
	}
	if err := s.requirePolicy(r.Context(), readLevel(r), ns, graph, policy); err != nil {
		return err
	}
	ctx, cancel := s.untilStopping(r.Context())
	defer cancel()
	stream, err := s.cfg.Coordinator.WatchContent(ctx, &pb.WatchContentRequest{Namespace: ns, GraphName: graph, Policy: policy, AfterOffset: offset})
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would otherwise buffer events
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	// Recv blocks, so it runs in its own goroutine; the loop below
	// interleaves events with keep-alives.
	type item struct {
		c   *pb.Content
		err error
	}
	items := make(chan item)
	go func() {
		for {
			c, err := stream.Recv()
			select {
			case items <- item{c, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	keepAlive := time.NewTicker(sseKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepAlive.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			flusher.Flush()
		case it := <-items:
			if it.err != nil {
				if ctx.Err() == nil && it.err != io.EOF {
					ae := toAPIError(it.err)
					b, _ := json.Marshal(errorBody{Error: ae.msg, Code: ae.code})
					fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
					flusher.Flush()
				}
				return nil
			}
			b, err := json.Marshal(toContentJSON(it.c))
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", it.c.GetChangeOffset(), b); err != nil {
				return nil
			}
			flusher.Flush()
		}
	}
}
