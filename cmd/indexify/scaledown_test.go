package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestScaleDownLeave(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	three := write("three", "3\n")
	cases := []struct {
		name, id, file string
		leave          bool
	}{
		{"restart of a kept pod", "indexify-coordinator-2", three, false},
		{"scaled away", "indexify-coordinator-3", three, true},
		{"far above", "indexify-coordinator-10", three, true},
		{"pod zero", "indexify-coordinator-0", three, false},
		{"no file flag", "indexify-coordinator-4", "", false},
		{"missing file", "indexify-coordinator-4", filepath.Join(dir, "nope"), false},
		{"garbage count", "indexify-coordinator-4", write("bad", "three"), false},
		{"zero count", "indexify-coordinator-4", write("zero", "0"), false},
		{"no ordinal", "coordinator", three, false},
		{"empty ordinal", "coordinator-", three, false},
		{"leading zero is not an ordinal", "coordinator-03", three, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := scaleDownLeave(c.id, c.file)
			if got != c.leave {
				t.Fatalf("scaleDownLeave(%q, %q) = %v (%s), want %v", c.id, c.file, got, why, c.leave)
			}
			if why == "" {
				t.Fatal("no reason given")
			}
		})
	}
}
