package api

// Optional bearer tokens. A tokens file lists tokens, each scoped to
// namespaces (or "*") and given a role: "user" for the public routes,
// "executor" additionally for /internal/ (task results). The file is
// re-read when it changes, so tokens are added or revoked without restart.

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Token roles.
const (
	RoleUser     = "user"
	RoleExecutor = "executor"
)

// MinTokenLen is the shortest accepted token.
const MinTokenLen = 16

const (
	codeUnauthenticated  = "unauthenticated"
	codePermissionDenied = "permission_denied"
)

// TokenEntry is one line of the tokens file.
type TokenEntry struct {
	Token      string   `yaml:"token"`
	Namespaces []string `yaml:"namespaces"` // ["*"] for all
	Role       string   `yaml:"role"`       // user (default) or executor
}

func (e *TokenEntry) allows(ns string) bool {
	return slices.Contains(e.Namespaces, "*") || slices.Contains(e.Namespaces, ns)
}

// ParseTokens parses the tokens file's YAML: a list of TokenEntry.
func ParseTokens(data []byte) ([]TokenEntry, error) {
	var list []TokenEntry
	if err := yaml.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("tokens file: want a YAML list of {token, namespaces, role}: %v", err)
	}
	seen := map[string]bool{}
	for i := range list {
		e := &list[i]
		switch {
		case len(e.Token) < MinTokenLen:
			return nil, fmt.Errorf("tokens file: entry %d: token must be at least %d characters", i+1, MinTokenLen)
		case strings.ContainsAny(e.Token, " \t\r\n"):
			return nil, fmt.Errorf("tokens file: entry %d: token contains whitespace", i+1)
		case seen[e.Token]:
			return nil, fmt.Errorf("tokens file: entry %d: token listed twice", i+1)
		case len(e.Namespaces) == 0:
			return nil, fmt.Errorf("tokens file: entry %d: namespaces is empty (use [\"*\"] for all)", i+1)
		}
		seen[e.Token] = true
		if e.Role == "" {
			e.Role = RoleUser
		}
		if e.Role != RoleUser && e.Role != RoleExecutor {
			return nil, fmt.Errorf("tokens file: entry %d: role %q: want user or executor", i+1, e.Role)
		}
	}
	return list, nil
}

// Tokens is a tokens file, re-read when its modification time or size
// changes. A file that stops parsing keeps the previous tokens in force
// (and is logged), so a bad edit does not lock everyone out.
type Tokens struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	stamp   os.FileInfo
	byHash  map[[32]byte]*TokenEntry
	badSeen os.FileInfo
}

// LoadTokensFile reads path; an invalid file is an error at start.
func LoadTokensFile(path string, log *slog.Logger) (*Tokens, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Tokens{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	if err := t.load(fi); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokens) load(fi os.FileInfo) error {
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	list, err := ParseTokens(data)
	if err != nil {
		return err
	}
	m := make(map[[32]byte]*TokenEntry, len(list))
	for i := range list {
		m[sha256.Sum256([]byte(list[i].Token))] = &list[i]
	}
	t.byHash, t.stamp = m, fi
	return nil
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// lookup finds the entry of a presented token. Tokens are looked up by
// their SHA-256 and then compared in constant time, so response timing
// says nothing about how much of a guess was right.
func (t *Tokens) lookup(tok string) *TokenEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := os.Stat(t.path); err == nil && !sameFile(fi, t.stamp) && !sameFile(fi, t.badSeen) {
		if err := t.load(fi); err != nil {
			t.badSeen = fi
			t.log.Warn("tokens file changed but is invalid; keeping the previous tokens", "err", err)
		} else {
			t.log.Info("tokens file reloaded", "tokens", len(t.byHash))
		}
	}
	e := t.byHash[sha256.Sum256([]byte(tok))]
	if e == nil || subtle.ConstantTimeCompare([]byte(e.Token), []byte(tok)) != 1 {
		return nil
	}
	return e
}

// routeNamespace returns the {ns} segment of /namespaces/{ns}/..., decoded
// exactly as http.ServeMux decodes it for r.PathValue("ns").
func routeNamespace(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/namespaces/")
	if !ok {
		return "", false
	}
	seg, _, _ := strings.Cut(rest, "/")
	ns, err := url.PathUnescape(seg)
	if err != nil || ns == "" {
		return "", false
	}
	return ns, true
}

var errNoToken = errors.New("missing bearer token")

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", errNoToken
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", errors.New("Authorization header must be 'Bearer <token>'")
	}
	return strings.TrimSpace(tok), nil
}

// openRoute: the banner (liveness probes), the OpenAPI document and the
// console's static files carry no data and need no token.
func openRoute(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/" || p == "/api-docs/openapi.json" || p == "/ui" || strings.HasPrefix(p, "/ui/")
}

// authenticate enforces tokens when configured:
//   - GET /, the OpenAPI document and the console's files need none;
//   - /metrics, /cluster, /executors need a token for "*";
//   - every other route needs a known token (else 401);
//   - /namespaces/{ns}/... needs a token allowing ns (else 403);
//   - /namespaces itself (list, create) needs a token for "*";
//   - /extractors needs any known token;
//   - /internal/... (task results) needs the executor role.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openRoute(r) {
			next.ServeHTTP(w, r)
			return
		}
		tok, err := bearer(r)
		if err != nil {
			deny(w, http.StatusUnauthorized, codeUnauthenticated, err.Error()+" (this server requires API tokens)")
			return
		}
		e := s.cfg.Tokens.lookup(tok)
		if e == nil {
			deny(w, http.StatusUnauthorized, codeUnauthenticated, "unknown or revoked token")
			return
		}
		path := r.URL.Path
		switch ns, ok := routeNamespace(r); {
		case ok:
			if !e.allows(ns) {
				deny(w, http.StatusForbidden, codePermissionDenied, fmt.Sprintf("token is not allowed to access namespace %q", ns))
				return
			}
		case strings.HasPrefix(path, "/namespaces"):
			// /namespaces itself, and anything under it whose namespace
			// segment does not parse: all-namespaces tokens only.
			if !e.allows("*") {
				deny(w, http.StatusForbidden, codePermissionDenied, "listing or creating namespaces needs a token for all namespaces (\"*\")")
				return
			}
		case path == "/metrics" || path == "/cluster" || path == "/executors":
			if !e.allows("*") {
				deny(w, http.StatusForbidden, codePermissionDenied, "operator routes need a token for all namespaces (\"*\")")
				return
			}
		case strings.HasPrefix(path, "/internal/"):
			if e.Role != RoleExecutor {
				deny(w, http.StatusForbidden, codePermissionDenied, "executor routes need a token with role executor")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func deny(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="indexify"`)
	}
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// LoadTokenFile reads one token (an executor's own), trimming whitespace.
func LoadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenLen {
		return "", fmt.Errorf("token in %s is shorter than %d characters", path, MinTokenLen)
	}
	return tok, nil
}
