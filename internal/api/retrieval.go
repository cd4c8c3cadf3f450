package api

// Retrieval: the vector indexes and structured tables that extracted features
// land in, and the routes that read them back (search, schemas, SQL).
//
// The Raft state keeps content, tasks and the fact that a feature exists;
// the values (vectors, metadata rows) live in an index.Store and a
// structured.Store owned by the API tier. The list of indexes is not stored
// anywhere: it follows from the graphs and their extractors' declared
// outputs, so every API server derives the same list from the same state.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/index"
	"github.com/indexify-go/indexify/internal/labels"
	"github.com/indexify-go/indexify/internal/structured"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

const (
	defaultSearchK = 5
	maxSearchK     = 1000
	// maxIndexedText bounds the text kept beside a vector (search returns it).
	maxIndexedText = 64 << 10
	codeStore      = "store_unavailable"
	codeQuery      = "invalid_query"
)

// indexInfo is one index: where it comes from and its vector shape.
type indexInfo struct {
	Name      string // <graph>.<policy>.<output>
	Graph     string
	Policy    *pb.ExtractionPolicy
	Output    string
	Schema    index.Schema
	Extractor *pb.ExtractorDescription
}

// IndexName is the original's index naming: <graph>.<policy>.<output>.
func IndexName(graph, policy, output string) string {
	return graph + "." + policy + "." + output
}

func (s *Server) retrievalRoutes() {
	h := func(pattern string, fn func(http.ResponseWriter, *http.Request) error) {
		s.handle(pattern, s.wrap(fn))
	}
	h("GET /namespaces/{ns}/indexes", s.listIndexes)
	h("POST /namespaces/{ns}/indexes/{index}/search", s.searchIndex)
	h("GET /namespaces/{ns}/schemas", s.listSchemas)
	h("POST /namespaces/{ns}/sql_query", s.sqlQuery)
}

func storesMissing(what string) error {
	return newError(http.StatusServiceUnavailable, codeUnavailable, "this API server has no %s store configured", what)
}

func storeError(err error) error {
	return newError(http.StatusServiceUnavailable, codeStore, "feature store unavailable: %v", err)
}

// extractorsByName returns the registered extractor descriptions.
func (s *Server) extractorsByName(ctx context.Context, level pb.ReadConsistency) (map[string]*pb.ExtractorDescription, error) {
	resp, err := read(ctx, s, level, func(ctx context.Context, level pb.ReadConsistency) (*pb.ListExtractorsResponse, error) {
		return s.cfg.Coordinator.ListExtractors(ctx, &pb.ListExtractorsRequest{Consistency: level})
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*pb.ExtractorDescription, len(resp.GetExtractors()))
	for _, e := range resp.GetExtractors() {
		out[e.GetName()] = e
	}
	return out, nil
}

// policyIndexes lists the indexes one policy's embedding outputs make. The
// dimension follows the policy's params when the extractor's embedder is
// known to this binary (the built-in and OpenAI-compatible ones), else the
// extractor's declaration.
func policyIndexes(graph string, p *pb.ExtractionPolicy, ex *pb.ExtractorDescription) []indexInfo {
	if ex == nil {
		return nil
	}
	var out []indexInfo
	for name, o := range ex.GetOutputs() {
		emb := o.GetEmbedding()
		if emb == nil {
			continue
		}
		sc := index.Schema{Dim: int(emb.GetDim()), Distance: emb.GetDistance()}
		if sc.Distance == "" {
			sc.Distance = index.Cosine
		}
		if dim, err := embed.ParamsDim(p.GetExtractor(), json.RawMessage(p.GetInputParamsJson())); err == nil && dim > 0 {
			sc.Dim = dim
		}
		out = append(out, indexInfo{Name: IndexName(graph, p.GetName(), name), Graph: graph, Policy: p, Output: name, Schema: sc, Extractor: ex})
	}
	return out
}

// namespaceIndexes lists every index of a namespace, sorted by name.
func (s *Server) namespaceIndexes(ctx context.Context, level pb.ReadConsistency, ns string) ([]indexInfo, error) {
	graphs, err := s.graphs(ctx, level, ns)
	if err != nil {
		return nil, err
	}
	exs, err := s.extractorsByName(ctx, level)
	if err != nil {
		return nil, err
	}
	var out []indexInfo
	for _, g := range graphs {
		for _, p := range g.GetPolicies() {
			out = append(out, policyIndexes(g.GetName(), p, exs[p.GetExtractor()])...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// listIndexes: GET /namespaces/{ns}/indexes.
func (s *Server) listIndexes(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	idx, err := s.namespaceIndexes(r.Context(), readLevel(r), ns)
	if err != nil {
		return err
	}
	out := make([]wire.Index, 0, len(idx))
	for _, i := range idx {
		out = append(out, wire.Index{Name: i.Name, EmbeddingSchema: wire.EmbeddingSchema{Dim: i.Schema.Dim, Distance: i.Schema.Distance}})
	}
	writeJSON(w, http.StatusOK, wire.Indexes{Indexes: out})
	return nil
}

// searchIndex: POST /namespaces/{ns}/indexes/{index}/search.
//
// The query is embedded here, in the API server, by the same embedder and
// params that built the index (embed.FromParamsWith, with this server's
// OpenAI configuration filling what the params leave out, as the
// executor's does), so query and stored
// vectors share one space. Extractors whose embedder this binary does not
// know (external programs) cannot be searched by text.
func (s *Server) searchIndex(w http.ResponseWriter, r *http.Request) error {
	ns, name := r.PathValue("ns"), r.PathValue("index")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	if s.cfg.Index == nil {
		return storesMissing("vector index")
	}
	var req wire.SearchRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Query) == "" {
		return badRequest(codeInvalidArgument, "query must be a non-empty string")
	}
	k := defaultSearchK
	if req.K != nil {
		k = *req.K
	}
	if k < 1 || k > maxSearchK {
		return badRequest(codeInvalidArgument, "k must be between 1 and %d, got %d", maxSearchK, k)
	}
	filter, err := labels.Parse(req.Filters)
	if err != nil {
		return badRequest(codeInvalidFilter, "%v", err)
	}
	includeContent := req.IncludeContent == nil || *req.IncludeContent
	all, err := s.namespaceIndexes(r.Context(), readLevel(r), ns)
	if err != nil {
		return err
	}
	var info *indexInfo
	for i := range all {
		if all[i].Name == name {
			info = &all[i]
		}
	}
	if info == nil {
		return notFound("index %q not found in namespace %q", name, ns)
	}
	emb, err := embed.FromParamsWith(info.Policy.GetExtractor(), json.RawMessage(info.Policy.GetInputParamsJson()), s.cfg.OpenAI)
	if err != nil {
		return badRequest(codeInvalidArgument, "index %q cannot be searched by text: its extractor %q has no query embedder in the API server (%v)", name, info.Policy.GetExtractor(), err)
	}
	vecs, err := emb.Embed(r.Context(), []string{req.Query})
	if err != nil {
		return newError(http.StatusBadGateway, codeUnavailable, "embedding the query failed: %v", err)
	}
	var keep func(*index.Point) bool
	if !filter.Empty() {
		keep = func(p *index.Point) bool { return filter.Match(p.Labels) }
	}
	// Hits the join drops (content gone, result not committed) are rare:
	// ask for k, and again for more only when some were dropped.
	var results []wire.SearchResult
	for fetch := k; ; fetch *= 4 {
		hits, err := s.cfg.Index.Search(r.Context(), ns, name, vecs[0], fetch, keep)
		if errors.Is(err, index.ErrNoIndex) {
			hits, err = nil, nil // declared but nothing indexed yet
		}
		if err != nil {
			return storeError(err)
		}
		results, err = s.searchResults(r.Context(), readLevel(r), ns, info, hits, includeContent)
		if err != nil {
			return err
		}
		if len(results) >= k || len(hits) < fetch || fetch >= maxSearchFetch {
			break
		}
	}
	writeJSON(w, http.StatusOK, wire.SearchResponse{Results: results[:min(k, len(results))]})
	return nil
}

// maxSearchFetch bounds the hits one search reads while making up for
// dropped ones.
const maxSearchFetch = 4 * maxSearchK

// committedFeature reports whether content record c holds a feature of
// policy (named output, when output is not empty) of the given kind: the
// result that wrote the value into a store has been committed (its
// CompleteTask applied). Store writes come before that commit, so a value
// whose result failed, was refused or is still being retried is in a store
// but not in c, and is not shown (internal/index/DESIGN.md, "What is
// visible when").
func committedFeature(c *pb.Content, policy, output string, embedding bool) bool {
	for _, f := range c.GetFeatures() {
		if f.GetPolicy() == policy && f.GetEmbedding() == embedding && (output == "" || f.GetName() == output) {
			return true
		}
	}
	return false
}

// searchResults joins hits of index info with their content records. A
// hit whose content is gone (deleted, GC not yet run), or whose latest
// version does not record the feature (its result not committed), is
// dropped rather than shown.
func (s *Server) searchResults(ctx context.Context, level pb.ReadConsistency, ns string, info *indexInfo, hits []index.Hit, includeContent bool) ([]wire.SearchResult, error) {
	out := make([]wire.SearchResult, 0, len(hits))
	if len(hits) == 0 {
		return out, nil
	}
	ids := make([]string, 0, 2*len(hits))
	for _, h := range hits {
		ids = append(ids, h.ContentID)
		if h.RootContentID != "" {
			ids = append(ids, h.RootContentID)
		}
	}
	latest, err := s.latestContents(ctx, level, ns, ids)
	if err != nil {
		return nil, err
	}
	committed := func(c *pb.Content) bool { return committedFeature(c, info.Policy.GetName(), info.Output, true) }
	// Read-your-writes across API servers, as read() gives a NotFound: a
	// record without the feature at the default level may come from a
	// replica behind the one that committed it; ask the leader once.
	var recheck []string
	for _, h := range hits {
		if c := latest[h.ContentID]; c != nil && !committed(c) && level == levelDefault {
			recheck = append(recheck, h.ContentID)
		}
	}
	if len(recheck) > 0 {
		fresh, err := s.latestContents(ctx, levelLinearizable, ns, recheck)
		if err != nil {
			return nil, err
		}
		for _, id := range recheck {
			latest[id] = fresh[id]
		}
	}
	for _, h := range hits {
		c := latest[h.ContentID]
		if c == nil || !committed(c) {
			continue
		}
		res := wire.SearchResult{
			ContentID:       h.ContentID,
			MimeType:        c.GetMimeType(),
			ConfidenceScore: h.Score,
			ContentMetadata: toContentJSON(c),
		}
		res.Labels = res.ContentMetadata.Labels
		if includeContent {
			res.Text = h.Text
		}
		if root := latest[h.RootContentID]; root != nil {
			res.RootContentMetadata = toContentJSON(root)
		} else {
			res.RootContentMetadata = res.ContentMetadata
		}
		out = append(out, res)
	}
	return out, nil
}

// latestContents returns the live latest version of each id that has one.
func (s *Server) latestContents(ctx context.Context, level pb.ReadConsistency, ns string, ids []string) (map[string]*pb.Content, error) {
	resp, err := read(ctx, s, level, func(ctx context.Context, level pb.ReadConsistency) (*pb.GetContentResponse, error) {
		return s.cfg.Coordinator.GetContent(ctx, &pb.GetContentRequest{Namespace: ns, Ids: ids, Consistency: level})
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*pb.Content, len(ids))
	for _, c := range resp.GetContents() {
		if best := out[c.GetId()]; best == nil || c.GetVersion() > best.GetVersion() {
			out[c.GetId()] = c
		}
	}
	for id, c := range out {
		if c.GetTombstoned() {
			delete(out, id)
		}
	}
	return out, nil
}

// listSchemas: GET /namespaces/{ns}/schemas.
func (s *Server) listSchemas(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	if s.cfg.Structured == nil {
		return storesMissing("structured data")
	}
	schemas, err := s.cfg.Structured.Schemas(r.Context(), ns)
	if err != nil {
		return storeError(err)
	}
	out := make([]wire.Schema, 0, len(schemas))
	ddls := make(map[string]string, len(schemas))
	for _, sc := range schemas {
		cols := make(map[string]wire.Column, len(sc.Columns))
		for n, c := range sc.Columns {
			cols[n] = wire.Column{Type: c.Type, Comment: c.Comment}
		}
		out = append(out, wire.Schema{ExtractionGraphName: sc.Graph, Namespace: ns, Columns: cols})
		ddls[sc.Graph] = sc.DDL
	}
	writeJSON(w, http.StatusOK, wire.Schemas{Schemas: out, DDLs: ddls})
	return nil
}

// sqlQuery: POST /namespaces/{ns}/sql_query {"query": "select ..."}.
func (s *Server) sqlQuery(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	if s.cfg.Structured == nil {
		return storesMissing("structured data")
	}
	var req wire.SQLQuery
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Query) == "" {
		return badRequest(codeQuery, "query must be a non-empty SQL SELECT statement")
	}
	rows, err := s.cfg.Structured.Query(r.Context(), ns, req.Query)
	if errors.Is(err, structured.ErrQuery) {
		return badRequest(codeQuery, "%v", err)
	}
	if err != nil {
		return storeError(err)
	}
	out := make([]wire.SQLRow, 0, len(rows))
	for _, row := range rows {
		out = append(out, wire.SQLRow{Data: row})
	}
	writeJSON(w, http.StatusOK, wire.SQLResult{Rows: out})
	return nil
}

// structuredMetadata is the "metadata" list of GET .../content/{id}/metadata
// for content record c, read at level: the rows whose result c records as
// committed (a row c lacks at the default level is checked once more on
// the leader's record, as searchResults does).
func (s *Server) structuredMetadata(ctx context.Context, level pb.ReadConsistency, ns string, c *pb.Content) ([]wire.Metadata, error) {
	out := []wire.Metadata{}
	if s.cfg.Structured == nil {
		return out, nil
	}
	rows, err := s.cfg.Structured.Rows(ctx, ns, c.GetId())
	if err != nil {
		return nil, storeError(err)
	}
	for _, row := range rows {
		if !committedFeature(c, row.Policy, "", false) && level == levelDefault {
			fresh, err := s.latestContents(ctx, levelLinearizable, ns, []string{c.GetId()})
			if err != nil {
				return nil, err
			}
			if c = fresh[c.GetId()]; c == nil {
				return []wire.Metadata{}, nil
			}
			level = levelLinearizable
		}
		if !committedFeature(c, row.Policy, "", false) {
			continue
		}
		out = append(out, wire.Metadata{ID: row.ContentID + "." + row.Policy, ContentID: row.ContentID, Metadata: row.Metadata, ExtractorName: row.Extractor})
	}
	return out, nil
}

// featureTarget is a content whose features a task result carries.
type featureTarget struct {
	ContentID     string
	RootContentID string
	MimeType      string
	Labels        map[string]string
	StorageURL    string
	Features      []*pb.Feature
}

// storeFeatures writes a task result's embeddings and metadata into the
// stores (idempotent upserts: a retried result replaces, never duplicates)
// before the task's completion is proposed, so a finished task's features
// are searchable. It returns an error answered with 503, and the executor
// retries the task's result. Nothing is written without stores.
//
// Vectors are written first, then rows: search shows a vector only once
// the completion that records its feature has committed
// (committedFeature), while SQL shows rows as soon as they are written, so
// a failure between the two leaves nothing visible
// (internal/index/DESIGN.md, "What is visible when").
func (s *Server) storeFeatures(ctx context.Context, task *pb.Task, targets []featureTarget) error {
	if s.cfg.Index == nil && s.cfg.Structured == nil {
		return nil
	}
	ns, graph, policy := task.GetNamespace(), task.GetGraphName(), task.GetPolicyName()
	var schemas map[string]index.Schema // output -> schema, loaded on first embedding
	points := map[string][]index.Point{}
	var rows []structured.Row
	for _, t := range targets {
		text := ""
		for _, f := range t.Features {
			if !f.GetEmbedding() {
				rows = append(rows, structured.Row{ContentID: t.ContentID, Policy: policy, Extractor: task.GetExtractor(), Metadata: metadataObject(f)})
				continue
			}
			var vec []float32
			if err := json.Unmarshal([]byte(f.GetValueJson()), &vec); err != nil {
				return badRequest(codeInvalidArgument, "feature %q of content %q: an embedding must be a JSON array of numbers", f.GetName(), t.ContentID)
			}
			if schemas == nil {
				var err error
				if schemas, err = s.policySchemas(ctx, task); err != nil {
					return err
				}
			}
			if text == "" {
				text = s.indexedText(ctx, t)
			}
			name := IndexName(graph, policy, f.GetName())
			points[name] = append(points[name], index.Point{ContentID: t.ContentID, RootContentID: t.RootContentID, MimeType: t.MimeType, Text: text, Labels: t.Labels, Vector: vec})
		}
	}
	if len(points) > 0 && s.cfg.Index == nil {
		return storesMissing("vector index")
	}
	names := make([]string, 0, len(points))
	for n := range points {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		output := strings.TrimPrefix(n, graph+"."+policy+".")
		sc, ok := schemas[output]
		if !ok {
			// Not declared by the extractor: index it by what it sent.
			sc = index.Schema{Dim: len(points[n][0].Vector), Distance: index.Cosine}
		}
		if err := s.cfg.Index.EnsureIndex(ctx, ns, n, sc); err != nil {
			return storeError(err)
		}
		if err := s.cfg.Index.Upsert(ctx, ns, n, points[n]); err != nil {
			if errors.Is(err, index.ErrDim) {
				return badRequest(codeInvalidArgument, "embedding for index %q: %v", n, err)
			}
			return storeError(err)
		}
	}
	if len(rows) > 0 && s.cfg.Structured != nil {
		if err := s.cfg.Structured.Upsert(ctx, ns, graph, rows); err != nil {
			return storeError(err)
		}
	}
	return nil
}

// policySchemas returns the schemas of the task's policy outputs. The
// task carries its extractor and params, which settle the built-in
// embedders' schema without asking the coordinator; other extractors'
// declared outputs come from the graph and the extractor registry.
func (s *Server) policySchemas(ctx context.Context, task *pb.Task) (map[string]index.Schema, error) {
	if dim, err := embed.ParamsDim(task.GetExtractor(), json.RawMessage(task.GetInputParamsJson())); err == nil && dim > 0 {
		return map[string]index.Schema{embed.Output: {Dim: dim, Distance: embed.Distance}}, nil
	}
	// A result upload is no user read: the default level (NotFound
	// confirmed at the leader) is right.
	g, err := s.findGraph(ctx, levelDefault, task.GetNamespace(), task.GetGraphName())
	if err != nil {
		return nil, err
	}
	exs, err := s.extractorsByName(ctx, levelDefault)
	if err != nil {
		return nil, err
	}
	out := map[string]index.Schema{}
	for _, p := range g.GetPolicies() {
		if p.GetName() != task.GetPolicyName() {
			continue
		}
		for _, i := range policyIndexes(g.GetName(), p, exs[p.GetExtractor()]) {
			out[i.Output] = i.Schema
		}
	}
	return out, nil
}

// indexedText reads a text content's bytes (bounded) to keep beside its
// vector; other types are indexed without text.
func (s *Server) indexedText(ctx context.Context, t featureTarget) string {
	if !strings.HasPrefix(t.MimeType, "text/") || t.StorageURL == "" {
		return ""
	}
	rc, err := s.cfg.Blob.Open(ctx, t.StorageURL)
	if err != nil {
		s.log.Warn("reading content text for the index failed; indexed without text", "content", t.ContentID, "err", err)
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, maxIndexedText))
	return strings.ToValidUTF8(string(b), "")
}

// metadataObject returns a metadata feature as a JSON object: an object is
// used as is, any other value becomes {feature name: value}.
func metadataObject(f *pb.Feature) map[string]any {
	var v any
	if err := json.Unmarshal([]byte(f.GetValueJson()), &v); err != nil {
		return map[string]any{f.GetName(): f.GetValueJson()}
	}
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{f.GetName(): v}
}

// withoutVectors returns features as the Raft state keeps them: an
// embedding becomes a reference to the index holding its vector
// ({"index": name, "dim": n}), metadata stays as is (small, and shown in
// content listings).
func withoutVectors(task *pb.Task, fs []*pb.Feature) []*pb.Feature {
	out := make([]*pb.Feature, 0, len(fs))
	for _, f := range fs {
		if f.GetEmbedding() {
			var vec []json.RawMessage
			_ = json.Unmarshal([]byte(f.GetValueJson()), &vec)
			ref, _ := json.Marshal(map[string]any{"index": IndexName(task.GetGraphName(), task.GetPolicyName(), f.GetName()), "dim": len(vec)})
			f = &pb.Feature{Name: f.GetName(), Policy: f.GetPolicy(), Embedding: true, ValueJson: string(ref)}
		}
		out = append(out, f)
	}
	return out
}

// forgetContents removes deleted contents' vectors and rows (called by GC
// before it acknowledges their blob deletions).
func (s *Server) forgetContents(ctx context.Context, ns string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if s.cfg.Index != nil {
		if err := s.cfg.Index.Delete(ctx, ns, ids); err != nil {
			return fmt.Errorf("deleting vectors: %w", err)
		}
	}
	if s.cfg.Structured != nil {
		if err := s.cfg.Structured.Delete(ctx, ns, ids); err != nil {
			return fmt.Errorf("deleting metadata rows: %w", err)
		}
	}
	return nil
}

// dropGraphFeatures removes a deleted graph's indexes and table.
func (s *Server) dropGraphFeatures(ctx context.Context, g *pb.ExtractionGraph) {
	if s.cfg.Index != nil {
		exs, err := s.extractorsByName(ctx, levelDefault)
		if err != nil {
			s.log.Warn("dropping a deleted graph's indexes: listing extractors failed", "graph", g.GetName(), "err", err)
		}
		for _, p := range g.GetPolicies() {
			for _, i := range policyIndexes(g.GetName(), p, exs[p.GetExtractor()]) {
				if err := s.cfg.Index.DropIndex(ctx, g.GetNamespace(), i.Name); err != nil {
					s.log.Warn("dropping a deleted graph's index failed", "index", i.Name, "err", err)
				}
			}
		}
	}
	if s.cfg.Structured != nil {
		if err := s.cfg.Structured.DropGraph(ctx, g.GetNamespace(), g.GetName()); err != nil {
			s.log.Warn("dropping a deleted graph's table failed", "graph", g.GetName(), "err", err)
		}
	}
}

// ensureGraphIndexes creates a new graph's indexes (so they are listed and
// searchable, empty, before the first upload).
func (s *Server) ensureGraphIndexes(ctx context.Context, g *pb.ExtractionGraph) error {
	if s.cfg.Index == nil {
		return nil
	}
	exs, err := s.extractorsByName(ctx, levelDefault)
	if err != nil {
		return err
	}
	for _, p := range g.GetPolicies() {
		for _, i := range policyIndexes(g.GetName(), p, exs[p.GetExtractor()]) {
			if err := s.cfg.Index.EnsureIndex(ctx, g.GetNamespace(), i.Name, i.Schema); err != nil {
				return storeError(err)
			}
		}
	}
	return nil
}

// Close releases the retrieval stores given in Config; call it after Run
// (or Serve) returned.
func (s *Server) Close() error {
	var errs []error
	if s.cfg.Index != nil {
		errs = append(errs, s.cfg.Index.Close())
	}
	if s.cfg.Structured != nil {
		errs = append(errs, s.cfg.Structured.Close())
	}
	return errors.Join(errs...)
}

// featureTargets lists the contents of a successful result that carry
// features: the task's input content, then each child.
func featureTargets(task *pb.Task, inputFeatures []*pb.Feature, children []*pb.Content) []featureTarget {
	in := task.GetContent()
	root := in.GetRootContentId()
	if root == "" {
		root = task.GetContentId()
	}
	var out []featureTarget
	if len(inputFeatures) > 0 {
		out = append(out, featureTarget{ContentID: task.GetContentId(), RootContentID: root, MimeType: in.GetMimeType(),
			Labels: in.GetLabels(), StorageURL: in.GetStorageUrl(), Features: inputFeatures})
	}
	for _, c := range children {
		if len(c.GetFeatures()) > 0 {
			out = append(out, featureTarget{ContentID: c.GetId(), RootContentID: root, MimeType: c.GetMimeType(),
				Labels: c.GetLabels(), StorageURL: c.GetStorageUrl(), Features: c.GetFeatures()})
		}
	}
	return out
}
