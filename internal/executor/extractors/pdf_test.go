package extractors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"
)

type pdfOpts struct {
	compress bool
	userPass string // with protect: the password needed to open
	protect  bool
}

// genPDF renders pages of text with fpdf (a real PDF writer: fonts,
// compressed content streams, optional RC4 encryption). An empty string
// makes a page without text.
func genPDF(t testing.TB, pages []string, o pdfOpts) []byte {
	t.Helper()
	f := fpdf.New("P", "mm", "A4", "")
	f.SetCompression(o.compress)
	// Fixed dates and resource order make the bytes reproducible (seeds of
	// the fuzz target must be the same in every fuzz worker).
	f.SetCatalogSort(true)
	f.SetCreationDate(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	f.SetModificationDate(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	if o.protect {
		f.SetProtection(fpdf.CnProtectPrint, o.userPass, "owner-secret")
	}
	f.SetFont("Helvetica", "", 12)
	for _, p := range pages {
		f.AddPage()
		if p != "" {
			f.MultiCell(0, 6, p, "", "L", false)
		}
	}
	var buf bytes.Buffer
	if err := f.Output(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawPDF assembles a PDF from object bodies (object i+1 is objs[i]) with a
// correct xref table, for structures a writer would never produce.
func rawPDF(header string, objs ...string) []byte {
	var b bytes.Buffer
	b.WriteString(header + "\n")
	offs := make([]int, len(objs))
	for i, o := range objs {
		offs[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

func stream(s string) string {
	return fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(s), s)
}

const helv = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"

func extractPDF(t *testing.T, data []byte) *Output {
	t.Helper()
	out, err := NewPDF().Extract(context.Background(), Input{Data: data, MimeType: "application/pdf"})
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	return out
}

func TestPDFOneChildPerPage(t *testing.T) {
	pages := []string{
		"The quick brown fox jumps over the lazy dog.",
		"", // no text layer: no child
		"Indexify extracts, then indexes, then retrieves.\nSecond line of page three.",
	}
	for _, compress := range []bool{true, false} {
		out := extractPDF(t, genPDF(t, pages, pdfOpts{compress: compress}))
		if len(out.Contents) != 2 || len(out.Features) != 0 {
			t.Fatalf("compress=%v: %d children, want 2", compress, len(out.Contents))
		}
		for i, want := range []struct {
			page string
			text string
		}{{"1", pages[0]}, {"3", "Indexify extracts, then indexes, then retrieves.\nSecond line of page three."}} {
			c := out.Contents[i]
			if c.MimeType != "text/plain" || string(c.Labels[PDFPageLabel]) != want.page {
				t.Errorf("child %d: mime %q labels %v", i, c.MimeType, c.Labels)
			}
			if string(c.Data) != want.text {
				t.Errorf("compress=%v child %d text %q, want %q", compress, i, c.Data, want.text)
			}
		}
	}
}

func TestPDFEncrypted(t *testing.T) {
	// A password is needed to open: the task fails with a clear error.
	_, err := NewPDF().Extract(context.Background(), Input{Data: genPDF(t, []string{"secret text"}, pdfOpts{protect: true, userPass: "pw"})})
	if err == nil || !strings.Contains(err.Error(), "encrypted PDF") {
		t.Fatalf("err %v, want an encrypted-PDF error", err)
	}
	// Encrypted with an empty user password (only editing is protected):
	// the parser opens it, but does not decrypt fpdf's RC4 output correctly;
	// either the text comes out or the error names the encryption.
	out, err := NewPDF().Extract(context.Background(), Input{Data: genPDF(t, []string{"printable but protected"}, pdfOpts{protect: true})})
	switch {
	case err == nil:
		if len(out.Contents) != 1 || string(out.Contents[0].Data) != "printable but protected" {
			t.Fatalf("got %+v", out.Contents)
		}
	case !strings.Contains(err.Error(), "encrypted PDF"):
		t.Fatalf("err %v does not name the encryption", err)
	}
}

func TestPDFBrokenInputsFailCleanly(t *testing.T) {
	good := genPDF(t, []string{"some text on a page"}, pdfOpts{compress: true})
	cyclicKids := rawPDF("%PDF-1.4",
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R] /Count 1 >>")
	cyclicParent := rawPDF("%PDF-1.4",
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 /Parent 4 0 R >>",
		"<< /Type /Page /Parent 2 0 R /Contents 5 0 R >>",
		"<< /Type /Pages /Kids [] /Count 0 /Parent 2 0 R >>",
		stream("BT /F1 12 Tf (x) Tj ET"))
	for name, data := range map[string][]byte{
		"empty":          {},
		"not a pdf":      []byte("hello, I am text"),
		"garbage":        append([]byte("%PDF-1.4\n"), bytes.Repeat([]byte{0x8f, 0x00, 0x42}, 500)...),
		"truncated half": good[:len(good)/2],
		"truncated tail": good[:len(good)-20],
		"no trailer":     bytes.ReplaceAll(bytes.Clone(good), []byte("trailer"), []byte("xxxxxxx")),
		"cyclic kids":    cyclicKids,
		"cyclic parent":  cyclicParent,
		"bad flate": rawPDF("%PDF-1.4",
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>",
			"<< /Length 8 /Filter /FlateDecode >>\nstream\nnotzlib!\nendstream"),
	} {
		_, err := NewPDF().Extract(context.Background(), Input{Data: data, MimeType: "application/pdf"})
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestPDFTextOperators(t *testing.T) {
	content := "BT /F1 12 Tf 72 700 Td (Hello) Tj 40 0 Td (World) Tj ET\n" +
		"BT /F1 12 Tf 14 TL 72 650 Td [(Ker)10(ned)-300(words)] TJ T* (next line) Tj (caf\\351) ' ET\n" +
		"BT /F2 10 Tf 1 0 0 1 72 600 Tm [(enco)-28(ding)-375(is)] TJ 70 0 Td (one) Tj 18.5 0 Td (word) Tj ET"
	data := rawPDF("%PDF-2.0",
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 /Resources << /Font << /F1 5 0 R /F2 6 0 R >> >> >>",
		"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>", // Resources inherited from the parent
		stream(content),
		helv,
		"<< /Type /Font /Subtype /Type1 /BaseFont /Courier /FirstChar 32 /LastChar 126 /Widths ["+strings.Repeat("600 ", 95)+"] >>")
	out := extractPDF(t, data)
	if len(out.Contents) != 1 {
		t.Fatalf("%d children", len(out.Contents))
	}
	// Small TJ adjustments are kerning, large ones word gaps. F2's widths
	// (0.6 em) put the pen after "one" at 18 pt from its start, so "word"
	// 18.5 pt further follows without a gap; with the 0.5 em guess used for
	// fonts without widths it would look like a space.
	want := "Hello World\nKerned words\nnext line\ncafé\nencoding is oneword"
	if got := string(out.Contents[0].Data); got != want {
		t.Fatalf("text %q, want %q", got, want)
	}
}

func TestPDFParamsAndDescription(t *testing.T) {
	d := NewPDF().Describe()
	if d.GetName() != PDFName || len(d.GetInputMimeTypes()) != 1 || d.GetInputMimeTypes()[0] != "application/pdf" {
		t.Fatalf("description %v", d)
	}
	if _, err := compileSchema([]byte(d.GetInputParamsSchemaJson())); err != nil {
		t.Fatal(err)
	}
	data := genPDF(t, []string{"x"}, pdfOpts{})
	if _, err := NewPDF().Extract(context.Background(), Input{Data: data, Params: json.RawMessage(`{"password":"x"}`)}); err == nil {
		t.Fatal("unknown param accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewPDF().Extract(ctx, Input{Data: data}); err == nil {
		t.Fatal("cancelled context ignored")
	}
}

// FuzzPDFNeverPanics: whatever the bytes, PDFPages returns (an error or
// text) and never panics. Seeds are real writer output, hand-built
// structures and their truncations.
func FuzzPDFNeverPanics(f *testing.F) {
	seeds := [][]byte{
		genPDF(f, []string{"fuzz seed text", "", "page three"}, pdfOpts{compress: true}),
		genPDF(f, []string{"uncompressed"}, pdfOpts{}),
		genPDF(f, []string{"protected"}, pdfOpts{protect: true}),
		rawPDF("%PDF-1.4", "<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [2 0 R] /Count 1 >>"),
		rawPDF("%PDF-1.7", "<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
			stream("BT /F1 12 Tf 1 0 0 1 72 700 Tm [(a)-500(b)] TJ (c) ' 1 2 (d) \" ET"), helv),
		[]byte("%PDF-1.4\n%%EOF\n"),
	}
	for _, s := range seeds {
		f.Add(s)
		f.Add(s[:len(s)/3])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pages, err := PDFPages(context.Background(), data)
		if err == nil {
			for _, p := range pages {
				if !strings.Contains(p, "\x00") && !utfValid(p) {
					t.Fatalf("invalid UTF-8 page text %q", p)
				}
			}
		}
	})
}

func utfValid(s string) bool { return strings.ToValidUTF8(s, "") == s }
