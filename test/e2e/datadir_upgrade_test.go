package e2e

// Upgrade in place (issue 15 item 4): a data directory written by an
// earlier release must open with this binary and answer exactly as it did.
// testdata/devdata-<date>.tar.gz is the data dir of `indexify dev` as that
// release left it after the scenario below (its Raft log holds a snapshot,
// written with the snapshot format of that release, and log entries after
// it; blobs, vector index and SQL store beside them), and
// testdata/devdata-<date>.json what the API answered before it stopped.
// The test starts this binary on a copy and asks the same questions.
//
// To record a new fixture (only when the previous one is kept too, so
// every release's data dir stays covered): INDEXIFY_WRITE_GOLDEN=1 go test
// -run TestDevStartsOnDataDirOfEarlierRelease ./test/e2e, on the release
// that writes it.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/indexify-go/indexify/internal/wire"
	"github.com/indexify-go/indexify/test/harness"
)

// upgradeFixtures lists the recorded data dirs, oldest first.
var upgradeFixtures = []string{"devdata-2026-12-07"}

const upgradeNS = "upgrade"

var three = 3

const upgradeGraph = `name: notes
extraction_policies:
  - extractor: tensorlake/chunk-extractor
    name: chunks
    input_params: {chunk_size: 80, overlap: 0}
  - extractor: tensorlake/lexical-embedding
    name: embeddings
    content_source: chunks
  - extractor: tensorlake/attributes
    name: stats
    content_source: chunks
`

var upgradeNotes = map[string]string{
	"n1": "Bring an umbrella tomorrow. The weather forecast says heavy rain in the afternoon.",
	"n2": "Buy milk, eggs and bread at the corner shop before it closes at six in the evening.",
	"n3": "The umbrella stand by the door is broken; ask the landlord to replace it this week.",
	"n4": "Rain again on Friday: move the picnic indoors and bring the big umbrella along too.",
}

// upgradeAnswers is what the API answered on the data dir.
type upgradeAnswers struct {
	Content []wire.Content                        `json:"content"`
	Tasks   map[string][]wire.Task                `json:"tasks"`
	Search  []wire.SearchResult                   `json:"search"`
	SQL     wire.SQLResult                        `json:"sql"`
	Labels  map[string]map[string]json.RawMessage `json:"labels"`
}

func TestDevStartsOnDataDirOfEarlierRelease(t *testing.T) {
	if os.Getenv("INDEXIFY_WRITE_GOLDEN") == "1" {
		writeUpgradeFixture(t, upgradeFixtures[len(upgradeFixtures)-1])
	}
	for _, name := range upgradeFixtures {
		t.Run(name, func(t *testing.T) {
			var want upgradeAnswers
			b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "data")
			untarGz(t, filepath.Join("testdata", name+".tar.gz"), dir)
			dev := harness.StartDev(t, dir)
			got := upgradeAsk(t, dev.API)
			gj, _ := json.MarshalIndent(got, "", " ")
			wj, _ := json.MarshalIndent(want, "", " ")
			if !bytes.Equal(gj, wj) {
				t.Fatalf("this binary answers differently on the data dir of %s:\n%s", name, lineDiff(string(wj), string(gj)))
			}
			// It keeps working on it: a new upload is extracted and found.
			upload(t, dev.API, upgradeNS, "notes", "after-upgrade", []byte("A brand new note about umbrellas after the upgrade."), nil)
			waitContent(t, dev.API, upgradeNS, "after-upgrade")
		})
	}
}

// upgradeAsk asks the questions whose answers the fixture recorded.
func upgradeAsk(t *testing.T, api *harness.HTTP) upgradeAnswers {
	t.Helper()
	a := upgradeAnswers{Tasks: map[string][]wire.Task{}, Labels: map[string]map[string]json.RawMessage{}}
	a.Content = listContent(t, api, upgradeNS, "notes")
	sort.Slice(a.Content, func(i, j int) bool { return a.Content[i].ID < a.Content[j].ID })
	for _, p := range []string{"chunks", "embeddings", "stats"} {
		ts := tasks(t, api, upgradeNS, "notes", p)
		sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
		a.Tasks[p] = ts
	}
	code, res, body := search(t, api, upgradeNS, "notes.embeddings.embedding", wire.SearchRequest{Query: "umbrella rain", K: &three})
	mustStatus(t, http.StatusOK, code, body, nil, "search")
	a.Search = res
	code, rows, body, err := sqlQuery(api, upgradeNS, "select content_id, words from notes order by content_id")
	mustStatus(t, http.StatusOK, code, body, err, "sql")
	a.SQL = rows
	for _, id := range []string{"n1", "n3", "n4"} {
		a.Labels[id] = metadata(t, api, upgradeNS, id).Labels
	}
	return a
}

// writeUpgradeFixture runs the scenario on a fresh `indexify dev`, forces a
// Raft snapshot half way (`cluster snapshot save` takes one), stops it and
// records the data dir and the answers.
func writeUpgradeFixture(t *testing.T, name string) {
	dir := filepath.Join(t.TempDir(), "data")
	dev := harness.StartDev(t, dir)
	api := dev.API
	code, body, err := api.JSON(http.MethodPost, "/namespaces", wire.NamespaceRequest{Name: upgradeNS}, nil)
	mustStatus(t, http.StatusOK, code, body, err, "create namespace")
	createGraphYAML(t, api, upgradeNS, upgradeGraph)
	for _, id := range []string{"n1", "n2", "n3"} {
		upload(t, api, upgradeNS, "notes", id, []byte(upgradeNotes[id]), map[string]any{"kind": "note", "n": len(id)})
		waitContent(t, api, upgradeNS, id)
	}
	snap := filepath.Join(t.TempDir(), "s.snap")
	if out, err := exec.Command(harness.Binary(t), "cluster", "snapshot", "save", snap, "--coordinator", dev.GRPC).CombinedOutput(); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	upload(t, api, upgradeNS, "notes", "n4", []byte(upgradeNotes["n4"]), map[string]any{"kind": "note"})
	waitContent(t, api, upgradeNS, "n4")
	code, body, err = api.JSON(http.MethodPut, "/namespaces/"+upgradeNS+"/content/n1/labels",
		map[string]any{"labels": map[string]any{"kind": "todo", "done": false}}, nil)
	mustStatus(t, http.StatusOK, code, body, err, "update labels")
	code, body, err = api.JSON(http.MethodDelete, "/namespaces/"+upgradeNS+"/content", wire.ContentIDs{ContentIDs: []string{"n2"}}, nil)
	mustStatus(t, http.StatusOK, code, body, err, "delete")
	// Let the deletion reach the indexes (n2's two chunks leave SQL and
	// search), so the recorded answers are final.
	harness.Eventually(t, 90*time.Second, "n2's chunks gone from SQL and search", func() error {
		_, rows, _, err := sqlQuery(api, upgradeNS, "select content_id from notes")
		if err != nil {
			return err
		}
		if len(rows.Rows) != 6 {
			return fmt.Errorf("%d SQL rows, want 6", len(rows.Rows))
		}
		_, res, _ := search(t, api, upgradeNS, "notes.embeddings.embedding", wire.SearchRequest{Query: "milk eggs bread shop", K: &three})
		for _, r := range res {
			if strings.Contains(r.Text, "milk") || strings.Contains(r.Text, "closes at six") {
				return fmt.Errorf("n2's chunk %s still found", r.ContentID)
			}
		}
		return nil
	})
	answers := upgradeAsk(t, api)
	dev.Proc.Signal(15)
	if !dev.Proc.Wait(30 * time.Second) {
		t.Fatal("indexify dev did not stop on SIGTERM")
	}
	b, _ := json.MarshalIndent(answers, "", " ")
	if err := os.WriteFile(filepath.Join("testdata", name+".json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	tarGz(t, dir, filepath.Join("testdata", name+".tar.gz"))
}

func tarGz(t *testing.T, dir, out string) {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uname, h.Gname, h.Uid, h.Gid = filepath.ToSlash(rel), time.Unix(0, 0), "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = os.WriteFile(out, buf.Bytes(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func untarGz(t *testing.T, in, dir string) {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("fixture entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o700)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
				var out *os.File
				if out, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(h.Mode)&0o700|0o600); err == nil {
					_, err = io.Copy(out, tr)
					if cerr := out.Close(); err == nil {
						err = cerr
					}
				}
			}
		default:
			t.Fatalf("fixture entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// lineDiff shows the lines of want and got that differ (a short context).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			out = append(out, fmt.Sprintf("line %d:\n  want %s\n  got  %s", i+1, a, b))
			if len(out) == 20 {
				out = append(out, "...")
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
