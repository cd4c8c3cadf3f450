package api

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/indexify-go/indexify/internal/state"
)

// maxIDLen bounds every name and id taken from a request.
const maxIDLen = 256

// validateID checks a namespace, graph, policy, content, task or executor
// id. Ids end up in blob keys and URL paths, so anything that could change a
// path's meaning ('/', '\', "..") or corrupt logs (control characters) is
// refused before any work is done.
func validateID(kind, v string) error {
	switch {
	case v == "":
		return badRequest(codeInvalidID, "%s is empty", kind)
	case len(v) > maxIDLen:
		return badRequest(codeInvalidID, "%s is longer than %d bytes", kind, maxIDLen)
	case !utf8.ValidString(v):
		return badRequest(codeInvalidID, "%s %q is not valid UTF-8", kind, v)
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
func newRequestID() string { return randomHex(16) }

// childContentID is the deterministic id of the index-th output of a task:
// a retried task overwrites its earlier output instead of duplicating it.
func childContentID(taskID string, index int) string {
	sum := sha256.Sum256([]byte(taskID + "/" + strconv.Itoa(index)))
	return hex.EncodeToString(sum[:])[:16]
}
