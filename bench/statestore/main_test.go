package main

import (
	"path/filepath"
	"testing"

	"github.com/indexify-go/indexify/internal/state/layout"
	pb "github.com/indexify-go/indexify/proto/indexifypb"
)

// The tiny form of the measurement, on both engines: load, read, reopen,
// and a checkpoint that opens on its own at the same applied index with the
// same records.
func TestLoadReopenCheckpoint(t *testing.T) {
	for _, kind := range []string{"pebble", "bbolt"} {
		t.Run(kind, func(t *testing.T) {
			const n, batch = 3000, 1000
			dir := filepath.Join(t.TempDir(), "db")
			e, err := openEngine(kind, dir, 8<<20, false)
			if err != nil {
				t.Fatal(err)
			}
			load(e, n, batch, 0.9)
			reads(e, n)
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
			// 3 ingest batches + assigns of batches 0 and 1 (cut = 2); no
			// completion (k < cut-5 never holds at this size).
			const wantApplied = 5
			e, err = openEngine(kind, dir, 8<<20, false)
			if err != nil {
				t.Fatal(err)
			}
			ck := filepath.Join(t.TempDir(), "ck")
			if _, err := e.checkpoint(ck); err != nil {
				t.Fatal(err)
			}
			if err := e.close(); err != nil {
				t.Fatal(err)
			}
			c, err := openEngine(kind, ck, 8<<20, false)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			v, ok, err := c.get(layout.MetaKey(layout.MetaApplied))
			if err != nil || !ok {
				t.Fatalf("applied index in checkpoint: %v %v", ok, err)
			}
			if got, _ := layout.DecodeUint(v); got != wantApplied {
				t.Fatalf("checkpoint applied index %d, want %d", got, wantApplied)
			}
			want, task := item(n - 1)
			v, ok, err = c.get(layout.ContentKey(ns, want.Id))
			if err != nil || !ok {
				t.Fatalf("last content in checkpoint: %v %v", ok, err)
			}
			var got pb.Content
			if err := layout.DecodeRecord(v, &got); err != nil || got.Id != want.Id || got.ParentId != want.ParentId {
				t.Fatalf("content %v %v", &got, err)
			}
			pending := 0
			p := layout.PendingPrefix(task.Extractor)
			if err := c.scan(p, func(k, _ []byte) bool { pending++; return true }); err != nil {
				t.Fatal(err)
			}
			// The last batch (items 2000-2999) stays pending; 10 of its items are
			// documents (chunker), so 990 embedding tasks.
			if pending != 990 {
				t.Fatalf("%d pending embedding tasks, want 990", pending)
			}
		})
	}
}
