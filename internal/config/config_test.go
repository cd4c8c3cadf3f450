package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func newFlags() (*pflag.FlagSet, *string, *int, *[]string) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	dir := fs.String("data-dir", "default-dir", "")
	n := fs.Int("bootstrap-expect", 1, "")
	tags := fs.StringSlice("tags", nil, "")
	return fs, dir, n, tags
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedenceFlagThenEnvThenFileThenDefault(t *testing.T) {
	file := writeFile(t, "data_dir: from-file\nbootstrap_expect: 3\ntags: [a, b]\n")

	fs, dir, n, tags := newFlags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, file); err != nil {
		t.Fatal(err)
	}
	if *dir != "from-file" || *n != 3 || strings.Join(*tags, ",") != "a,b" {
		t.Fatalf("file not applied: %q %d %v", *dir, *n, *tags)
	}

	t.Setenv("INDEXIFY_DATA_DIR", "from-env")
	fs, dir, n, _ = newFlags()
	_ = fs.Parse(nil)
	if err := Apply(fs, file); err != nil {
		t.Fatal(err)
	}
	if *dir != "from-env" || *n != 3 {
		t.Fatalf("env should beat the file: %q %d", *dir, *n)
	}

	fs, dir, _, _ = newFlags()
	_ = fs.Parse([]string{"--data-dir", "from-flag"})
	if err := Apply(fs, file); err != nil {
		t.Fatal(err)
	}
	if *dir != "from-flag" {
		t.Fatalf("flag should win: %q", *dir)
	}

	os.Unsetenv("INDEXIFY_DATA_DIR")
	fs, dir, n, _ = newFlags()
	_ = fs.Parse(nil)
	if err := Apply(fs, ""); err != nil {
		t.Fatal(err)
	}
	if *dir != "default-dir" || *n != 1 {
		t.Fatalf("defaults changed without any source: %q %d", *dir, *n)
	}
}

func TestBadSourcesAreErrors(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key": "data_dri: typo\n",
		"bad value":   "bootstrap_expect: three\n",
		"bad yaml":    "data_dir: [unclosed\n",
	} {
		fs, _, _, _ := newFlags()
		_ = fs.Parse(nil)
		if err := Apply(fs, writeFile(t, body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	t.Setenv("INDEXIFY_BOOTSTRAP_EXPECT", "many")
	fs, _, _, _ := newFlags()
	_ = fs.Parse(nil)
	if err := Apply(fs, ""); err == nil || !strings.Contains(err.Error(), "INDEXIFY_BOOTSTRAP_EXPECT") {
		t.Errorf("bad env value: %v", err)
	}
	fs, _, _, _ = newFlags()
	_ = fs.Parse(nil)
	if err := Apply(fs, filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("missing file accepted")
	}
}
