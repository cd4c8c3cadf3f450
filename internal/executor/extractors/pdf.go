package extractors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ledongthuc/pdf"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// PDFName is the registered name of the PDF text extractor.
const PDFName = "tensorlake/pdf-extractor"

// PDFPageLabel is the label holding a page child's 1-based page number.
const PDFPageLabel = "page"

// Bounds that keep a hostile PDF from exhausting the executor: the input
// itself is already bounded by the executor's MaxContentBytes.
const (
	maxPDFPages = 20000
	// maxPDFTreeDepth bounds the page tree's depth (and so the walk of a
	// cyclic tree, and of a cyclic Parent chain).
	maxPDFTreeDepth = 64
	// maxPDFPageStream bounds a page's decompressed content streams (a small
	// compressed stream can inflate to gigabytes).
	maxPDFPageStream = 64 << 20
	// maxPDFText bounds the text of the whole document.
	maxPDFText = 64 << 20
	// tjSpace: a gap between the end of shown text and the next text wider
	// than tjSpace thousandths of an em (from a TJ adjustment or a move) is
	// a word space; smaller ones are kerning.
	tjSpace = 200
)

var pdfSchema = mustJSON(map[string]any{
	"type":                 "object",
	"properties":           map[string]any{},
	"additionalProperties": false,
})

// PDF extracts the text layer of a PDF, one text/plain child per page that
// has text, labelled page=<1-based number>. It is pure Go. Scanned pages
// (images only) have no text layer and produce no child.
type PDF struct{}

// NewPDF returns the built-in PDF text extractor.
func NewPDF() *PDF { return &PDF{} }

// Describe implements Extractor.
func (*PDF) Describe() *pb.ExtractorDescription {
	return &pb.ExtractorDescription{
		Name: PDFName,
		Description: "Extracts the text of each page of a PDF as a text/plain child labelled page=N (1-based); " +
			"pages without a text layer produce no child. Encrypted PDFs that need a password fail the task.",
		InputParamsSchemaJson: pdfSchema,
		InputMimeTypes:        []string{"application/pdf"},
	}
}

// Extract implements Extractor.
func (*PDF) Extract(ctx context.Context, in Input) (*Output, error) {
	obj, err := paramsObject(in.Params)
	if err != nil {
		return nil, err
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(obj, &params); err != nil {
		return nil, fmt.Errorf("input params: %v", err)
	}
	for k := range params {
		return nil, fmt.Errorf("unknown input param %q (%s takes none)", k, PDFName)
	}
	pages, err := PDFPages(ctx, in.Data)
	if err != nil {
		return nil, err
	}
	out := &Output{}
	for i, text := range pages {
		if strings.TrimSpace(text) == "" {
			continue
		}
		out.Contents = append(out.Contents, OutContent{
			Data:     []byte(text),
			MimeType: "text/plain",
			Labels:   map[string]json.RawMessage{PDFPageLabel: json.RawMessage(strconv.Itoa(i + 1))},
		})
	}
	return out, nil
}

// PDFPages returns the text of every page, in order (pages[0] is page 1).
// A malformed, truncated or password-protected PDF is an error; the parser's
// panics are recovered into errors.
func PDFPages(ctx context.Context, data []byte) (pages []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			pages, err = nil, fmt.Errorf("malformed PDF: %v", r)
		}
	}()
	if !bytes.HasPrefix(data, []byte("%PDF-")) {
		return nil, errors.New("not a PDF: the content does not start with %PDF-")
	}
	if bytes.HasPrefix(data, []byte("%PDF-2.")) && len(data) > 8 {
		// The parser reads PDF 1.0-1.7 headers only; 2.0 files are text-wise
		// the same syntax, so present them as 1.7.
		data = bytes.Clone(data)
		data[5], data[7] = '1', '7'
	}
	r, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if errors.Is(err, pdf.ErrInvalidPassword) {
			return nil, errors.New("encrypted PDF: it needs a password to open, its text cannot be extracted")
		}
		if strings.Contains(err.Error(), "encrypt") {
			return nil, fmt.Errorf("encrypted PDF that cannot be decrypted: %v", err)
		}
		return nil, fmt.Errorf("malformed PDF: %s", strings.TrimPrefix(err.Error(), "malformed PDF: "))
	}
	if r.Trailer().Key("Encrypt").Kind() != pdf.Null {
		// Opened with the empty user password: a decryption the parser
		// gets wrong shows up as garbage, so name the likely cause.
		defer func() {
			if err != nil {
				err = fmt.Errorf("encrypted PDF (no password needed, but it could not be decrypted): %v", err)
			}
		}()
	}
	var vals []pdf.Value
	budget := 2 * maxPDFPages
	if err := collectPages(r.Trailer().Key("Root").Key("Pages"), 0, &vals, &budget); err != nil {
		return nil, err
	}
	total := 0
	for i, v := range vals {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		text, err := pageText(pdf.Page{V: v})
		if err != nil {
			return nil, fmt.Errorf("page %d: %v", i+1, err)
		}
		if total += len(text); total > maxPDFText {
			return nil, fmt.Errorf("PDF text is larger than %d bytes", maxPDFText)
		}
		pages = append(pages, text)
	}
	return pages, nil
}

// collectPages walks the page tree depth-first. Depth and node budgets turn
// a cyclic or absurd tree into an error instead of an endless walk.
func collectPages(node pdf.Value, depth int, out *[]pdf.Value, budget *int) error {
	if depth > maxPDFTreeDepth {
		return fmt.Errorf("malformed PDF: page tree deeper than %d levels (or cyclic)", maxPDFTreeDepth)
	}
	if *budget--; *budget < 0 {
		return fmt.Errorf("PDF has more than %d pages", maxPDFPages)
	}
	kids := node.Key("Kids")
	switch {
	case node.Key("Type").Name() == "Page" || (kids.Kind() != pdf.Array && node.Kind() == pdf.Dict):
		if len(*out) >= maxPDFPages {
			return fmt.Errorf("PDF has more than %d pages", maxPDFPages)
		}
		*out = append(*out, node)
	case kids.Kind() == pdf.Array:
		for i := 0; i < kids.Len(); i++ {
			if err := collectPages(kids.Index(i), depth+1, out, budget); err != nil {
				return err
			}
		}
	case depth == 0:
		return errors.New("malformed PDF: no page tree")
	}
	return nil
}

// pageText interprets a page's content streams: text-showing operators give
// the text; the pen position (advanced by glyph widths) decides between a
// newline (the baseline moved), a space (a gap on the same line) and nothing.
func pageText(p pdf.Page) (text string, err error) {
	defer func() {
		if r := recover(); r != nil {
			text, err = "", fmt.Errorf("malformed PDF: %v", r)
		}
	}()
	// The parser looks inherited attributes up along Parent links without a
	// bound; refuse a chain that could be cyclic before asking it.
	v := p.V
	for i := 0; !v.IsNull(); i++ {
		if i > maxPDFTreeDepth+1 {
			return "", errors.New("malformed PDF: Parent chain too long (or cyclic)")
		}
		v = v.Key("Parent")
	}
	contents := p.V.Key("Contents")
	if contents.Kind() == pdf.Null {
		return "", nil
	}
	if err := checkStreamSize(contents); err != nil {
		return "", err
	}
	fontDict := p.Resources().Key("Font")
	fonts := map[string]*pdfFont{}
	t := textState{a: 1, d: 1, size: 1}
	var font *pdfFont
	var b strings.Builder
	show := func(raw string) {
		t.separate(&b)
		if font != nil && font.enc != nil {
			b.WriteString(font.enc.Decode(raw))
		} else {
			b.WriteString(latin1(raw))
		}
		t.advance(font, raw)
	}
	pdf.Interpret(contents, func(stk *pdf.Stack, op string) {
		args := make([]pdf.Value, stk.Len())
		for i := len(args) - 1; i >= 0; i-- {
			args[i] = stk.Pop()
		}
		num := func(i int) float64 { return args[i].Float64() }
		switch op {
		case "BT":
			t.a, t.d = 1, 1
			t.moveTo(0, 0)
		case "Td", "TD":
			if len(args) == 2 {
				t.moveTo(t.lineX+num(0)*t.a, t.lineY+num(1)*t.d)
				if op == "TD" {
					t.leading = -num(1)
				}
			}
		case "Tm":
			if len(args) == 6 {
				t.a, t.d = math.Hypot(num(0), num(1)), math.Hypot(num(2), num(3))
				t.moveTo(num(4), num(5))
			}
		case "TL":
			if len(args) == 1 {
				t.leading = num(0)
			}
		case "Tc":
			if len(args) == 1 {
				t.charSpace = num(0)
			}
		case "Tw":
			if len(args) == 1 {
				t.wordSpace = num(0)
			}
		case "T*":
			t.nextLine()
		case "Tf":
			if len(args) == 2 {
				name := args[0].Name()
				f, ok := fonts[name]
				if !ok {
					f = loadFont(p, fontDict, name)
					fonts[name] = f
				}
				font, t.size = f, math.Abs(num(1))
			}
		case "Tj":
			if len(args) == 1 {
				show(args[0].RawString())
			}
		case "'":
			if len(args) == 1 {
				t.nextLine()
				show(args[0].RawString())
			}
		case "\"":
			if len(args) == 3 {
				t.wordSpace, t.charSpace = num(0), num(1)
				t.nextLine()
				show(args[2].RawString())
			}
		case "TJ":
			if len(args) == 1 {
				a := args[0]
				for i := 0; i < a.Len(); i++ {
					switch e := a.Index(i); e.Kind() {
					case pdf.String:
						show(e.RawString())
					case pdf.Integer, pdf.Real:
						t.x -= e.Float64() / 1000 * t.size * t.a
					}
				}
			}
		}
	})
	return cleanText(b.String()), nil
}

// textState tracks where text is drawn, enough to tell a line break (the
// baseline moved), a word gap (the pen jumped ahead by more than a fifth of
// the font size) and glyphs that simply follow each other. Positions are in
// user space, ignoring rotation and skew.
type textState struct {
	a, d                 float64 // horizontal and vertical scale of the text matrix
	lineX, lineY         float64 // start of the current line
	x, y                 float64 // the pen
	size, leading        float64
	charSpace, wordSpace float64
	shown                bool
	lastEndX, lastY      float64 // where the previous text ended
}

func (t *textState) moveTo(x, y float64) { t.lineX, t.lineY, t.x, t.y = x, y, x, y }

func (t *textState) nextLine() { t.moveTo(t.lineX, t.lineY-t.leading*t.d) }

// separate writes the newline or space that the pen's move since the last
// text implies.
func (t *textState) separate(b *strings.Builder) {
	if !t.shown || b.Len() == 0 {
		return
	}
	em := t.size * t.a
	switch gap := t.x - t.lastEndX; {
	case math.Abs(t.y-t.lastY) > math.Max(0.5, 0.3*t.size*t.d):
		b.WriteByte('\n')
	case gap > tjSpace/1000.0*em || gap < -em:
		if s := b.String(); !strings.HasSuffix(s, " ") && !strings.HasSuffix(s, "\n") {
			b.WriteByte(' ')
		}
	}
}

// advance moves the pen past the shown codes.
func (t *textState) advance(f *pdfFont, raw string) {
	var w float64
	step := 1
	if f != nil && f.twoByte {
		step = 2
	}
	for i := 0; i < len(raw); i += step {
		code := int(raw[i])
		if step == 2 && i+1 < len(raw) {
			code = code<<8 | int(raw[i+1])
		}
		gw := 500.0 // unknown width: half an em
		if f != nil && code >= f.first && code-f.first < len(f.widths) && f.widths[code-f.first] > 0 {
			gw = f.widths[code-f.first]
		}
		w += gw/1000*t.size + t.charSpace
		if step == 1 && code == ' ' {
			w += t.wordSpace
		}
	}
	t.x += w * t.a
	t.shown, t.lastEndX, t.lastY = true, t.x, t.y
}

// pdfFont is what text extraction needs of a font: its decoding and widths.
type pdfFont struct {
	enc     pdf.TextEncoding
	first   int
	widths  []float64
	twoByte bool // Type0 fonts: two-byte codes (Identity-H and the like)
}

func loadFont(p pdf.Page, fontDict pdf.Value, name string) *pdfFont {
	fv := fontDict.Key(name)
	if fv.Kind() != pdf.Dict {
		return &pdfFont{}
	}
	font := p.Font(name)
	f := &pdfFont{enc: font.Encoder(), twoByte: fv.Key("Subtype").Name() == "Type0"}
	if !f.twoByte {
		f.first = int(fv.Key("FirstChar").Int64())
		ws := fv.Key("Widths")
		for i := 0; i < ws.Len() && i < 65536; i++ {
			f.widths = append(f.widths, ws.Index(i).Float64())
		}
	}
	return f
}

// checkStreamSize refuses content streams that inflate past the bound.
func checkStreamSize(contents pdf.Value) error {
	streams := []pdf.Value{contents}
	if contents.Kind() == pdf.Array {
		streams = streams[:0]
		for i := 0; i < contents.Len() && i < 10000; i++ {
			streams = append(streams, contents.Index(i))
		}
	}
	var total int64
	for _, s := range streams {
		if s.Kind() != pdf.Stream {
			return errors.New("malformed PDF: page contents are not a stream")
		}
		rc := s.Reader()
		n, err := io.Copy(io.Discard, io.LimitReader(rc, maxPDFPageStream-total+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("malformed PDF: reading page contents: %v", err)
		}
		if total += n; total > maxPDFPageStream {
			return fmt.Errorf("page contents inflate to more than %d bytes", maxPDFPageStream)
		}
	}
	return nil
}

// latin1 decodes bytes shown with no known font encoding.
func latin1(raw string) string {
	if utf8.ValidString(raw) {
		return raw
	}
	r := make([]rune, len(raw))
	for i := 0; i < len(raw); i++ {
		r[i] = rune(raw[i])
	}
	return string(r)
}

// cleanText makes the page text valid UTF-8 without control characters
// other than newline and tab, trailing spaces trimmed from lines.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || r == 0xFFFE || r == 0xFFFF {
			return -1
		}
		return r
	}, s)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
