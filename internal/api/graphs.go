package api

// Namespaces, extractors, extraction graphs, links and analytics.

import (
	"context"
	"net/http"

	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request) error {
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListNamespacesResponse, error) {
		return s.cfg.Coordinator.ListNamespaces(ctx, &pb.ListNamespacesRequest{Consistency: level})
	})
	if err != nil {
		return err
	}
	out := make([]namespaceJSON, 0, len(resp.GetNamespaces()))
	for _, n := range resp.GetNamespaces() {
		out = append(out, wire.NamespaceFromProto(n))
	}
	writeJSON(w, http.StatusOK, wire.Namespaces{Namespaces: out})
	return nil
}

// createNamespace accepts the original body {"name", "extraction_graphs",
// "labels"}; graphs given inline are created after the namespace.
func (s *Server) createNamespace(w http.ResponseWriter, r *http.Request) error {
	var req wire.NamespaceRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := validateName("namespace name", req.Name); err != nil {
		return err
	}
	// Namespace labels are not stored, but they follow the same label rule
	// as content labels, so a body is refused here exactly when it would
	// be refused there.
	if _, err := labelsToProto(req.Labels); err != nil {
		return err
	}
	// Parse every graph before creating anything, so a bad graph spec does
	// not leave a half-created namespace behind.
	graphs := make([]*pb.ExtractionGraph, 0, len(req.ExtractionGraphs))
	for _, raw := range req.ExtractionGraphs {
		spec, err := parseGraphSpec(raw, "application/json")
		if err != nil {
			return err
		}
		g, err := graphToProto(spec, req.Name)
		if err != nil {
			return err
		}
		graphs = append(graphs, g)
	}
	reqID := newRequestID()
	if _, err := call(r.Context(), s, func(ctx context.Context) (*pb.CreateNamespaceResponse, error) {
		return s.cfg.Coordinator.CreateNamespace(ctx, &pb.CreateNamespaceRequest{Name: req.Name, RequestId: reqID})
	}); err != nil {
		return err
	}
	for _, g := range graphs {
		if _, err := s.createGraphRPC(r.Context(), g); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, wire.NamespaceBody{Namespace: namespaceJSON{Name: req.Name}})
	return nil
}

func (s *Server) getNamespace(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListNamespacesResponse, error) {
		return s.cfg.Coordinator.ListNamespaces(ctx, &pb.ListNamespacesRequest{Consistency: level})
	})
	if err != nil {
		return err
	}
	for _, n := range resp.GetNamespaces() {
		if n.GetName() == ns {
			writeJSON(w, http.StatusOK, wire.NamespaceBody{Namespace: wire.NamespaceFromProto(n)})
			return nil
		}
	}
	return notFound("namespace %q not found", ns)
}

func (s *Server) listExtractors(w http.ResponseWriter, r *http.Request) error {
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListExtractorsResponse, error) {
		return s.cfg.Coordinator.ListExtractors(ctx, &pb.ListExtractorsRequest{Consistency: level})
	})
	if err != nil {
		return err
	}
	out := wire.Extractors{Extractors: make([]wire.Extractor, 0, len(resp.GetExtractors()))}
	for _, e := range resp.GetExtractors() {
		out.Extractors = append(out.Extractors, toExtractorJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listGraphs(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	graphs, err := s.graphs(r.Context(), readLevel(r), ns)
	if err != nil {
		return err
	}
	out := make([]graphJSON, 0, len(graphs))
	for _, g := range graphs {
		out = append(out, toGraphJSON(g))
	}
	writeJSON(w, http.StatusOK, wire.Graphs{ExtractionGraphs: out})
	return nil
}

func (s *Server) graphs(ctx context.Context, level pb.ReadConsistency, ns string) ([]*pb.ExtractionGraph, error) {
	resp, err := read(ctx, s, level, func(ctx context.Context, level pb.ReadConsistency) (*pb.ListExtractionGraphsResponse, error) {
		return s.cfg.Coordinator.ListExtractionGraphs(ctx, &pb.ListExtractionGraphsRequest{Namespace: ns, Consistency: level})
	})
	return resp.GetGraphs(), err
}

// findGraph returns the graph or a 404 naming it.
func (s *Server) findGraph(ctx context.Context, level pb.ReadConsistency, ns, name string) (*pb.ExtractionGraph, error) {
	graphs, err := s.graphs(ctx, level, ns)
	if err != nil {
		return nil, err
	}
	for _, g := range graphs {
		if g.GetName() == name {
			return g, nil
		}
	}
	return nil, notFound("extraction graph %q not found in namespace %q", name, ns)
}

// requirePolicy answers 404 unless the graph has the policy. The
// coordinator's list/watch calls filter by policy name and would silently
// return nothing for a typo.
func (s *Server) requirePolicy(ctx context.Context, level pb.ReadConsistency, ns, graph, policy string) error {
	g, err := s.findGraph(ctx, level, ns, graph)
	if err != nil {
		return err
	}
	for _, p := range g.GetPolicies() {
		if p.GetName() == policy {
			return nil
		}
	}
	return notFound("extraction policy %q not found in graph %q", policy, graph)
}

func (s *Server) createGraph(w http.ResponseWriter, r *http.Request) error {
	ns := r.PathValue("ns")
	if err := validateKind(kindNamespace, ns); err != nil {
		return err
	}
	mt, err := requireMediaType(r, true)
	if err != nil {
		return err
	}
	body, err := readBody(w, r, MaxGraphSpecBytes)
	if err != nil {
		return err
	}
	spec, err := parseGraphSpec(body, mt)
	if err != nil {
		return err
	}
	g, err := graphToProto(spec, ns)
	if err != nil {
		return err
	}
	stored, err := s.createGraphRPC(r.Context(), g)
	if err != nil {
		return err
	}
	// The graph exists now; an index store outage only delays its indexes
	// (they are also ensured by the first result that writes to them).
	if err := s.ensureGraphIndexes(r.Context(), stored); err != nil {
		s.log.Warn("creating the new graph's indexes failed; they will be created on first use", "graph", stored.GetName(), "err", err)
	}
	writeJSON(w, http.StatusOK, toGraphJSON(stored))
	return nil
}

func (s *Server) createGraphRPC(ctx context.Context, g *pb.ExtractionGraph) (*pb.ExtractionGraph, error) {
	reqID := newRequestID()
	resp, err := call(ctx, s, func(ctx context.Context) (*pb.CreateExtractionGraphResponse, error) {
		return s.cfg.Coordinator.CreateExtractionGraph(ctx, &pb.CreateExtractionGraphRequest{Graph: g, RequestId: reqID})
	})
	if err != nil {
		return nil, err
	}
	if resp.GetGraph() != nil {
		return resp.GetGraph(), nil
	}
	return g, nil
}

func (s *Server) getGraph(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	g, err := s.findGraph(r.Context(), readLevel(r), ns, graph)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toGraphJSON(g))
	return nil
}

func (s *Server) deleteGraph(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	old, _ := s.findGraph(r.Context(), readLevel(r), ns, graph) // for its indexes and table; the RPC decides 404
	reqID := newRequestID()
	if _, err := call(r.Context(), s, func(ctx context.Context) (*pb.DeleteExtractionGraphResponse, error) {
		return s.cfg.Coordinator.DeleteExtractionGraph(ctx, &pb.DeleteExtractionGraphRequest{Namespace: ns, Name: graph, RequestId: reqID})
	}); err != nil {
		return err
	}
	if old != nil {
		s.dropGraphFeatures(r.Context(), old)
	}
	writeJSON(w, http.StatusOK, wire.Empty{})
	return nil
}

func (s *Server) listLinks(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.ListGraphLinksResponse, error) {
		return s.cfg.Coordinator.ListGraphLinks(ctx, &pb.ListGraphLinksRequest{Namespace: ns, GraphName: graph, Consistency: level})
	})
	if err != nil {
		return err
	}
	out := make([]linkJSON, 0, len(resp.GetLinks()))
	for _, l := range resp.GetLinks() {
		out = append(out, wire.LinkFromProto(l))
	}
	writeJSON(w, http.StatusOK, wire.Links{Links: out})
	return nil
}

func (s *Server) createLink(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	var req linkJSON
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := validateName("linked_graph_name", req.LinkedGraphName); err != nil {
		return err
	}
	if req.ContentSource != "" {
		if err := validateName("content_source", req.ContentSource); err != nil {
			return err
		}
	}
	link := &pb.GraphLink{Namespace: ns, GraphName: graph, ContentSource: req.ContentSource, LinkedGraphName: req.LinkedGraphName}
	reqID := newRequestID()
	if _, err := call(r.Context(), s, func(ctx context.Context) (*pb.CreateGraphLinkResponse, error) {
		return s.cfg.Coordinator.CreateGraphLink(ctx, &pb.CreateGraphLinkRequest{Link: link, RequestId: reqID})
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, linkJSON{GraphName: graph, ContentSource: req.ContentSource, LinkedGraphName: req.LinkedGraphName})
	return nil
}

func (s *Server) analytics(w http.ResponseWriter, r *http.Request) error {
	ns, graph := r.PathValue("ns"), r.PathValue("graph")
	if err := validateIDs(kindNamespace, ns, kindGraph, graph); err != nil {
		return err
	}
	resp, err := read(r.Context(), s, readLevel(r), func(ctx context.Context, level pb.ReadConsistency) (*pb.GetAnalyticsResponse, error) {
		return s.cfg.Coordinator.GetAnalytics(ctx, &pb.GetAnalyticsRequest{Namespace: ns, GraphName: graph, Consistency: level})
	})
	if err != nil {
		return err
	}
	out := make(map[string]wire.Analytics, len(resp.GetPolicies()))
	for _, p := range resp.GetPolicies() {
		out[p.GetPolicy()] = wire.Analytics{Pending: p.GetPending(), Success: p.GetSuccess(), Failure: p.GetFailure()}
	}
	writeJSON(w, http.StatusOK, wire.TaskAnalytics{TaskAnalytics: out})
	return nil
}
