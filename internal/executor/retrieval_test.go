package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor/extractors"
	"github.com/indexify-go/indexify/internal/wire"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The retrieval built-ins through the whole executor path (download, run,
// multipart upload): a PDF becomes page children, a broken PDF fails the
// task with a clear error and the executor carries on, a text gets an
// embedding feature.
func TestExecutorRunsRetrievalBuiltins(t *testing.T) {
	f := fpdf.New("P", "mm", "A4", "")
	f.SetFont("Helvetica", "", 12)
	for _, p := range []string{"First page text.", "Second page text."} {
		f.AddPage()
		f.MultiCell(0, 6, p, "", "L", false)
	}
	var pdfBytes bytes.Buffer
	if err := f.Output(&pdfBytes); err != nil {
		t.Fatal(err)
	}
	coord := startCoordinator(t, "a")
	api := startAPI(t)
	api.put("ns", "pdf", 1, pdfBytes.String())
	api.put("ns", "bad", 1, "%PDF-1.4\nnot really")
	api.put("ns", "txt", 1, "search me")
	startExecutor(t, Config{ID: "exec-1", APIServer: api.URL, HeartbeatInterval: 20 * time.Millisecond, Extractors: Builtins()},
		dialCoordinators(t, coord))
	s := coord.nextStream(t)
	pdfTask := func(id, content string) *pb.Task {
		tk := task(id, extractors.PDFName, content, 1, "")
		tk.Content.MimeType = "application/pdf"
		return tk
	}
	s.push(t, &pb.HeartbeatResponse{Tasks: []*pb.Task{
		pdfTask("t-pdf", "pdf"), pdfTask("t-bad", "bad"),
		task("t-emb", embed.LexicalExtractor, "txt", 1, `{"dim":32}`),
	}})

	u := api.waitUpload(t, "t-pdf", 1)
	if u.result.Outcome != wire.OutcomeSuccess || len(u.result.Content) != 2 {
		t.Fatalf("pdf upload %+v", u.result)
	}
	for i, want := range []string{"First page text.", "Second page text."} {
		c := u.result.Content[i]
		if string(u.files[i]) != want || c.MimeType != "text/plain" || string(c.Labels[extractors.PDFPageLabel]) != []string{"1", "2"}[i] {
			t.Errorf("page %d: %q %+v", i+1, u.files[i], c)
		}
	}
	u = api.waitUpload(t, "t-bad", 1)
	if u.result.Outcome != wire.OutcomeFailed || !strings.Contains(u.result.Error, "malformed PDF") {
		t.Fatalf("bad pdf upload %+v", u.result)
	}
	u = api.waitUpload(t, "t-emb", 1)
	if u.result.Outcome != wire.OutcomeSuccess || len(u.result.Features) != 1 || !u.result.Features[0].Embedding || u.result.Features[0].Name != embed.Output {
		t.Fatalf("embedding upload %+v", u.result)
	}
	var v []float32
	if err := json.Unmarshal(u.result.Features[0].Value, &v); err != nil || len(v) != 32 {
		t.Fatalf("embedding %s (%v)", u.result.Features[0].Value, err)
	}
	want := embed.NewLexical(32).Vector("search me")
	for i := range v {
		if v[i] != want[i] {
			t.Fatalf("uploaded vector differs from the query-side embedder at %d", i)
		}
	}
}
