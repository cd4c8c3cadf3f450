package extractors

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// Defaults for external extractors.
const (
	DefaultExternalTimeout = 5 * time.Minute
	DefaultMaxOutputBytes  = 64 << 20
	stderrTailBytes        = 2048
	// killGrace bounds how long Wait lingers for pipes held open by
	// descendants after the process exited or was killed.
	killGrace = 2 * time.Second
)

// Environment variables an external extractor receives besides its
// content on stdin.
const (
	EnvInputParams    = "INDEXIFY_INPUT_PARAMS"
	EnvMimeType       = "INDEXIFY_MIME_TYPE"
	EnvContentID      = "INDEXIFY_CONTENT_ID"
	EnvContentVersion = "INDEXIFY_CONTENT_VERSION"
	EnvTaskID         = "INDEXIFY_TASK_ID"
	EnvNamespace      = "INDEXIFY_NAMESPACE"
	EnvPolicy         = "INDEXIFY_POLICY"
)

// ExternalConfig describes an extractor implemented by an executable.
type ExternalConfig struct {
	Name              string
	Description       string
	Command           []string // argv; Command[0] is looked up in PATH unless it contains a slash
	InputMimeTypes    []string // empty = any
	InputParamsSchema json.RawMessage
	Outputs           map[string]*pb.ExtractorOutput
	Timeout           time.Duration // 0 = DefaultExternalTimeout
	MaxOutputBytes    int64         // 0 = DefaultMaxOutputBytes
}

// External runs an executable per task: the content on stdin, parameters in
// the environment, and a JSON document (see externalOutput) on stdout.
type External struct {
	desc    *pb.ExtractorDescription
	argv    []string
	schema  *jsonschema.Schema
	timeout time.Duration
	maxOut  int64
}

// NewExternal validates cfg: the command must exist and the params schema
// must compile, so a broken config fails at startup rather than per task.
func NewExternal(cfg ExternalConfig) (*External, error) {
	if strings.TrimSpace(cfg.Name) == "" {
		return nil, errors.New("external extractor: name is required")
	}
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, fmt.Errorf("external extractor %q: command is required", cfg.Name)
	}
	path, err := exec.LookPath(cfg.Command[0])
	if err != nil {
		return nil, fmt.Errorf("external extractor %q: command %q: %v", cfg.Name, cfg.Command[0], err)
	}
	if cfg.Timeout < 0 || cfg.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("external extractor %q: timeout and max output must not be negative", cfg.Name)
	}
	schemaText := bytes.TrimSpace(cfg.InputParamsSchema)
	if len(schemaText) == 0 {
		schemaText = []byte(`{"type":"object"}`)
	}
	schema, err := compileSchema(schemaText)
	if err != nil {
		return nil, fmt.Errorf("external extractor %q: input params schema: %v", cfg.Name, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, schemaText); err != nil {
		return nil, fmt.Errorf("external extractor %q: input params schema: %v", cfg.Name, err)
	}
	for name, o := range cfg.Outputs {
		if name == "" || o == nil || (o.GetEmbedding() == nil && o.GetMetadataSchemaJson() == "") {
			return nil, fmt.Errorf("external extractor %q: output %q must be an embedding or a metadata schema", cfg.Name, name)
		}
		if s := o.GetMetadataSchemaJson(); s != "" && !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("external extractor %q: output %q: metadata schema is not valid JSON", cfg.Name, name)
		}
	}
	x := &External{
		desc: &pb.ExtractorDescription{
			Name:                  cfg.Name,
			Description:           cfg.Description,
			InputParamsSchemaJson: compact.String(),
			InputMimeTypes:        append([]string(nil), cfg.InputMimeTypes...),
			Outputs:               cfg.Outputs,
		},
		argv:    append([]string{path}, cfg.Command[1:]...),
		schema:  schema,
		timeout: cfg.Timeout,
		maxOut:  cfg.MaxOutputBytes,
	}
	if x.timeout == 0 {
		x.timeout = DefaultExternalTimeout
	}
	if x.maxOut == 0 {
		x.maxOut = DefaultMaxOutputBytes
	}
	return x, nil
}

func compileSchema(text []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	const loc = "indexify:///input_params.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// Describe implements Extractor.
func (x *External) Describe() *pb.ExtractorDescription { return x.desc }

// Extract implements Extractor. The process runs in its own process group so
// that a timeout or cancellation kills everything it started.
func (x *External) Extract(ctx context.Context, in Input) (*Output, error) {
	name := x.desc.GetName()
	params, err := paramsObject(in.Params)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("input params: %v", err)
	}
	if err := x.schema.Validate(doc); err != nil {
		return nil, fmt.Errorf("input params do not match the schema of %s: %v", name, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, params); err != nil {
		return nil, fmt.Errorf("input params: %v", err)
	}

	runCtx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	stdout := &limitedBuffer{max: x.maxOut, onOverflow: cancel}
	stderr := &tailBuffer{keep: stderrTailBytes}
	cmd := exec.CommandContext(runCtx, x.argv[0], x.argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = killGrace
	cmd.Stdin = bytes.NewReader(in.Data)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	t := in.Task
	cmd.Env = append(os.Environ(),
		EnvInputParams+"="+compact.String(),
		EnvMimeType+"="+in.MimeType,
		EnvContentID+"="+t.GetContentId(),
		EnvContentVersion+"="+strconv.FormatUint(t.GetContentVersion(), 10),
		EnvTaskID+"="+t.GetId(),
		EnvNamespace+"="+t.GetNamespace(),
		EnvPolicy+"="+t.GetPolicyName(),
	)
	runErr := cmd.Run()
	if errors.Is(runErr, exec.ErrWaitDelay) && cmd.Process != nil {
		// The extractor exited but left descendants holding its output
		// pipes; they are still alive, so the group id is still theirs.
		_ = killGroup(cmd)
	}
	switch {
	case stdout.overflowed():
		return nil, fmt.Errorf("extractor %s: output exceeded the limit of %d bytes%s", name, x.maxOut, stderr.suffix())
	case ctx.Err() != nil:
		return nil, fmt.Errorf("extractor %s: cancelled: %w", name, ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("extractor %s: timed out after %s%s", name, x.timeout, stderr.suffix())
	case runErr != nil && !errors.Is(runErr, exec.ErrWaitDelay):
		return nil, fmt.Errorf("extractor %s: %v%s", name, runErr, stderr.suffix())
	}
	out, err := parseExternalOutput(stdout.bytes())
	if err != nil {
		return nil, fmt.Errorf("extractor %s: invalid output: %v%s", name, err, stderr.suffix())
	}
	return out, nil
}

// killGroup SIGKILLs the process group led by cmd's process.
func killGroup(cmd *exec.Cmd) error {
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// externalOutput is the stdout document of an external extractor.
type externalOutput struct {
	Content  []externalContent `json:"content"`
	Features []externalFeature `json:"features"`
}

type externalContent struct {
	Text       *string                    `json:"text"`
	DataBase64 *string                    `json:"data_base64"`
	MimeType   string                     `json:"mime_type"`
	Labels     map[string]json.RawMessage `json:"labels"`
	Features   []externalFeature          `json:"features"`
}

type externalFeature struct {
	Name      string          `json:"name"`
	Embedding bool            `json:"embedding"`
	Value     json.RawMessage `json:"value"`
}

func parseExternalOutput(b []byte) (*Output, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty stdout (expected a JSON object)")
	}
	var doc externalOutput
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("stdout is not the expected JSON object: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("unexpected data after the JSON object on stdout")
	}
	out := &Output{}
	var err error
	if out.Features, err = convertFeatures(doc.Features, "features"); err != nil {
		return nil, err
	}
	for i, c := range doc.Content {
		where := fmt.Sprintf("content[%d]", i)
		oc := OutContent{MimeType: c.MimeType, Labels: c.Labels}
		switch {
		case c.Text != nil && c.DataBase64 != nil:
			return nil, fmt.Errorf("%s: set either text or data_base64, not both", where)
		case c.Text != nil:
			oc.Data = []byte(*c.Text)
			if oc.MimeType == "" {
				oc.MimeType = "text/plain"
			}
		case c.DataBase64 != nil:
			if oc.Data, err = base64.StdEncoding.DecodeString(*c.DataBase64); err != nil {
				return nil, fmt.Errorf("%s: data_base64: %v", where, err)
			}
			if oc.MimeType == "" {
				oc.MimeType = "application/octet-stream"
			}
		default:
			return nil, fmt.Errorf("%s: needs text or data_base64", where)
		}
		for k := range c.Labels {
			if k == "" {
				return nil, fmt.Errorf("%s: empty label name", where)
			}
		}
		if oc.Features, err = convertFeatures(c.Features, where+".features"); err != nil {
			return nil, err
		}
		out.Contents = append(out.Contents, oc)
	}
	return out, nil
}

func convertFeatures(fs []externalFeature, where string) ([]*pb.Feature, error) {
	var out []*pb.Feature
	for i, f := range fs {
		if f.Name == "" {
			return nil, fmt.Errorf("%s[%d]: name is required", where, i)
		}
		if len(f.Value) == 0 {
			return nil, fmt.Errorf("%s[%d] (%s): value is required", where, i, f.Name)
		}
		if f.Embedding {
			var nums []float64
			if err := json.Unmarshal(f.Value, &nums); err != nil {
				return nil, fmt.Errorf("%s[%d] (%s): an embedding value must be an array of numbers", where, i, f.Name)
			}
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, f.Value); err != nil {
			return nil, fmt.Errorf("%s[%d] (%s): %v", where, i, f.Name, err)
		}
		out = append(out, &pb.Feature{Name: f.Name, Embedding: f.Embedding, ValueJson: compact.String()})
	}
	return out, nil
}

// limitedBuffer collects stdout up to max bytes. Past the limit it discards
// (so the child does not block on a full pipe) and calls onOverflow once to
// kill the child.
type limitedBuffer struct {
	mu         sync.Mutex
	buf        bytes.Buffer
	max        int64
	over       bool
	onOverflow func()
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over {
		return len(p), nil
	}
	if int64(l.buf.Len())+int64(len(p)) > l.max {
		l.over = true
		l.buf.Reset()
		l.onOverflow()
		return len(p), nil
	}
	return l.buf.Write(p)
}

func (l *limitedBuffer) overflowed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.over
}

func (l *limitedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Bytes()
}

// tailBuffer keeps the last keep bytes written: the end of stderr is where
// tools usually print the reason they failed.
type tailBuffer struct {
	mu   sync.Mutex
	keep int
	buf  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.keep {
		t.buf = append(t.buf[:0], p[len(p)-t.keep:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	// Trim lazily (at twice the size) so each write is amortised O(len(p)).
	if len(t.buf) > 2*t.keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.keep:]...)
	}
	return len(p), nil
}

// String returns the kept tail, starting at a character boundary.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.keep {
		b = b[len(b)-t.keep:]
	}
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return strings.ToValidUTF8(strings.TrimSpace(string(b)), "\uFFFD")
}

// suffix formats the stderr tail for error messages ("" when empty).
func (t *tailBuffer) suffix() string {
	s := t.String()
	if s == "" {
		return ""
	}
	return "; stderr: " + s
}
