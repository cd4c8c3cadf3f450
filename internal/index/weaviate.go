package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/go-openapi/strfmt"
	"github.com/google/uuid"
	"github.com/weaviate/weaviate-go-client/v5/weaviate"
	"github.com/weaviate/weaviate-go-client/v5/weaviate/auth"
	"github.com/weaviate/weaviate-go-client/v5/weaviate/fault"
	"github.com/weaviate/weaviate-go-client/v5/weaviate/filters"
	"github.com/weaviate/weaviate-go-client/v5/weaviate/graphql"
	"github.com/weaviate/weaviate/entities/models"
)

// Weaviate is the Store kept in a Weaviate server (or cluster): one class
// per index, objects with explicit vectors (no vectorizer). Any number of
// API servers may share one Weaviate. See DESIGN.md for the mapping.
type Weaviate struct {
	c *weaviate.Client

	mu     sync.Mutex
	schema map[string]Schema // class -> schema, of classes seen to exist
}

const (
	classPrefix = "Idx_"
	// Objects per batch request, and content ids per delete request.
	weaviateBatch = 500
	// The most neighbours one search fetches while a keep filter rejects
	// candidates (Weaviate's default QUERY_MAXIMUM_RESULTS).
	maxFetch = 10000
)

// uuidSpace is the namespace of the deterministic object UUIDs (UUIDv5 of
// namespace, index and content id): a retried upsert overwrites.
var uuidSpace = uuid.MustParse("6f2a4c1e-8d3b-5e7f-9a1c-2b4d6e8f0a13")

// WeaviateOption configures OpenWeaviate.
type WeaviateOption func(*weaviate.Config)

// WithAPIKey authenticates every request with a Weaviate API key (sent as
// a bearer token; AUTHENTICATION_APIKEY_ALLOWED_KEYS on the server).
func WithAPIKey(key string) WeaviateOption {
	return func(c *weaviate.Config) { c.AuthConfig = auth.ApiKey{Value: key} }
}

// OpenWeaviate connects to the Weaviate REST endpoint at rawURL
// (http://host:port); it waits for the server for up to startup.
func OpenWeaviate(rawURL string, opts ...WeaviateOption) (*Weaviate, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("index: weaviate URL %q: want http(s)://host:port", rawURL)
	}
	cfg := weaviate.Config{Host: u.Host, Scheme: u.Scheme}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := weaviate.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("index: weaviate at %s: %w", rawURL, err)
	}
	return &Weaviate{c: c, schema: map[string]Schema{}}, nil
}

// className maps (namespace, index) to a valid Weaviate class name; the
// real names are kept in the class description.
func className(ns, name string) string {
	h := sha256.Sum256([]byte(ns + "\x00" + name))
	return classPrefix + hex.EncodeToString(h[:16])
}

func objectID(ns, name, contentID string) string {
	return uuid.NewSHA1(uuidSpace, []byte(ns+"\x00"+name+"\x00"+contentID)).String()
}

func weaviateDistance(d string) string {
	switch d {
	case Dot:
		return "dot"
	case Euclidean:
		return "l2-squared"
	}
	return "cosine"
}

// score turns Weaviate's distance (lower is better) into our Score.
func score(dist string, d float64) float32 {
	switch dist {
	case Dot:
		return float32(-d) // distance = -dot
	case Euclidean:
		return float32(-math.Sqrt(math.Max(d, 0))) // distance = squared L2
	}
	return float32(1 - d) // distance = 1 - cosine similarity
}

func statusOf(err error) int {
	var we *fault.WeaviateClientError
	if errors.As(err, &we) {
		return we.StatusCode
	}
	return 0
}

// classSchema returns the schema of an index, asking Weaviate when this
// client has not seen the class yet.
func (w *Weaviate) classSchema(ctx context.Context, ns, name string) (string, Schema, error) {
	cls := className(ns, name)
	w.mu.Lock()
	s, ok := w.schema[cls]
	w.mu.Unlock()
	if ok {
		return cls, s, nil
	}
	c, err := w.c.Schema().ClassGetter().WithClassName(cls).Do(ctx)
	if statusOf(err) == 404 {
		return cls, Schema{}, fmt.Errorf("index %q in namespace %q: %w", name, ns, ErrNoIndex)
	}
	if err != nil {
		return cls, Schema{}, fmt.Errorf("index: weaviate: %w", err)
	}
	m, err := classMeta(c)
	if err != nil {
		return cls, Schema{}, err
	}
	s = Schema{Dim: m.Dim, Distance: m.Distance}
	w.mu.Lock()
	w.schema[cls] = s
	w.mu.Unlock()
	return cls, s, nil
}

func classMeta(c *models.Class) (meta, error) {
	var m meta
	if err := json.Unmarshal([]byte(c.Description), &m); err != nil {
		return m, fmt.Errorf("index: weaviate class %s has no index description: %w", c.Class, err)
	}
	return m, nil
}

// EnsureIndex implements Store.
func (w *Weaviate) EnsureIndex(ctx context.Context, ns, name string, s Schema) error {
	if err := validSchema(s); err != nil {
		return err
	}
	cls, have, err := w.classSchema(ctx, ns, name)
	if errors.Is(err, ErrNoIndex) {
		desc, _ := json.Marshal(meta{Namespace: ns, Name: name, Dim: s.Dim, Distance: s.Distance})
		noIndex := false
		field := "field"
		class := &models.Class{
			Class:           cls,
			Description:     string(desc),
			Vectorizer:      "none",
			VectorIndexType: "hnsw",
			VectorIndexConfig: map[string]any{
				"distance": weaviateDistance(s.Distance),
			},
			Properties: []*models.Property{
				{Name: "content_id", DataType: []string{"text"}, Tokenization: field},
				{Name: "root_content_id", DataType: []string{"text"}, Tokenization: field},
				{Name: "mime_type", DataType: []string{"text"}, Tokenization: field},
				{Name: "text", DataType: []string{"text"}},
				{Name: "labels_json", DataType: []string{"text"}, IndexFilterable: &noIndex, IndexSearchable: &noIndex},
				{Name: "namespace", DataType: []string{"text"}, Tokenization: field},
				{Name: "index", DataType: []string{"text"}, Tokenization: field},
			},
		}
		err = w.c.Schema().ClassCreator().WithClass(class).Do(ctx)
		if err == nil {
			w.mu.Lock()
			w.schema[cls] = s
			w.mu.Unlock()
			return nil
		}
		// Another API server may have created it meanwhile: compare.
		var again error
		if _, have, again = w.classSchema(ctx, ns, name); again != nil {
			return fmt.Errorf("index: weaviate: creating class for %q: %w", name, err)
		}
	} else if err != nil {
		return err
	}
	if have != s {
		return fmt.Errorf("index %q in namespace %q exists with dim %d distance %s, not dim %d distance %s",
			name, ns, have.Dim, have.Distance, s.Dim, s.Distance)
	}
	return nil
}

// DropIndex implements Store.
func (w *Weaviate) DropIndex(ctx context.Context, ns, name string) error {
	cls := className(ns, name)
	w.mu.Lock()
	delete(w.schema, cls)
	w.mu.Unlock()
	err := w.c.Schema().ClassDeleter().WithClassName(cls).Do(ctx)
	if err != nil && statusOf(err) != 404 {
		return fmt.Errorf("index: weaviate: dropping %q: %w", name, err)
	}
	return nil
}

// Upsert implements Store. The points are checked before anything is sent,
// so a bad batch writes nothing; Weaviate itself has no multi-object
// transaction, so a batch that fails half way (an outage) may leave some of
// its points written: the error makes the caller retry, and the retry
// overwrites the same objects (deterministic ids), never duplicates.
func (w *Weaviate) Upsert(ctx context.Context, ns, name string, pts []Point) error {
	cls, s, err := w.classSchema(ctx, ns, name)
	if err != nil {
		return err
	}
	if err := checkPoints(name, s, pts); err != nil {
		return err
	}
	// One object per content id: the last point of a content wins.
	last := map[string]int{}
	for i := range pts {
		last[pts[i].ContentID] = i
	}
	objs := make([]*models.Object, 0, len(last))
	for i := range pts {
		p := &pts[i]
		if last[p.ContentID] != i {
			continue
		}
		labels := ""
		if len(p.Labels) > 0 {
			b, _ := json.Marshal(p.Labels)
			labels = string(b)
		}
		objs = append(objs, &models.Object{
			Class: cls,
			ID:    strfmt.UUID(objectID(ns, name, p.ContentID)),
			Properties: map[string]any{
				"content_id":      p.ContentID,
				"root_content_id": p.RootContentID,
				"mime_type":       p.MimeType,
				"text":            p.Text,
				"labels_json":     labels,
				"namespace":       ns,
				"index":           name,
			},
			Vector: models.C11yVector(p.Vector),
		})
	}
	for len(objs) > 0 {
		n := min(len(objs), weaviateBatch)
		res, err := w.c.Batch().ObjectsBatcher().WithObjects(objs[:n]...).Do(ctx)
		if err != nil {
			if statusOf(err) == 422 || statusOf(err) == 404 {
				w.forget(cls)
				if _, _, err := w.classSchema(ctx, ns, name); errors.Is(err, ErrNoIndex) {
					return err
				}
			}
			return fmt.Errorf("index: weaviate: upsert into %q: %w", name, err)
		}
		for _, r := range res {
			if r.Result != nil && r.Result.Errors != nil && len(r.Result.Errors.Error) > 0 {
				// Perhaps dropped (or recreated) by another API server:
				// ask again, so that reads as ErrNoIndex.
				w.forget(cls)
				if _, _, err := w.classSchema(ctx, ns, name); errors.Is(err, ErrNoIndex) {
					return err
				}
				return fmt.Errorf("index: weaviate: upsert into %q: %s", name, r.Result.Errors.Error[0].Message)
			}
		}
		objs = objs[n:]
	}
	return nil
}

func (w *Weaviate) forget(cls string) {
	w.mu.Lock()
	delete(w.schema, cls)
	w.mu.Unlock()
}

// checkPoints validates a batch against the index's schema (shared by both stores).
func checkPoints(name string, s Schema, pts []Point) error {
	for i := range pts {
		if pts[i].ContentID == "" {
			return fmt.Errorf("index: point %d has no content id", i)
		}
		if len(pts[i].Vector) != s.Dim {
			return fmt.Errorf("index %q: point %d (content %s) has %d dimensions, want %d: %w",
				name, i, pts[i].ContentID, len(pts[i].Vector), s.Dim, ErrDim)
		}
		for _, f := range pts[i].Vector {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return fmt.Errorf("index %q: point %d (content %s) has a NaN or infinite component", name, i, pts[i].ContentID)
			}
		}
	}
	return nil
}

// Delete implements Store: it removes the contents' objects from every class
// whose description names this namespace.
func (w *Weaviate) Delete(ctx context.Context, ns string, contentIDs []string) error {
	if len(contentIDs) == 0 {
		return nil
	}
	dump, err := w.c.Schema().Getter().Do(ctx)
	if err != nil {
		return fmt.Errorf("index: weaviate: listing classes: %w", err)
	}
	for _, c := range dump.Classes {
		if !strings.HasPrefix(c.Class, classPrefix) {
			continue
		}
		m, err := classMeta(c)
		if err != nil || m.Namespace != ns {
			continue
		}
		for ids := contentIDs; len(ids) > 0; {
			n := min(len(ids), weaviateBatch)
			where := filters.Where().WithPath([]string{"content_id"}).WithOperator(filters.ContainsAny).WithValueText(ids[:n]...)
			_, err := w.c.Batch().ObjectsBatchDeleter().WithClassName(c.Class).WithWhere(where).Do(ctx)
			if err != nil && statusOf(err) != 404 { // 404: dropped meanwhile
				return fmt.Errorf("index: weaviate: deleting from %q: %w", m.Name, err)
			}
			ids = ids[n:]
		}
	}
	return nil
}

// Search implements Store. Weaviate's nearVector returns the nearest
// neighbours; keep runs here, so while it rejects candidates the search
// asks again for four times as many, up to maxFetch: the result is the k
// best accepted points among the maxFetch nearest.
func (w *Weaviate) Search(ctx context.Context, ns, name string, q []float32, k int, keep func(*Point) bool) ([]Hit, error) {
	cls, s, err := w.classSchema(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if len(q) != s.Dim {
		return nil, fmt.Errorf("index %q: query has %d dimensions, want %d: %w", name, len(q), s.Dim, ErrDim)
	}
	if k <= 0 {
		return nil, nil
	}
	limit := k
	if keep != nil {
		limit = max(4*k, 32)
	}
	for {
		limit = min(limit, maxFetch)
		cands, err := w.nearVector(ctx, cls, s, q, limit)
		if err != nil {
			if errors.Is(err, ErrNoIndex) {
				w.forget(cls)
				return nil, fmt.Errorf("index %q in namespace %q: %w", name, ns, ErrNoIndex)
			}
			return nil, fmt.Errorf("index: weaviate: search %q: %w", name, err)
		}
		var hits []Hit
		for i := range cands {
			if keep == nil || keep(&cands[i].Point) {
				hits = append(hits, cands[i])
			}
		}
		if len(hits) >= k || len(cands) < limit || limit == maxFetch {
			sort.SliceStable(hits, func(i, j int) bool {
				if hits[i].Score != hits[j].Score {
					return hits[i].Score > hits[j].Score
				}
				return hits[i].ContentID < hits[j].ContentID
			})
			if len(hits) > k {
				hits = hits[:k]
			}
			return hits, nil
		}
		limit *= 4
	}
}

func (w *Weaviate) nearVector(ctx context.Context, cls string, s Schema, q []float32, limit int) ([]Hit, error) {
	fields := []graphql.Field{
		{Name: "content_id"}, {Name: "root_content_id"}, {Name: "mime_type"}, {Name: "text"}, {Name: "labels_json"},
		{Name: "_additional", Fields: []graphql.Field{{Name: "distance"}, {Name: "vector"}}},
	}
	nv := w.c.GraphQL().NearVectorArgBuilder().WithVector(q)
	resp, err := w.c.GraphQL().Get().WithClassName(cls).WithFields(fields...).WithNearVector(nv).WithLimit(limit).Do(ctx)
	if err != nil {
		return nil, err
	}
	if len(resp.Errors) > 0 {
		msg := resp.Errors[0].Message
		if strings.Contains(msg, "Cannot query field") || strings.Contains(msg, "could not find class") {
			return nil, ErrNoIndex
		}
		return nil, errors.New(msg)
	}
	get, _ := resp.Data["Get"].(map[string]any)
	rows, _ := get[cls].([]any)
	hits := make([]Hit, 0, len(rows))
	for _, r := range rows {
		o, _ := r.(map[string]any)
		str := func(k string) string { v, _ := o[k].(string); return v }
		h := Hit{Point: Point{ContentID: str("content_id"), RootContentID: str("root_content_id"),
			MimeType: str("mime_type"), Text: str("text")}}
		if lj := str("labels_json"); lj != "" {
			if err := json.Unmarshal([]byte(lj), &h.Labels); err != nil {
				return nil, fmt.Errorf("object %s: labels: %w", h.ContentID, err)
			}
		}
		add, _ := o["_additional"].(map[string]any)
		d, ok := add["distance"].(float64)
		if !ok {
			return nil, fmt.Errorf("object %s: no distance in the answer", h.ContentID)
		}
		h.Score = score(s.Distance, d)
		if vec, ok := add["vector"].([]any); ok {
			h.Vector = make([]float32, len(vec))
			for i, x := range vec {
				f, _ := x.(float64)
				h.Vector[i] = float32(f)
			}
		}
		hits = append(hits, h)
	}
	return hits, nil
}

// Close implements Store (the client holds no resources that need closing).
func (w *Weaviate) Close() error { return nil }
