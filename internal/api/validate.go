package api

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/indexify-go/indexify/internal/requestid"
	"github.com/indexify-go/indexify/internal/state"
)

// maxIDLen bounds every id taken from a request, in characters; names and
// content ids have the coordinator's tighter limit, maxNameLen.
const (
	maxIDLen   = 256
	maxNameLen = 128
)

// checkLength refuses v longer than max characters, with the one wording
// every length error of ids and names uses.
func checkLength(kind, v string, max int) error {
	if n := utf8.RuneCountInString(v); n > max {
		return badRequest(codeInvalidID, "%s is %d characters long; the limit is %d characters", kind, n, max)
	}
	return nil
}

// validateID checks a namespace, graph, policy, content, task or executor
// id. Ids end up in blob keys and URL paths, so anything that could change a
// path's meaning ('/', '\', "..") or corrupt logs (control characters) is
// refused before any work is done.
func validateID(kind, v string) error {
	switch {
	case v == "":
		return badRequest(codeInvalidID, "%s is empty", kind)
	case !utf8.ValidString(v):
		return badRequest(codeInvalidID, "%s %q is not valid UTF-8", kind, v)
	case checkLength(kind, v, maxIDLen) != nil:
		return checkLength(kind, v, maxIDLen)
	case strings.ContainsAny(v, `/\`):
		return badRequest(codeInvalidID, "%s %q must not contain '/' or '\\'", kind, v)
	case v == "." || strings.Contains(v, ".."):
		return badRequest(codeInvalidID, "%s %q must not be '.' or contain '..'", kind, v)
	case strings.ContainsFunc(v, unicode.IsControl):
		return badRequest(codeInvalidID, "%s %q must not contain control characters", kind, v)
	}
	return nil
}

// validateName checks a namespace, graph or policy name: the generic id
// rules, then the coordinator's own naming rule, so a name the coordinator
// would refuse is refused here before any bytes are stored.
func validateName(kind, v string) error {
	if err := validateID(kind, v); err != nil {
		return err
	}
	if err := checkLength(kind, v, maxNameLen); err != nil {
		return err
	}
	if err := state.ValidName(v); err != nil {
		return badRequest(codeInvalidID, "%s: %v", kind, err)
	}
	return nil
}

// validateContentID is validateName for content ids.
func validateContentID(kind, v string) error {
	if err := validateID(kind, v); err != nil {
		return err
	}
	if err := checkLength(kind, v, maxNameLen); err != nil {
		return err
	}
	if len(v) > maxNameLen {
		// The coordinator stores at most 128 bytes; an id of non-ASCII
		// characters reaches that before 128 characters.
		return badRequest(codeInvalidID, "%s is %d characters but %d bytes of UTF-8; the limit is %d bytes", kind, utf8.RuneCountInString(v), len(v), maxNameLen)
	}
	if err := state.ValidContentID(v); err != nil {
		return badRequest(codeInvalidID, "%s: %v", kind, err)
	}
	return nil
}

// Kinds of ids; validateIDs picks each kind's rule.
const (
	kindNamespace = "namespace"
	kindGraph     = "extraction graph"
	kindPolicy    = "extraction policy"
	kindContent   = "content id"
)

// validateKind validates one id by the rule of its kind.
func validateKind(kind, v string) error {
	switch kind {
	case kindNamespace, kindGraph, kindPolicy:
		return validateName(kind, v)
	case kindContent:
		return validateContentID(kind, v)
	}
	return validateID(kind, v)
}

// validateIDs validates several (kind, value) pairs in order.
func validateIDs(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := validateKind(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// validateText checks free-form names (extractor names, which the original
// system spelled "tensorlake/minilm-l6") for emptiness and control
// characters only; the coordinator decides whether such an extractor exists.
func validateText(kind, v string) error {
	switch {
	case v == "":
		return badRequest(codeInvalidArgument, "%s is empty", kind)
	case len(v) > 1024:
		return badRequest(codeInvalidArgument, "%s is longer than 1024 bytes", kind)
	case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
		return badRequest(codeInvalidArgument, "%s %q contains invalid or control characters", kind, v)
	}
	return nil
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newContentID is the id of content uploaded without one: 16 hex chars, as
// the original server generated.
func newContentID() string { return randomHex(8) }

// newRequestID makes the idempotency key of one write. The same key is
// reused when the write is retried, so the coordinator applies it once.
var newRequestID = requestid.New

// childContentID is the deterministic id of the index-th output of a task
// (a retried task overwrites its earlier output instead of duplicating it).
// It is the coordinator's rule, state.ChildContentID, not a copy of it.
var childContentID = state.ChildContentID
