package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/indexify-go/indexify/internal/embed"
	"github.com/indexify-go/indexify/internal/executor/extractors"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// FileConfig is the executor's YAML configuration file:
//
//	id: exec-1                       # optional
//	coordinators: ["10.0.0.1:8950", "dns:indexify-coordinator:8950"]
//	api_server: http://127.0.0.1:8900
//	advertise: 10.0.0.9:9501
//	max_pending_tasks: 20
//	concurrency: 4
//	heartbeat_interval: 5s
//	disable_builtins: false
//	openai_embedding:                # defaults for tensorlake/openai-embedding where params leave them out
//	  base_url: http://127.0.0.1:11434
//	  model: nomic-embed-text
//	  api_key_file: /etc/indexify/openai.key   # used when params name none; relative: from this file's folder
//	  key_dir: /etc/indexify/keys              # where a params' api_key_file (a plain name) is looked up
//	extractors:
//	  - name: acme/summarize
//	    description: Summarises text
//	    command: ["./summarize.py", "--fast"]   # relative paths: from this file's folder
//	    input_mime_types: ["text/plain"]
//	    input_params_schema: {type: object, properties: {max_words: {type: integer}}}
//	    outputs:
//	      summary_meta: {metadata: {type: object}}
//	      embedding: {embedding: {dim: 384, distance: cosine}}
//	    timeout: 2m
//	    max_output_bytes: 67108864
//
// Unknown keys are errors, so a typo does not silently fall back to a default.
type FileConfig struct {
	ID                string         `yaml:"id"`
	Coordinators      StringList     `yaml:"coordinators"`
	APIServer         string         `yaml:"api_server"`
	Advertise         string         `yaml:"advertise"`
	MaxPendingTasks   int            `yaml:"max_pending_tasks"`
	Concurrency       int            `yaml:"concurrency"`
	HeartbeatInterval Duration       `yaml:"heartbeat_interval"`
	DisableBuiltins   bool           `yaml:"disable_builtins"`
	External          []ExternalSpec `yaml:"extractors"`
	OpenAIEmbedding   OpenAISpec     `yaml:"openai_embedding"`

	dir string // folder of the file, for relative command paths
}

// OpenAISpec is the executor-side configuration of the OpenAI-compatible
// embedding extractor.
type OpenAISpec struct {
	BaseURL    string `yaml:"base_url"`
	Model      string `yaml:"model"`
	APIKeyFile string `yaml:"api_key_file"`
	KeyDir     string `yaml:"key_dir"`
}

// OpenAIDefaults returns the file's openai_embedding section, relative paths
// resolved against the file's folder.
func (fc FileConfig) OpenAIDefaults() embed.OpenAIDefaults {
	d := embed.OpenAIDefaults(fc.OpenAIEmbedding)
	for _, p := range []*string{&d.APIKeyFile, &d.KeyDir} {
		if *p != "" && !filepath.IsAbs(*p) && fc.dir != "" {
			*p = filepath.Join(fc.dir, *p)
		}
	}
	return d
}

// ExternalSpec is one external extractor in the file.
type ExternalSpec struct {
	Name              string                `yaml:"name"`
	Description       string                `yaml:"description"`
	Command           []string              `yaml:"command"`
	InputMimeTypes    []string              `yaml:"input_mime_types"`
	InputParamsSchema yaml.Node             `yaml:"input_params_schema"`
	Outputs           map[string]OutputSpec `yaml:"outputs"`
	Timeout           Duration              `yaml:"timeout"`
	MaxOutputBytes    int64                 `yaml:"max_output_bytes"`
}

// OutputSpec declares one output of an extractor: an embedding or metadata
// with a JSON schema.
type OutputSpec struct {
	Embedding *struct {
		Dim      uint32 `yaml:"dim"`
		Distance string `yaml:"distance"`
	} `yaml:"embedding"`
	Metadata yaml.Node `yaml:"metadata"`
}

// Duration accepts "90s"/"5m" or a number of seconds.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a duration must be a scalar such as 30s or 5m", n.Line)
	}
	if v, err := time.ParseDuration(n.Value); err == nil {
		*d = Duration(v)
	} else {
		var secs float64
		if err := n.Decode(&secs); err != nil {
			return fmt.Errorf("line %d: invalid duration %q (use e.g. 30s or 5m)", n.Line, n.Value)
		}
		*d = Duration(time.Duration(secs * float64(time.Second)))
	}
	if *d < 0 {
		return fmt.Errorf("line %d: duration %q must not be negative", n.Line, n.Value)
	}
	return nil
}

// StringList accepts a YAML list or one comma-separated string.
type StringList []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (l *StringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = nil
		for _, s := range strings.Split(n.Value, ",") {
			if s = strings.TrimSpace(s); s != "" {
				*l = append(*l, s)
			}
		}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*l = list
	return nil
}

// LoadConfigFile reads and validates an executor YAML file. External
// extractors are checked (command exists, schemas compile) by Extractors.
func LoadConfigFile(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, err
	}
	fc, err := ParseConfig(b)
	if err != nil {
		return FileConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	if abs, err := filepath.Abs(filepath.Dir(path)); err == nil {
		fc.dir = abs
	}
	return fc, nil
}

// ParseConfig parses executor YAML; relative command paths are kept as
// they are (LoadConfigFile resolves them against the file's folder).
func ParseConfig(b []byte) (FileConfig, error) {
	var fc FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return FileConfig{}, fmt.Errorf("invalid executor config: %w", err)
	}
	if fc.MaxPendingTasks < 0 || fc.Concurrency < 0 {
		return FileConfig{}, errors.New("invalid executor config: max_pending_tasks and concurrency must not be negative")
	}
	seen := map[string]bool{}
	for i, s := range fc.External {
		if strings.TrimSpace(s.Name) == "" {
			return FileConfig{}, fmt.Errorf("invalid executor config: extractors[%d]: name is required", i)
		}
		if seen[s.Name] {
			return FileConfig{}, fmt.Errorf("invalid executor config: extractor %q listed twice", s.Name)
		}
		seen[s.Name] = true
		if len(s.Command) == 0 || s.Command[0] == "" {
			return FileConfig{}, fmt.Errorf("invalid executor config: extractor %q: command is required (a list: [program, args...])", s.Name)
		}
	}
	return fc, nil
}

// Extractors builds the external extractors of the file (not the
// built-ins).
func (fc FileConfig) Extractors() ([]Extractor, error) {
	var out []Extractor
	for _, s := range fc.External {
		cfg, err := fc.externalConfig(s)
		if err != nil {
			return nil, err
		}
		x, err := extractors.NewExternal(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func (fc FileConfig) externalConfig(s ExternalSpec) (extractors.ExternalConfig, error) {
	cfg := extractors.ExternalConfig{
		Name:           s.Name,
		Description:    s.Description,
		Command:        append([]string(nil), s.Command...),
		InputMimeTypes: s.InputMimeTypes,
		Timeout:        time.Duration(s.Timeout),
		MaxOutputBytes: s.MaxOutputBytes,
	}
	if p := cfg.Command[0]; fc.dir != "" && strings.Contains(p, "/") && !filepath.IsAbs(p) {
		cfg.Command[0] = filepath.Join(fc.dir, p)
	}
	schema, err := nodeJSON(&s.InputParamsSchema)
	if err != nil {
		return cfg, fmt.Errorf("extractor %q: input_params_schema: %w", s.Name, err)
	}
	cfg.InputParamsSchema = schema
	for name, o := range s.Outputs {
		out := &pb.ExtractorOutput{}
		if o.Embedding != nil {
			out.Embedding = &pb.EmbeddingSchema{Dim: o.Embedding.Dim, Distance: o.Embedding.Distance}
		}
		meta, err := nodeJSON(&o.Metadata)
		if err != nil {
			return cfg, fmt.Errorf("extractor %q: output %q: metadata: %w", s.Name, name, err)
		}
		out.MetadataSchemaJson = string(meta)
		if (out.Embedding == nil) == (meta == nil) {
			return cfg, fmt.Errorf("extractor %q: output %q: set exactly one of embedding or metadata", s.Name, name)
		}
		if cfg.Outputs == nil {
			cfg.Outputs = map[string]*pb.ExtractorOutput{}
		}
		cfg.Outputs[name] = out
	}
	return cfg, nil
}

// nodeJSON converts a YAML value (an object, or a string holding JSON) to
// JSON text; nil when the key was absent.
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil, nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		if !json.Valid([]byte(n.Value)) {
			return nil, errors.New("a string value must hold JSON")
		}
		return json.RawMessage(n.Value), nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	v, err := jsonable(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// jsonable turns YAML-decoded values into ones encoding/json accepts
// (mappings with non-string keys are rejected: JSON objects cannot hold
// them).
func jsonable(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("object key %v is not a string", k)
			}
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	default:
		return v, nil
	}
}

// Config turns the file into a runtime Config: the built-ins (unless
// disabled) followed by the file's external extractors. Logger and
// HTTP tuning are left to the caller.
func (fc FileConfig) Config() (Config, error) {
	var xs []Extractor
	if !fc.DisableBuiltins {
		xs = BuiltinsWith(fc.OpenAIDefaults())
	}
	more, err := fc.Extractors()
	if err != nil {
		return Config{}, err
	}
	return Config{
		ID:                fc.ID,
		Coordinators:      fc.Coordinators,
		APIServer:         fc.APIServer,
		Advertise:         fc.Advertise,
		MaxPendingTasks:   fc.MaxPendingTasks,
		Concurrency:       fc.Concurrency,
		HeartbeatInterval: time.Duration(fc.HeartbeatInterval),
		Extractors:        append(xs, more...),
	}, nil
}
