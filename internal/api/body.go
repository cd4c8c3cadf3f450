package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/indexify-go/indexify/internal/wire"
)

// maxJSONBody bounds non-upload request bodies (graph specs, label updates):
// they are parsed in memory, unlike file uploads which are streamed.
const maxJSONBody = 4 << 20

// readBody reads a small request body, refusing more than limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(limit)
		}
		return nil, badRequest(codeInvalidArgument, "reading request body: %v", err)
	}
	return b, nil
}

// codeUnsupportedMediaType: a body route got a Content-Type it does not take.
const codeUnsupportedMediaType = "unsupported_media_type"

// isJSONType reports whether a media type is JSON (application/json or a
// +json type).
func isJSONType(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// isYAMLType reports whether a media type is one of YAML's usual names.
func isYAMLType(mt string) bool {
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml":
		return true
	}
	return false
}

// requireMediaType refuses a body whose Content-Type is missing or not
// accepted (415). Browsers send text/plain, form types or no type at all
// cross-site without a CORS preflight; requiring JSON (or YAML where
// documented) turns such forged writes into errors.
func requireMediaType(r *http.Request, yamlToo bool) (string, error) {
	ct := r.Header.Get("Content-Type")
	mt := mediaType(ct)
	if isJSONType(mt) || (yamlToo && isYAMLType(mt)) {
		return mt, nil
	}
	want := "application/json"
	if yamlToo {
		want = "application/json or application/yaml"
	}
	if ct == "" {
		return "", newError(http.StatusUnsupportedMediaType, codeUnsupportedMediaType, "request has no Content-Type; send %s", want)
	}
	return "", newError(http.StatusUnsupportedMediaType, codeUnsupportedMediaType, "Content-Type %q is not accepted here; send %s", ct, want)
}

// decodeJSON parses a JSON request body into v. Unknown fields are ignored
// because the original clients send extra fields we have no use for.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if _, err := requireMediaType(r, false); err != nil {
		return err
	}
	b, err := readBody(w, r, maxJSONBody)
	if err != nil {
		return err
	}
	return unmarshalJSON(b, v)
}

func unmarshalJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return badRequest(codeInvalidJSON, "request body is empty, expected JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return badRequest(codeInvalidJSON, "invalid JSON body: %v", err)
	}
	if err := checkDuplicateKeys(b); err != nil {
		return badRequest(codeInvalidJSON, "invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(codeInvalidJSON, "invalid JSON body: unexpected data after the JSON value")
	}
	return nil
}

// checkDuplicateKeys refuses an object with the same key twice, at any
// depth: encoding/json would keep the last silently, while YAML specs
// refuse duplicates; one rule for both. b is already known to be valid JSON.
func checkDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if seen[key] {
					return fmt.Errorf("duplicate key %q", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // '}'
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token() // ']'
			return err
		}
		return nil
	}
	return walk()
}

func compactJSON(w *strings.Builder, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return err
	}
	if buf.Len() == 0 {
		return errors.New("empty JSON value")
	}
	w.Write(buf.Bytes())
	return nil
}

// Page sizes of list routes (content, tasks): the one rule of every list
// call (wire.PageLimit), which the coordinator's gRPC list calls apply too.
const (
	MaxPageSize     = wire.MaxPageSize
	DefaultPageSize = wire.DefaultPageSize
)

// queryLimit parses the optional `limit` query parameter by the page-size
// rule: absent or 0 is DefaultPageSize, more than MaxPageSize is a 400.
func queryLimit(r *http.Request) (uint32, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return DefaultPageSize, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, badRequest(codeInvalidArgument, "limit %q is not a non-negative integer", s)
	}
	limit, err := wire.PageLimit(n)
	if err != nil {
		return 0, limitError("%v", err)
	}
	return limit, nil
}

// optionalID validates an id of the given kind (see validateKind) given in
// a query parameter, if any.
func optionalID(r *http.Request, param, kind string) (string, error) {
	v := r.URL.Query().Get(param)
	if v == "" {
		return "", nil
	}
	return v, validateKind(kind, v)
}
