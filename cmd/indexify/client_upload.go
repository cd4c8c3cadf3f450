package main

// `indexify content upload FILE|DIR...`: uploads every regular file (a
// directory is walked recursively) with a progress display on stderr: a
// redrawn bar on a terminal, one plain line per file otherwise (logs, CI).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

type uploadResult struct {
	File      string `json:"file"`
	ContentID string `json:"content_id,omitempty"`
	Size      int64  `json:"size"`
	Error     string `json:"error,omitempty"`
}

func newUploadCmd(o *clientOpts) *cobra.Command {
	var graph, labelsJSON string
	var wait bool
	cmd := &cobra.Command{
		Use:   "upload --graph GRAPH FILE|DIR...",
		Short: "Upload files (directories recursively) as new content of an extraction graph",
		Args:  cobra.MinimumNArgs(1),
		RunE: o.run(func(s *session, cmd *cobra.Command, args []string) error {
			if graph == "" {
				return fmt.Errorf("--graph is required")
			}
			var labels map[string]any
			if labelsJSON != "" {
				if err := json.Unmarshal([]byte(labelsJSON), &labels); err != nil {
					return fmt.Errorf("--labels: want a JSON object: %w", err)
				}
			}
			files, total, err := collectFiles(args)
			if err != nil {
				return err
			}
			if len(files) == 0 {
				return fmt.Errorf("no files to upload in %s", strings.Join(args, ", "))
			}
			prog := newProgress(cmd.ErrOrStderr(), len(files), total)
			var results []uploadResult
			failed := 0
			for i, f := range files {
				res := uploadResult{File: f.path, Size: f.size}
				id, err := uploadOne(s, graph, f.path, labels, func(n int64) { prog.update(i, f.path, n) })
				if err == nil && wait {
					prog.waiting(i, f.path, id)
					err = s.api.WaitContent(s.ctx, s.ns, id)
				}
				res.ContentID = id
				if err != nil {
					res.Error = err.Error()
					failed++
				}
				prog.fileDone(i, f, res)
				results = append(results, res)
				if s.ctx.Err() != nil {
					break
				}
			}
			prog.finish()
			rows := make([][]string, 0, len(results))
			for _, r := range results {
				rows = append(rows, []string{r.File, dash(r.ContentID), fmt.Sprint(r.Size), dash(r.Error)})
			}
			if err := s.out.print(results, []string{"FILE", "CONTENT ID", "SIZE", "ERROR"}, rows); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d uploads failed", failed, len(files))
			}
			return s.ctx.Err()
		}),
	}
	cmd.Flags().StringVarP(&graph, "graph", "g", "", "extraction graph the content is ingested into")
	cmd.Flags().StringVar(&labelsJSON, "labels", "", `labels of every uploaded file, a JSON object, e.g. '{"lang":"en"}'`)
	cmd.Flags().BoolVar(&wait, "wait", false, "after each upload, wait until its extraction has finished (a line on stderr says so)")
	return cmd
}

func uploadOne(s *session, graph, path string, labels map[string]any, progress func(int64)) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return s.api.Upload(s.ctx, s.ns, graph, filepath.Base(path), f, labels, progress)
}

type localFile struct {
	path string
	size int64
}

// collectFiles expands directories into their regular files, in walk order.
func collectFiles(args []string) ([]localFile, int64, error) {
	var out []localFile
	var total int64
	for _, a := range args {
		err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil // directories are walked; links, devices are skipped
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, localFile{path: p, size: info.Size()})
			total += info.Size()
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
	}
	return out, total, nil
}

// progress reports upload progress on w.
type progress struct {
	mu        sync.Mutex
	w         io.Writer
	tty       bool
	files     int
	total     int64
	doneBytes int64 // bytes of finished files
	last      time.Time
}

func newProgress(w io.Writer, files int, total int64) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progress{w: w, tty: tty, files: files, total: total}
}

// update redraws the bar (terminal only, at most 10 times a second).
func (p *progress) update(i int, name string, sent int64) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.draw(i, name, p.doneBytes+sent)
}

func (p *progress) draw(i int, name string, sent int64) {
	const width = 30
	frac := 1.0
	if p.total > 0 {
		frac = min(float64(sent)/float64(p.total), 1)
	}
	filled := int(frac * width)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %3.0f%% %d/%d files %s/%s %s",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100,
		i+1, p.files, humanBytes(sent), humanBytes(p.total), filepath.Base(name))
}

// waiting says that the upload of f is done and its extraction is awaited
// (--wait), which can take far longer than the upload itself.
func (p *progress) waiting(i int, path, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Ksent %s; waiting for the extraction of %s...", filepath.Base(path), id)
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] sent %s; waiting for the extraction of %s to finish\n", i+1, p.files, path, id)
}

func (p *progress) fileDone(i int, f localFile, r uploadResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.doneBytes += f.size
	if p.tty {
		if r.Error != "" {
			fmt.Fprintf(p.w, "\r\033[Kfailed %s: %s\n", f.path, r.Error)
		}
		p.draw(i, f.path, p.doneBytes)
		return
	}
	if r.Error != "" {
		fmt.Fprintf(p.w, "[%d/%d] failed %s: %s\n", i+1, p.files, f.path, r.Error)
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] uploaded %s (%s) as %s, %s/%s total\n", i+1, p.files, f.path,
		humanBytes(f.size), r.ContentID, humanBytes(p.doneBytes), humanBytes(p.total))
}

func (p *progress) finish() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// readAll reads a spec from stdin.
func readAll(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("empty input")
	}
	return b, nil
}
