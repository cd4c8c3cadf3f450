// Package apiclient is a small Go client of the API server's HTTP routes,
// used by the `indexify` CLI's client commands. It speaks the same JSON the
// server writes (internal/api/wire.go) and turns the server's error body
// into *Error.
package apiclient

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

	"github.com/indexify-go/indexify/internal/wire"
)

// Client talks to one API server.
type Client struct {
	base string
	http *http.Client
}

// New returns a client for an API server base URL (http://host:port).
func New(base string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://HOST[:PORT]", base)
	}
	// No overall timeout: uploads of large files and /wait are long; calls
	// are bounded by their contexts.
	return &Client{base: u.String(), http: &http.Client{Transport: http.DefaultTransport}}, nil
}

// Base is the server URL the client uses.
func (c *Client) Base() string { return c.base }

// Error is an error answer of the server.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d, %s)", e.Message, e.Status, e.Code)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func esc(s string) string { return url.PathEscape(s) }

// do sends one request and decodes a 2xx JSON answer into out (if non-nil).
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: answer is not the expected JSON: %w", method, path, err)
	}
	return nil
}

// errorFrom decodes the API's JSON error body (or uses the text).
func errorFrom(status int, b []byte) error {
	var eb wire.Error
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb.Error = strings.TrimSpace(string(b))
		if eb.Error == "" {
			eb.Error = http.StatusText(status)
		}
	}
	return &Error{Status: status, Code: eb.Code, Message: eb.Error}
}

// decodeError reads an error answer of a non-JSON route.
func decodeError(resp *http.Response, path string) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s: reading answer: %w", path, err)
	}
	return errorFrom(resp.StatusCode, b)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, "", out)
}

func (c *Client) sendJSON(ctx context.Context, method, path string, v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, bytes.NewReader(b), "application/json", out)
}

// Namespaces lists namespaces.
func (c *Client) Namespaces(ctx context.Context) ([]Namespace, error) {
	var out wire.Namespaces
	err := c.get(ctx, "/namespaces", &out)
	return out.Namespaces, err
}

// Namespace returns one namespace.
func (c *Client) Namespace(ctx context.Context, name string) (Namespace, error) {
	var out wire.NamespaceBody
	err := c.get(ctx, "/namespaces/"+esc(name), &out)
	return out.Namespace, err
}

// CreateNamespace creates a namespace.
func (c *Client) CreateNamespace(ctx context.Context, name string) error {
	return c.sendJSON(ctx, http.MethodPost, "/namespaces", map[string]string{"name": name}, nil)
}

// Graphs lists the extraction graphs of a namespace.
func (c *Client) Graphs(ctx context.Context, ns string) ([]Graph, error) {
	var out wire.Graphs
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/extraction_graphs", &out)
	return out.ExtractionGraphs, err
}

// Graph returns one extraction graph.
func (c *Client) Graph(ctx context.Context, ns, name string) (Graph, error) {
	var out Graph
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/extraction_graphs/"+esc(name), &out)
	return out, err
}

// CreateGraph creates a graph from a YAML or JSON spec (the server accepts
// both; YAML is a superset of JSON, so the spec is sent as YAML).
func (c *Client) CreateGraph(ctx context.Context, ns string, spec []byte) (Graph, error) {
	var out Graph
	err := c.do(ctx, http.MethodPost, "/namespaces/"+esc(ns)+"/extraction_graphs", bytes.NewReader(spec), "application/x-yaml", &out)
	return out, err
}

// DeleteGraph deletes an extraction graph.
func (c *Client) DeleteGraph(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, "/namespaces/"+esc(ns)+"/extraction_graphs/"+esc(name), nil, "", nil)
}

// ContentQuery filters a content listing.
type ContentQuery struct {
	Source   string // "ingestion" or a policy name
	ParentID string
	Labels   []string // key=value filter expressions
	StartID  string
	Limit    int
}

// Content lists the content of a graph.
func (c *Client) Content(ctx context.Context, ns, graph string, q ContentQuery) ([]Content, uint64, error) {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("source", q.Source)
	set("parent_id", q.ParentID)
	set("start_id", q.StartID)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	for _, l := range q.Labels {
		v.Add("labels_filter", l)
	}
	path := "/namespaces/" + esc(ns) + "/extraction_graphs/" + esc(graph) + "/content"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.ContentList
	err := c.get(ctx, path, &out)
	return out.ContentList, out.Total, err
}

// ContentMetadata returns one content's metadata.
func (c *Client) ContentMetadata(ctx context.Context, ns, id string) (Content, error) {
	var out wire.ContentMetadata
	err := c.get(ctx, "/namespaces/"+esc(ns)+"/content/"+esc(id)+"/metadata", &out)
	return out.ContentMetadata, err
}

// DeleteContent deletes content trees.
func (c *Client) DeleteContent(ctx context.Context, ns string, ids []string) error {
	return c.sendJSON(ctx, http.MethodDelete, "/namespaces/"+esc(ns)+"/content", wire.ContentIDs{ContentIDs: ids}, nil)
}

// WaitContent blocks until every task of the content tree has finished.
func (c *Client) WaitContent(ctx context.Context, ns, id string) error {
	return c.get(ctx, "/namespaces/"+esc(ns)+"/content/"+esc(id)+"/wait", nil)
}

// Upload sends one file as new content of a graph and returns its id.
// progress (may be nil) is called with the bytes of r sent so far.
func (c *Client) Upload(ctx context.Context, ns, graph, name string, r io.Reader, labels map[string]any, progress func(sent int64)) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeUpload(mw, name, r, labels, progress))
	}()
	var out wire.ContentID
	err := c.do(ctx, http.MethodPost, "/namespaces/"+esc(ns)+"/extraction_graphs/"+esc(graph)+"/extract", pr, mw.FormDataContentType(), &out)
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the writer if the server answered early
	return out.ContentID, err
}

func writeUpload(mw *multipart.Writer, name string, r io.Reader, labels map[string]any, progress func(int64)) error {
	if len(labels) > 0 {
		b, err := json.Marshal(labels)
		if err != nil {
			return err
		}
		if err := mw.WriteField("labels", string(b)); err != nil {
			return err
		}
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
	h.Set("Content-Type", "application/octet-stream")
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if progress != nil {
		r = &countingReader{r: r, fn: progress}
	}
	if _, err := io.Copy(part, r); err != nil {
		return err
	}
	return mw.Close()
}

type countingReader struct {
	r  io.Reader
	n  int64
	fn func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.fn(c.n)
	return n, err
}

// PageSize is the server's largest page (wire.MaxPageSize); the All
// methods ask for pages of this size.
const PageSize = wire.MaxPageSize

// ContentAll lists up to max items (0 = all) by paging with start_id: the
// server answers at most PageSize items per request.
func (c *Client) ContentAll(ctx context.Context, ns, graph string, q ContentQuery, max int) ([]Content, error) {
	var all []Content
	for {
		q.Limit = pageLimit(len(all), max)
		items, _, err := c.Content(ctx, ns, graph, q)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if len(items) < q.Limit || (max > 0 && len(all) >= max) {
			return all, nil
		}
		q.StartID = items[len(items)-1].ID
	}
}

// TasksAll lists up to max tasks of one policy (0 = all), paging like
// ContentAll.
func (c *Client) TasksAll(ctx context.Context, ns, graph, policy, contentID string, max int) ([]Task, error) {
	var all []Task
	start := ""
	for {
		limit := pageLimit(len(all), max)
		ts, _, err := c.tasksPage(ctx, ns, graph, policy, contentID, start, limit)
		if err != nil {
			return nil, err
		}
		all = append(all, ts...)
		if len(ts) < limit || (max > 0 && len(all) >= max) {
			return all, nil
		}
		start = ts[len(ts)-1].ID
	}
}

func pageLimit(have, max int) int {
	if max > 0 && max-have < PageSize {
		return max - have
	}
	return PageSize
}

// Tasks lists the tasks of one policy (optionally of one content): one
// page of at most limit (<= PageSize; 0 = the server's default page).
func (c *Client) Tasks(ctx context.Context, ns, graph, policy, contentID string, limit int) ([]Task, uint64, error) {
	return c.tasksPage(ctx, ns, graph, policy, contentID, "", limit)
}

func (c *Client) tasksPage(ctx context.Context, ns, graph, policy, contentID, startID string, limit int) ([]Task, uint64, error) {
	v := url.Values{}
	if contentID != "" {
		v.Set("content_id", contentID)
	}
	if startID != "" {
		v.Set("start_id", startID)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	path := "/namespaces/" + esc(ns) + "/extraction_graphs/" + esc(graph) + "/extraction_policies/" + esc(policy) + "/tasks"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out wire.Tasks
	err := c.get(ctx, path, &out)
	return out.Tasks, out.Total, err
}

// Executors lists registered executors.
func (c *Client) Executors(ctx context.Context) ([]Executor, error) {
	var out wire.Executors
	err := c.get(ctx, "/executors", &out)
	return out.Executors, err
}

// Cluster returns the coordinators' Raft status.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	var out ClusterStatus
	err := c.get(ctx, "/cluster", &out)
	return out, err
}
