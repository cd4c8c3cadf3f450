package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/indexify-go/indexify/internal/retry"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// maxErrorLen bounds the error text reported for a failed task; it ends up
// in the replicated state.
const maxErrorLen = 8 << 10

type finalOutcome int

const (
	uploadedSuccess finalOutcome = iota
	uploadedFailed
	rejected     // the API server says the task is no longer ours (404/409)
	uploadGaveUp // the result never got through
	abandoned    // cancelled by the coordinator or by shutdown
)

type uploadStatus int

const (
	uploadOK      uploadStatus = iota
	uploadGone                 // 404/409: reassigned or unknown
	uploadInvalid              // other 4xx: the server refuses this payload
	uploadFailed               // retries exhausted or cancelled
)

// childFile is the bytes of one child content.
type childFile struct {
	data []byte
	mime string
}

// process runs one task end to end and reports how it ended.
func (e *Executor) process(ent *taskEntry) finalOutcome {
	t, ctx := ent.task, ent.ctx
	log := e.log.With("task", t.GetId(), "extractor", t.GetExtractor())
	start := time.Now()
	res, files := e.execute(ctx, t)
	if ctx.Err() != nil {
		log.Info("task abandoned", "cancelled", ent.cancelled)
		return abandoned
	}
	if res.Outcome == wire.OutcomeFailed {
		log.Warn("task failed", "err", res.Error)
	}
	st, err := e.upload(ctx, t, res, files)
	if st == uploadInvalid && res.Outcome == wire.OutcomeSuccess {
		// The server refuses what the extractor produced (too large,
		// malformed). Reporting a failure lets the task finish instead
		// of hanging on this executor.
		log.Error("API server rejected the result; reporting the task failed", "err", err)
		res, files = failed("the API server rejected the result: "+err.Error()), nil
		st, err = e.upload(ctx, t, res, files)
	}
	switch {
	case ctx.Err() != nil:
		log.Info("task abandoned during upload", "cancelled", ent.cancelled)
		return abandoned
	case st == uploadOK:
		log.Info("task done", "outcome", res.Outcome, "children", len(res.Content), "took", time.Since(start).Round(time.Millisecond))
		if res.Outcome == wire.OutcomeSuccess {
			return uploadedSuccess
		}
		return uploadedFailed
	case st == uploadGone:
		log.Info("result dropped: the task is no longer assigned to this executor", "err", err)
		return rejected
	default:
		log.Error("could not upload the task result", "err", err)
		return uploadGaveUp
	}
}

// execute downloads the content and runs the extractor. Every problem
// becomes a failed result (the coordinator decides about retries); it
// returns a nil result only when ctx ended.
func (e *Executor) execute(ctx context.Context, t *pb.Task) (*wire.TaskResult, []childFile) {
	x, ok := e.extractors[t.GetExtractor()]
	if !ok {
		return failed(fmt.Sprintf("extractor %q is not offered by executor %s", t.GetExtractor(), e.cfg.ID)), nil
	}
	data, mime, err := e.download(ctx, t)
	if err != nil {
		return failed("download content: " + err.Error()), nil
	}
	out, err := runExtractor(ctx, x, Input{Task: t, Data: data, MimeType: mime, Params: json.RawMessage(t.GetInputParamsJson())})
	if ctx.Err() != nil {
		return failed("cancelled"), nil
	}
	if err != nil {
		return failed(err.Error()), nil
	}
	res, files := buildResult(out)
	if err := res.Validate(); err != nil {
		return failed(fmt.Sprintf("extractor %s produced an invalid result: %v", t.GetExtractor(), err)), nil
	}
	return res, files
}

// runExtractor shields the executor from a panicking extractor: the task
// fails, the process lives on.
func runExtractor(ctx context.Context, x Extractor, in Input) (out *Output, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("extractor %s panicked: %v", x.Describe().GetName(), r)
		}
	}()
	return x.Extract(ctx, in)
}

func failed(msg string) *wire.TaskResult {
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
		for len(msg) > 0 && !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return &wire.TaskResult{Outcome: wire.OutcomeFailed, Error: msg}
}

func buildResult(out *Output) (*wire.TaskResult, []childFile) {
	res := &wire.TaskResult{Outcome: wire.OutcomeSuccess}
	if out == nil {
		return res, nil
	}
	res.Features = featuresFromProto(out.Features)
	var files []childFile
	for i, c := range out.Contents {
		mime := c.MimeType
		if mime == "" {
			mime = "application/octet-stream"
		}
		res.Content = append(res.Content, wire.ResultContent{
			Index:    i,
			MimeType: mime,
			Labels:   c.Labels,
			Features: featuresFromProto(c.Features),
		})
		files = append(files, childFile{data: c.Data, mime: mime})
	}
	return res, files
}

func featuresFromProto(fs []*pb.Feature) []wire.ResultFeature {
	var out []wire.ResultFeature
	for _, f := range fs {
		if f != nil {
			out = append(out, wire.FeatureFromProto(f))
		}
	}
	return out
}

// download fetches the task's content version from the API server.
func (e *Executor) download(ctx context.Context, t *pb.Task) ([]byte, string, error) {
	u := e.api + "/namespaces/" + url.PathEscape(t.GetNamespace()) + "/content/" + url.PathEscape(t.GetContentId()) + "/download"
	if v := t.GetContentVersion(); v > 0 {
		u += "?version=" + strconv.FormatUint(v, 10)
	}
	var data []byte
	var ctype string
	err := e.retry(ctx, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return true, err
		}
		resp, err := e.http.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return !retryable(resp.StatusCode), statusError(resp)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxContentBytes+1))
		if err != nil {
			return false, err
		}
		if len(b) > MaxContentBytes {
			return true, fmt.Errorf("content larger than %d bytes", MaxContentBytes)
		}
		data, ctype = b, resp.Header.Get("Content-Type")
		return true, nil
	})
	if err != nil {
		return nil, "", err
	}
	mime := t.GetContent().GetMimeType()
	if mime == "" {
		mime = ctype
	}
	if mime == "" {
		mime = http.DetectContentType(data)
	}
	return data, mime, nil
}

// upload posts the result; see result.go for the protocol.
func (e *Executor) upload(ctx context.Context, t *pb.Task, res *wire.TaskResult, files []childFile) (uploadStatus, error) {
	body, ctype, err := encodeResult(res, files)
	if err != nil {
		return uploadInvalid, err
	}
	u := e.api + wire.ResultPath(e.cfg.ID, t.GetId())
	st := uploadFailed
	err = e.retry(ctx, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return true, err
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := e.http.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		switch code := resp.StatusCode; {
		case code >= 200 && code < 300:
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			st = uploadOK
			return true, nil
		case code == http.StatusNotFound || code == http.StatusConflict:
			st = uploadGone
			return true, statusError(resp)
		case retryable(code):
			return false, statusError(resp)
		default:
			st = uploadInvalid
			return true, statusError(resp)
		}
	})
	return st, err
}

// encodeResult builds the multipart body once, so retries resend the same
// bytes.
func encodeResult(res *wire.TaskResult, files []childFile) ([]byte, string, error) {
	j, err := json.Marshal(res)
	if err != nil {
		return nil, "", err
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField(wire.ResultField, string(j)); err != nil {
		return nil, "", err
	}
	for i, f := range files {
		name := wire.ContentPartName(i)
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+name+`"; filename="`+name+`"`)
		h.Set("Content-Type", headerSafe(f.mime))
		w, err := mw.CreatePart(h)
		if err != nil {
			return nil, "", err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, "", err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// headerSafe keeps an extractor-supplied mime type from injecting headers
// into the multipart body; the JSON carries the exact value anyway.
func headerSafe(mime string) string {
	if strings.ContainsFunc(mime, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "application/octet-stream"
	}
	return mime
}

// retry calls try until it reports done, HTTPAttempts tries pass, or ctx
// ends, sleeping with capped exponential backoff between tries. Each try
// gets its own RequestTimeout deadline.
func (e *Executor) retry(ctx context.Context, try func(context.Context) (done bool, err error)) error {
	backoff := e.cfg.HTTPBackoff
	var last error
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
		done, err := try(tctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if done {
			return err
		}
		last = err
		if attempt >= e.cfg.HTTPAttempts {
			return fmt.Errorf("gave up after %d tries: %w", attempt, last)
		}
		// Warn on every failed try: a task that cannot reach the API
		// server is otherwise silent for minutes (10 tries, each up to
		// RequestTimeout), and the operator needs to see why.
		e.log.Warn("request to the API server failed; retrying", "err", err, "try", attempt, "of", e.cfg.HTTPAttempts, "in", backoff)
		if !retry.Sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(backoff*2, maxHTTPBackoff)
	}
}

// retryable reports whether a status may succeed on a later try.
func retryable(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests || code == http.StatusRequestTimeout
}

// statusError describes a non-2xx answer with the start of its body (the
// API server explains errors there).
func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	msg := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if msg == "" {
		return errors.New(resp.Status)
	}
	return fmt.Errorf("%s: %s", resp.Status, msg)
}
