package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// decodeJSON parses a JSON request body into v. Unknown fields are ignored
// because the original clients send extra fields we have no use for.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
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
	if _, err := dec.Token(); err != io.EOF {
		return badRequest(codeInvalidJSON, "invalid JSON body: unexpected data after the JSON value")
	}
	return nil
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

// queryLimit parses the optional `limit` query parameter.
func queryLimit(r *http.Request) (uint32, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, badRequest(codeInvalidArgument, "limit %q is not a non-negative integer", s)
	}
	return uint32(n), nil
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
