// Package repocheck holds tests of the repository itself: promises that
// docs and CI scripts make about the code, checked against the code.
package repocheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository root (this package is test/repocheck).
const root = "../.."

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)

// fuzzTargets finds every fuzz target of the main module: target -> its
// package as `./dir`. Nested modules (their own go.mod) are skipped: CI
// fuzzes the main module.
func fuzzTargets(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root {
				if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = "./" + filepath.ToSlash(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no fuzz targets found: the walk is broken")
	}
	return out
}

// Every fuzz target is fuzzed by CI (a `fuzz Target ./pkg` line of .ci/run,
// naming the target's package), every such line names a target that exists,
// and docs/security.md names every target.
func TestEveryFuzzTargetIsFuzzedInCIAndDocumented(t *testing.T) {
	targets := fuzzTargets(t)
	run, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^fuzz (\S+) (\S+)\s*$`).FindAllStringSubmatch(string(run), -1) {
		listed[m[1]] = m[2]
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(targets))
	for name := range targets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pkg := targets[name]
		switch got, ok := listed[name]; {
		case !ok:
			t.Errorf(".ci/run does not fuzz %s (%s): add `fuzz %s %s`", name, pkg, name, pkg)
		case got != pkg:
			t.Errorf(".ci/run fuzzes %s in %s; it is in %s", name, got, pkg)
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/security.md does not name the fuzz target `%s` (%s)", name, pkg)
		}
	}
	for name, pkg := range listed {
		if _, ok := targets[name]; !ok {
			t.Errorf(".ci/run fuzzes %s in %s, which does not exist", name, pkg)
		}
	}
}
