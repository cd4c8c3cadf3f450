// Package config fills command-line flags that were not given from the
// environment and from an optional YAML file, so every setting has exactly
// one name: the flag `--data-dir` is `INDEXIFY_DATA_DIR` in the environment
// and `data_dir:` in the file. Precedence: flag, then environment, then file,
// then the flag's default.
package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// EnvPrefix is prepended to every environment variable name.
const EnvPrefix = "INDEXIFY_"

// EnvName returns the environment variable for a flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// FileKey returns the YAML key for a flag name.
func FileKey(flag string) string { return strings.ReplaceAll(flag, "-", "_") }

// Apply sets every flag of fs that was not given on the command line from
// the environment or from the YAML file at path ("" = no file). Unknown keys
// in the file are an error, so a typo never silently does nothing.
func Apply(fs *pflag.FlagSet, path string) error {
	file := map[string]any{}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		for k := range file {
			if fs.Lookup(strings.ReplaceAll(k, "_", "-")) == nil {
				return fmt.Errorf("config file %s: unknown setting %q", path, k)
			}
		}
	}
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if err := f.Value.Set(v); err != nil {
				firstErr = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err)
			}
			return
		}
		v, ok := file[FileKey(f.Name)]
		if !ok {
			return
		}
		for _, s := range fileValues(v) {
			if err := f.Value.Set(s); err != nil {
				firstErr = fmt.Errorf("config file %s: %s: %w", path, FileKey(f.Name), err)
				return
			}
		}
	})
	return firstErr
}

// fileValues turns a YAML value into the strings a flag's Set accepts; a
// list sets a slice flag element by element.
func fileValues(v any) []string {
	switch x := v.(type) {
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
		return out
	case nil:
		return nil
	default:
		return []string{fmt.Sprint(x)}
	}
}
