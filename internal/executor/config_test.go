package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/executor/extractors"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeScript(t, filepath.Join(dir, "bin"), "up.sh", `tr a-z A-Z > /dev/null
printf '{"features":[{"name":"meta","value":%s}]}' "$INDEXIFY_INPUT_PARAMS"
`)
	cfgPath := filepath.Join(dir, "executor.yaml")
	writeFile(t, cfgPath, `
id: exec-7
coordinators: ["127.0.0.1:8950", "dns:coord:8950"]
api_server: http://127.0.0.1:8900
advertise: 127.0.0.1:9501
max_pending_tasks: 3
concurrency: 2
heartbeat_interval: 2s
extractors:
  - name: acme/upper
    description: Upper-cases text
    command: ["./bin/up.sh", "--flag"]
    input_mime_types: [text/plain]
    input_params_schema:
      type: object
      properties:
        lang: {type: string, enum: [en, de]}
    outputs:
      meta: {metadata: {type: object}}
      vec: {embedding: {dim: 3, distance: cosine}}
    timeout: 90s
    max_output_bytes: 1024
  - name: acme/json-schema-string
    command: ["/bin/cat"]
    input_params_schema: '{"type":"object","required":["k"]}'
    timeout: 10
`)
	fc, err := LoadConfigFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := fc.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "exec-7" || strings.Join(cfg.Coordinators, ",") != "127.0.0.1:8950,dns:coord:8950" || cfg.APIServer != "http://127.0.0.1:8900" ||
		cfg.Advertise != "127.0.0.1:9501" || cfg.MaxPendingTasks != 3 || cfg.Concurrency != 2 || cfg.HeartbeatInterval != 2*time.Second {
		t.Fatalf("config %+v", cfg)
	}
	if nb := len(Builtins()); len(cfg.Extractors) != nb+2 || cfg.Extractors[0].Describe().GetName() != extractors.ChunkerName {
		t.Fatalf("extractors: built-ins then the file's, got %d", len(cfg.Extractors))
	}
	up := cfg.Extractors[len(Builtins())].Describe()
	if up.GetName() != "acme/upper" || up.GetDescription() != "Upper-cases text" || up.GetInputMimeTypes()[0] != "text/plain" {
		t.Fatalf("description %v", up)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(up.GetInputParamsSchemaJson()), &schema); err != nil || schema["type"] != "object" {
		t.Fatalf("schema %s (%v)", up.GetInputParamsSchemaJson(), err)
	}
	if up.GetOutputs()["meta"].GetMetadataSchemaJson() != `{"type":"object"}` || up.GetOutputs()["vec"].GetEmbedding().GetDim() != 3 {
		t.Fatalf("outputs %v", up.GetOutputs())
	}
	if s := cfg.Extractors[len(Builtins())+1].Describe().GetInputParamsSchemaJson(); s != `{"type":"object","required":["k"]}` {
		t.Fatalf("string schema %s", s)
	}
	// The relative command resolved against the file's folder, and the
	// schema from YAML is enforced.
	x := cfg.Extractors[len(Builtins())]
	task := &pb.Task{Id: "t"}
	out, err := x.Extract(context.Background(), Input{Task: task, Data: []byte("abc"), Params: json.RawMessage(`{"lang":"en"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Features) != 1 || out.Features[0].GetValueJson() != `{"lang":"en"}` {
		t.Fatalf("output %+v", out)
	}
	if _, err := x.Extract(context.Background(), Input{Task: task, Params: json.RawMessage(`{"lang":"fr"}`)}); err == nil {
		t.Fatal("schema from YAML not enforced")
	}

	// Disabling the built-ins leaves only the file's extractors; a comma
	// string works for coordinators.
	fc, err = ParseConfig([]byte("disable_builtins: true\ncoordinators: 'a:1, b:2'\nextractors:\n  - name: x\n    command: [/bin/cat]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = fc.Config()
	if err != nil || len(cfg.Extractors) != 1 || strings.Join(cfg.Coordinators, ",") != "a:1,b:2" {
		t.Fatalf("config %+v %v", cfg, err)
	}
	if fc, err := ParseConfig(nil); err != nil || len(fc.External) != 0 {
		t.Fatalf("empty file: %v", err)
	}
}

func TestConfigFileErrors(t *testing.T) {
	parseErrors := map[string]string{
		"unknown key":      "extractors:\n  - name: x\n    comand: [/bin/cat]\n",
		"no command":       "extractors:\n  - name: x\n",
		"command string":   "extractors:\n  - name: x\n    command: /bin/cat -n\n",
		"no name":          "extractors:\n  - command: [/bin/cat]\n",
		"duplicate":        "extractors:\n  - {name: x, command: [/bin/cat]}\n  - {name: x, command: [/bin/cat]}\n",
		"bad duration":     "heartbeat_interval: soon\n",
		"negative timeout": "extractors:\n  - {name: x, command: [/bin/cat], timeout: -5s}\n",
		"negative pending": "max_pending_tasks: -1\n",
		"not yaml":         "extractors: [\n",
	}
	for name, text := range parseErrors {
		if _, err := ParseConfig([]byte(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	buildErrors := map[string]string{
		"missing program":   "extractors:\n  - {name: x, command: [/no/such/program]}\n",
		"bad schema":        "extractors:\n  - {name: x, command: [/bin/cat], input_params_schema: {type: 12}}\n",
		"schema string":     "extractors:\n  - {name: x, command: [/bin/cat], input_params_schema: 'not json'}\n",
		"non-string key":    "extractors:\n  - {name: x, command: [/bin/cat], input_params_schema: {1: a}}\n",
		"output both kinds": "extractors:\n  - {name: x, command: [/bin/cat], outputs: {o: {metadata: {}, embedding: {dim: 1}}}}\n",
		"output neither":    "extractors:\n  - {name: x, command: [/bin/cat], outputs: {o: {}}}\n",
	}
	for name, text := range buildErrors {
		fc, err := ParseConfig([]byte(text))
		if err != nil {
			t.Errorf("%s: parse failed early: %v", name, err)
			continue
		}
		if _, err := fc.Extractors(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}
